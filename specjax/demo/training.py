"""Supervised training of a T5 on token pairs: the masked loss, the jitted Adafactor step,
and a resumable, time-budgeted loop with orbax checkpoints. The fixed-shape batches live in
`training_data` (its names are re-exported here).

Targets follow T5X: the decoder input is the target shifted right with the start token 0,
the loss covers every target token including EOS and skips padding (id 0). Shape letters:
B batch, S encoder length, T decoder length, V vocab.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.demo.training_data import (PAD_ID, Bucket, BucketedData,  # pylint: disable=unused-import
                                   assign_buckets, eval_batches, pad_rows, shift_right)

PyTree = Any


def cross_entropy(logits: jax.Array, targets: jax.Array) -> Tuple[jax.Array, jax.Array,
                                                                    jax.Array]:
  """Token cross-entropy summed over non-pad targets.

  Args:
    logits: [B, T, V] float32, position t predicting targets[:, t].
    targets: [B, T] int32, PAD_ID (0) where there is no token.

  Returns:
    (sum of -log p over non-pad positions, number of non-pad positions, number of them
    whose argmax is the target); pad positions contribute nothing whatever their logits.
  """
  mask = targets != PAD_ID  # [B, T]
  logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, T, V]
  nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]  # [B, T]
  correct = (jnp.argmax(logits, axis=-1) == targets) & mask  # [B, T]
  return (jnp.sum(jnp.where(mask, nll, 0.0)), jnp.sum(mask).astype(jnp.float32),
          jnp.sum(correct).astype(jnp.float32))


def soft_kl(logits: jax.Array, soft_ids: jax.Array, soft_logp: jax.Array,
            targets: jax.Array) -> jax.Array:
  """Sum over non-pad positions of KL(teacher || model), the teacher given by its top-K.

  Args:
    logits: [B, T, V] the model's.
    soft_ids: [B, T, K] int, the teacher's K most likely tokens per position.
    soft_logp: [B, T, K] their log-probs (renormalized here over the K).
    targets: [B, T], PAD_ID where no position.
  """
  logq = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [B, T, V]
  logq = jnp.take_along_axis(logq, soft_ids.astype(jnp.int32), axis=-1)  # [B, T, K]
  logp = jax.nn.log_softmax(soft_logp.astype(jnp.float32), axis=-1)  # [B, T, K]
  kl = jnp.sum(jnp.exp(logp) * (logp - logq), axis=-1)  # [B, T]
  return jnp.sum(jnp.where(targets != PAD_ID, kl, 0.0))


def loss_fn(model, params: PyTree, inputs: jax.Array, targets: jax.Array,
            soft_ids: Optional[jax.Array] = None, soft_logp: Optional[jax.Array] = None,
            soft_weight: float = 0.0, dropout_rate: float = 0.0,
            dropout_rng: Optional[jax.Array] = None
            ) -> Tuple[jax.Array, Dict[str, jax.Array]]:
  """Mean token loss of teacher-forced targets [B, T] given inputs [B, S].

  Cross-entropy; with soft targets (a teacher's top-K [B, T, K], see `soft_kl`),
  (1 - soft_weight) * cross-entropy + soft_weight * KL(teacher || model) per token:
  every position then teaches the teacher's whole distribution, not just one token.
  dropout_rate > 0 (with dropout_rng) trains with T5X's dropout (see `T5.logits`).
  """
  extra = {'dropout_rate': dropout_rate, 'dropout_rng': dropout_rng} if dropout_rate else {}
  logits = model.logits(params, inputs, shift_right(targets), **extra)  # [B, T, V]
  total, count, correct = cross_entropy(logits, targets)
  aux = {'tokens': count, 'correct': correct}
  loss = total / jnp.maximum(count, 1.0)
  if soft_ids is not None:
    kl = soft_kl(logits, soft_ids, soft_logp, targets) / jnp.maximum(count, 1.0)
    loss, aux['kl'] = (1.0 - soft_weight) * loss + soft_weight * kl, kl
  return loss, aux


@flax.struct.dataclass
class TrainState:
  """What one training step reads and returns.

  Attributes:
    step: [] int32, steps taken.
    params: the model's float32 param tree.
    opt_state: Adafactor's state (factored second moments per matrix).
  """

  step: jax.Array
  params: PyTree
  opt_state: PyTree


def make_optimizer() -> optax.GradientTransformation:
  """Adafactor as T5X uses it (factored, update clipping 1.0, relative to the param scale).

  Built with learning rate 1; the step multiplies the update by the scheduled rate, which
  the host computes (the schedule may depend on elapsed time, see `learning_rate`).
  """
  return optax.adafactor(learning_rate=1.0)


def init_state(model, tx: optax.GradientTransformation, rng: jax.Array) -> TrainState:
  """Fresh params from `model.init` and a zero optimizer state."""
  params = model.init(rng)
  return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))


def make_train_step(model, tx: optax.GradientTransformation, soft_weight: float = 0.0,
                    dropout_rate: float = 0.0, seed: int = 0) -> Callable:
  """The jitted step (state, lr, inputs [B, S], targets [B, T][, soft_ids, soft_logp]) ->
  (state, metrics), i.e. `step(state, lr, *data.batch(k))`.

  Compiles once per batch shape; metrics are 'loss' (mean over target tokens), 'tokens'
  and 'correct' (and 'kl' with soft targets, see `loss_fn`). The dropout masks of step k
  come from PRNGKey(seed) folded with k, so a resumed run draws the same masks.
  """

  def step(state: TrainState, lr, inputs, targets, *soft):
    rng = jax.random.fold_in(jax.random.PRNGKey(seed), state.step)
    (loss, aux), grads = jax.value_and_grad(
        lambda p: loss_fn(model, p, inputs, targets, *soft, soft_weight=soft_weight,
                          dropout_rate=dropout_rate, dropout_rng=rng),
        has_aux=True)(state.params)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    updates = jax.tree.map(lambda u: lr * u, updates)
    params = optax.apply_updates(state.params, updates)
    return TrainState(state.step + 1, params, opt_state), {'loss': loss, **aux}

  return jax.jit(step)


def make_eval_step(model) -> Callable:
  """The jitted (params, inputs, targets) -> (sum of nll, tokens, correct) of one batch."""
  return jax.jit(lambda params, inputs, targets: cross_entropy(
      model.logits(params, inputs, shift_right(targets)), targets))


def evaluate(eval_step: Callable, params: PyTree,
             batches: Sequence[Tuple[np.ndarray, np.ndarray]]) -> Dict[str, float]:
  """Token-mean loss and accuracy (argmax == target) over `eval_batches`."""
  total = count = correct = 0.0
  for inputs, targets in batches:
    t, n, c = eval_step(params, inputs, targets)
    total, count, correct = total + float(t), count + float(n), correct + float(c)
  return {'loss': total / max(count, 1.0), 'accuracy': correct / max(count, 1.0)}


def learning_rate(step: int, progress: float, peak: float, warmup_steps: int) -> float:
  """Linear warmup over `warmup_steps`, then cosine decay to 0 as progress goes 0 -> 1."""
  warm = min(1.0, (step + 1) / max(warmup_steps, 1))
  return peak * warm * 0.5 * (1.0 + math.cos(math.pi * min(max(progress, 0.0), 1.0)))


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """Knobs of one training run.

  Attributes:
    minutes: wall-clock budget of training (restarts add up); 0 means steps only.
    max_steps: step budget; 0 means time only. Progress, which drives the cosine decay
      and the stop, is the larger of step / max_steps and elapsed / minutes, so the
      schedule completes within whichever budget runs out first.
    peak_lr: learning rate after warmup (relative to each param's scale, as Adafactor).
    warmup_steps: linear warmup length.
    eval_every: steps between validation evaluations.
    checkpoint_every_s: seconds between checkpoints (one is also written at the end).
    seed: params init and data order.
    soft_weight: with soft targets, the weight of KL(teacher || model) in the loss.
    dropout_rate: T5X's dropout while training (0.1 in T5 1.1 fine-tuning); 0 for none.
  """

  minutes: float = 30.0
  max_steps: int = 0
  peak_lr: float = 0.01
  warmup_steps: int = 100
  eval_every: int = 200
  checkpoint_every_s: float = 300.0
  seed: int = 0
  soft_weight: float = 0.0
  dropout_rate: float = 0.0


def _progress(step: int, elapsed: float, cfg: TrainConfig) -> float:
  return max(step / cfg.max_steps if cfg.max_steps else 0.0,
             elapsed / (60.0 * cfg.minutes) if cfg.minutes else 0.0)


def _manager(directory: str):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  return ocp, ocp.CheckpointManager(os.path.abspath(directory),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))


def restore_state(directory: str, abstract: TrainState) -> Tuple[Optional[TrainState], dict]:
  """The latest checkpoint under `directory` and its meta, or (None, {}) when none."""
  ocp, manager = _manager(directory)
  with manager:
    step = manager.latest_step()
    if step is None:
      return None, {}
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), meta=ocp.args.JsonRestore()))
  return restored.state, dict(restored.meta)


def train(model, data: BucketedData, val_batches, workdir: str, cfg: TrainConfig,
          log: Callable[[str], None] = print) -> Dict[str, Any]:
  """Trains `model` on `data` until the step or time budget is spent; resumable.

  Checkpoints (params, Adafactor state, step, elapsed seconds) go to `workdir/checkpoints`
  and a rerun continues from the latest one. A tqdm bar shows the loss; validation loss
  and accuracy are logged every `cfg.eval_every` steps.

  Args:
    model: a T5 (anything with `init` and `logits`).
    data: the training batches.
    val_batches: from `eval_batches`.
    workdir: this stage's directory.
    cfg: budgets and optimizer settings.
    log: receives one line per evaluation.

  Returns:
    Summary dict: steps, minutes, examples seen, final train and validation loss and
    validation accuracy. Also written to `workdir/summary.json`.
  """
  from tqdm import tqdm  # pylint: disable=g-import-not-at-top
  tx = make_optimizer()
  train_step = make_train_step(model, tx, cfg.soft_weight, cfg.dropout_rate, cfg.seed)
  eval_step = make_eval_step(model)
  rng = jax.random.PRNGKey(cfg.seed)
  abstract = jax.eval_shape(lambda: init_state(model, tx, rng))
  state, meta = restore_state(os.path.join(workdir, 'checkpoints'), abstract)
  if state is None:
    state, meta = init_state(model, tx, rng), {'elapsed_s': 0.0, 'examples': 0}
  else:
    log(f'resumed at step {int(state.step)} after {meta["elapsed_s"] / 60:.1f} min')
  step, elapsed, examples = int(state.step), float(meta['elapsed_s']), int(meta['examples'])
  ocp, manager = _manager(os.path.join(workdir, 'checkpoints'))

  def save():
    manager.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        meta=ocp.args.JsonSave({'elapsed_s': elapsed, 'examples': examples})))
    manager.wait_until_finished()

  bar = tqdm(total=cfg.max_steps or None, initial=step, unit='step', mininterval=5.0)
  last_save, smooth = time.time(), None
  with manager:
    while _progress(step, elapsed, cfg) < 1.0:
      start = time.time()
      batch = data.batch(step)
      lr = learning_rate(step, _progress(step, elapsed, cfg), cfg.peak_lr, cfg.warmup_steps)
      state, metrics = train_step(state, jnp.float32(lr), *batch)
      loss = float(metrics['loss'])  # also waits for the step, so the timing is honest
      step, examples = step + 1, examples + len(batch[0])
      elapsed += time.time() - start
      smooth = loss if smooth is None else 0.98 * smooth + 0.02 * loss
      bar.update(1)
      bar.set_postfix(loss=f'{smooth:.3f}', lr=f'{lr:.4f}', min=f'{elapsed / 60:.1f}',
                      refresh=False)
      if step % cfg.eval_every == 0:
        val = evaluate(eval_step, state.params, val_batches)
        log(f'step {step} ({elapsed / 60:.1f} min): train loss {smooth:.3f}, '
            f'val loss {val["loss"]:.3f}, val acc {val["accuracy"]:.3f}')
      if time.time() - last_save > cfg.checkpoint_every_s:
        save()
        last_save = time.time()
    bar.close()
    if manager.latest_step() != step:
      save()
  val = evaluate(eval_step, state.params, val_batches)
  summary = {'steps': step, 'minutes': round(elapsed / 60, 2), 'examples_seen': examples,
             'epochs': round(examples / max(len(data), 1), 2),
             'train_loss': None if smooth is None else round(smooth, 4),
             'val_loss': round(val['loss'], 4), 'val_accuracy': round(val['accuracy'], 4)}
  log(f'done: {summary}')
  with open(os.path.join(workdir, 'summary.json'), 'w') as f:
    json.dump(summary, f, indent=2)
  return summary


def load_trained_params(model, workdir: str) -> PyTree:
  """The params of the latest checkpoint that `train` wrote under `workdir`."""
  abstract = jax.eval_shape(lambda: init_state(model, make_optimizer(), jax.random.PRNGKey(0)))
  state, _ = restore_state(os.path.join(workdir, 'checkpoints'), abstract)
  if state is None:
    raise FileNotFoundError(f'no checkpoint under {workdir}/checkpoints; run its training '
                            'stage first')
  return state.params
