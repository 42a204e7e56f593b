"""Training Medusa heads (`specjax.proposers.medusa`) on the target's own decodes.

The target is frozen: each step runs it teacher-forced over a batch of its own decoder
sequences (prompt, then its greedy output) for the final hidden states, and head k at
position t learns the token at t + 1 + k by cross-entropy through the target's output
projection; positions from the prompt's last token on, labels up to the output's EOS.
Adam with warmup and cosine decay. Every `save_every` steps the heads, the optimizer state
and the step go to an orbax checkpoint in the work directory; a rerun resumes from the
latest. A batch is a function of the step alone (rows drawn with fold_in(seed, step)), so
a resumed run computes what an uninterrupted one does.

Shape letters: B rows, T sequence positions, K heads, D hidden width, V vocab, S inputs.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.proposers.medusa import MedusaHeads, head_states


@dataclasses.dataclass(frozen=True)
class MedusaTraining:
  """The settings of a run.

  Attributes:
    steps: optimizer steps in all.
    batch: rows per step.
    learning_rate: the peak, after warmup_steps of linear warmup; cosine decay to 0.
    warmup_steps: of the learning rate.
    save_every: steps between checkpoints (and at the end).
    seed: of the batches.
  """

  steps: int = 1000
  batch: int = 32
  learning_rate: float = 1e-3
  warmup_steps: int = 50
  save_every: int = 100
  seed: int = 0


def head_labels(seqs: jax.Array, spans: jax.Array, num_heads: int):
  """Each head's label at each position and whether it counts: ([B, T, K] int32,
  [B, T, K] bool). Head k (0-based) at position t learns seqs[t + 2 + k], counted from
  the prompt's last token (t >= prompt length - 1) while that label is in the sequence."""
  batch, width = seqs.shape
  t = jnp.arange(width)[None, :, None]  # [1, T, 1]
  ahead = t + 2 + jnp.arange(num_heads)[None, None]  # [1, T, K]
  labels = jnp.take_along_axis(seqs[:, :, None], jnp.minimum(ahead, width - 1), axis=1)
  counts = (t >= spans[:, 0, None, None] - 1) & (ahead < spans[:, 1, None, None])
  return labels.astype(jnp.int32), counts


def loss_fn(heads: dict, model: MedusaHeads, tp, encoded, seqs: jax.Array,
            spans: jax.Array):
  """(mean cross-entropy over the counted labels of every head, per-head accuracy [K])."""
  target = model.target
  cache = target.init_cache(seqs.shape[0], seqs.shape[1])
  _, _, hidden = target.decode(tp, encoded, cache, seqs, jnp.zeros((seqs.shape[0],),
                                                                   jnp.int32),
                               return_hidden=True)  # [B, T, D]
  hidden = jax.lax.stop_gradient(hidden.astype(jnp.float32))
  states = head_states(heads, hidden)  # [B, T, K, D]
  b, t, k, d = states.shape
  logits = target.project(tp, states.reshape(b, t * k, d).astype(hidden.dtype))
  logits = logits.reshape(b, t, k, -1)  # [B, T, K, V]
  labels, counts = head_labels(seqs, spans, k)
  logp = jax.nn.log_softmax(logits, axis=-1)
  nll = -jnp.take_along_axis(logp, labels[..., None], axis=-1)[..., 0]  # [B, T, K]
  weight = counts.astype(jnp.float32)
  loss = jnp.sum(nll * weight) / jnp.maximum(jnp.sum(weight), 1.0)
  right = (jnp.argmax(logits, -1) == labels) & counts
  accuracy = jnp.sum(right, (0, 1)) / jnp.maximum(jnp.sum(counts, (0, 1)), 1)
  return loss, accuracy


def optimizer(cfg: MedusaTraining) -> optax.GradientTransformation:
  schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate,
                                                min(cfg.warmup_steps, cfg.steps - 1) or 1,
                                                max(cfg.steps, 2))
  return optax.adam(schedule)


def batch_rows(seed: int, step: int, num: int, batch: int) -> np.ndarray:
  """The rows of step `step`: a function of (seed, step) alone."""
  key = jax.random.fold_in(jax.random.PRNGKey(seed), step)
  return np.asarray(jax.random.choice(key, num, (min(batch, num),), replace=False))


def make_step(model: MedusaHeads, tx: optax.GradientTransformation) -> Callable:
  """jitted (heads, opt_state, tp, inputs [B, S], seqs [B, T], spans [B, 2]) -> (heads,
  opt_state, loss, accuracy [K])."""
  @jax.jit
  def step(heads, opt_state, tp, inputs, seqs, spans):
    encoded = model.target.encode(tp, inputs)
    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        heads, model, tp, encoded, seqs, spans)
    updates, opt_state = tx.update(grads, opt_state, heads)
    return optax.apply_updates(heads, updates), opt_state, loss, accuracy
  return step


def _manager(directory: str):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  return ocp, ocp.CheckpointManager(os.path.abspath(directory),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))


def train(model: MedusaHeads, tp, data: tuple, workdir: str, cfg: MedusaTraining,
          init: Optional[dict] = None, progress: bool = True,
          on_save: Optional[Callable[[int], None]] = None) -> dict:
  """Trains the heads; returns {'heads', 'step', 'loss', 'accuracy' [K]} of the last step.

  Args:
    model: the heads (their target and K).
    tp: the target's params (frozen).
    data: (inputs [N, S], sequences [N, T], spans [N, 2]) of `specjax.drafting.data`.
    workdir: checkpoints go to workdir/checkpoints; a rerun resumes from the latest.
    cfg: the run's settings.
    init: the heads to start from (default `model.init`: zero residuals).
    progress: a progress bar with the loss.
    on_save: called with the step after each checkpoint (tests stop a run there).
  """
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  inputs, seqs, spans = data
  tx = optimizer(cfg)
  heads = init if init is not None else model.init(jax.random.PRNGKey(cfg.seed))
  opt_state = tx.init(heads)
  ocp, manager = _manager(os.path.join(workdir, 'checkpoints'))
  start = 0
  with manager:
    latest = manager.latest_step()
    if latest is not None:
      restored = manager.restore(latest, args=ocp.args.StandardRestore(
          {'heads': heads, 'opt_state': opt_state}))
      heads, opt_state, start = restored['heads'], restored['opt_state'], latest
    step_fn = make_step(model, tx)
    bar = tqdm(total=cfg.steps, initial=start, unit='step', desc='medusa heads',
               disable=not progress, mininterval=2.0)
    loss, accuracy = float('nan'), np.full((model.num_heads,), np.nan)
    for step in range(start, cfg.steps):
      rows = batch_rows(cfg.seed, step, len(seqs), cfg.batch)
      heads, opt_state, loss, accuracy = step_fn(heads, opt_state, tp, inputs[rows],
                                                 seqs[rows], spans[rows])
      bar.update(1)
      bar.set_postfix(loss=f'{float(loss):.3f}', refresh=False)
      if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
        manager.save(step + 1, args=ocp.args.StandardSave({'heads': heads,
                                                           'opt_state': opt_state}))
        manager.wait_until_finished()
        if on_save is not None:
          on_save(step + 1)
    bar.close()
  return {'heads': heads, 'step': cfg.steps, 'loss': float(loss),
          'accuracy': np.asarray(accuracy).tolist()}
