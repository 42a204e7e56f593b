"""The training loop every kind of learned draft shares: Adam with warmup and cosine
decay over batches of the target's own decodes, orbax checkpoints in the work directory,
and a resume from the latest after a kill.

A batch is a function of the step alone (rows drawn with fold_in(seed, step)), so a resumed
run computes what an uninterrupted one does. Every `save_every` steps the params, the
optimizer state and the step go to workdir/checkpoints.

Shape letters: N training sequences, B rows per step, S inputs, T sequence positions.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclasses.dataclass(frozen=True)
class Training:
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


def optimizer(cfg: Training) -> optax.GradientTransformation:
  """Adam on the schedule of `cfg`."""
  schedule = optax.warmup_cosine_decay_schedule(0.0, cfg.learning_rate,
                                                min(cfg.warmup_steps, cfg.steps - 1) or 1,
                                                max(cfg.steps, 2))
  return optax.adam(schedule)


def batch_rows(seed: int, step: int, num: int, batch: int) -> np.ndarray:
  """The rows of step `step`: a function of (seed, step) alone."""
  key = jax.random.fold_in(jax.random.PRNGKey(seed), step)
  return np.asarray(jax.random.choice(key, num, (min(batch, num),), replace=False))


def teacher_forced(target, tp, inputs: jax.Array, seqs: jax.Array):
  """The frozen target over its own sequences seqs [B, T] for inputs [B, S]: (its
  encoding, logits [B, T, V] float32 (position t's of the token at t + 1), final hidden
  states [B, T, H] float32), no gradient through any."""
  batch, width = seqs.shape
  encoded = target.encode(tp, inputs)
  logits, _, hidden = target.decode(tp, encoded, target.init_cache(batch, width), seqs,
                                    jnp.zeros((batch,), jnp.int32), return_hidden=True)
  return jax.lax.stop_gradient((encoded, logits, hidden.astype(jnp.float32)))


def counted(spans: jax.Array, width: int) -> jax.Array:
  """[B, T] bool: the positions that learn the next token, from the prompt's last token
  while the token after them is in the sequence (spans [B, 2]: the prompt's length and
  the sequence's)."""
  t = jnp.arange(width)[None]
  return (t >= spans[:, :1] - 1) & (t + 1 < spans[:, 1:])


def make_step(loss_fn: Callable, model, tx: optax.GradientTransformation) -> Callable:
  """jitted (params, opt_state, tp, inputs [B, S], seqs [B, T], spans [B, 2]) -> (params,
  opt_state, loss, accuracy): one Adam step on loss_fn(params, model, tp, inputs, seqs,
  spans) -> (loss, accuracy)."""
  @jax.jit
  def step(params, opt_state, tp, inputs, seqs, spans):
    (loss, accuracy), grads = jax.value_and_grad(loss_fn, has_aux=True)(
        params, model, tp, inputs, seqs, spans)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss, accuracy
  return step


def _manager(directory: str):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  return ocp, ocp.CheckpointManager(os.path.abspath(directory),
                                    options=ocp.CheckpointManagerOptions(max_to_keep=2))


def fit(make_step: Callable, params, tp, data: tuple, workdir: str, cfg: Training,
        desc: str, progress: bool = True,
        on_save: Optional[Callable[[int], None]] = None) -> dict:
  """Trains `params`; returns {'params', 'step', 'loss', 'accuracy'} of the last step.

  Args:
    make_step: tx -> jitted (params, opt_state, tp, inputs [B, S], seqs [B, T], spans
      [B, 2]) -> (params, opt_state, loss, accuracy).
    params: where training starts (a checkpoint in workdir takes precedence).
    tp: the target's params (frozen).
    data: (inputs [N, S], sequences [N, T], spans [N, 2]) of `specjax.drafting.data`.
    workdir: checkpoints go to workdir/checkpoints; a rerun resumes from the latest.
    cfg: the run's settings.
    desc: the progress bar's label.
    progress: a progress bar with the loss.
    on_save: called with the step after each checkpoint (tests stop a run there).
  """
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  inputs, seqs, spans = data
  tx = optimizer(cfg)
  opt_state = tx.init(params)
  ocp, manager = _manager(os.path.join(workdir, 'checkpoints'))
  start = 0
  with manager:
    latest = manager.latest_step()
    if latest is not None:
      restored = manager.restore(latest, args=ocp.args.StandardRestore(
          {'heads': params, 'opt_state': opt_state}))
      params, opt_state, start = restored['heads'], restored['opt_state'], latest
    step_fn = make_step(tx)
    bar = tqdm(total=cfg.steps, initial=start, unit='step', desc=desc,
               disable=not progress, mininterval=2.0)
    loss, accuracy = float('nan'), np.nan
    for step in range(start, cfg.steps):
      rows = batch_rows(cfg.seed, step, len(seqs), cfg.batch)
      params, opt_state, loss, accuracy = step_fn(params, opt_state, tp, inputs[rows],
                                                  seqs[rows], spans[rows])
      bar.update(1)
      bar.set_postfix(loss=f'{float(loss):.3f}', refresh=False)
      if (step + 1) % cfg.save_every == 0 or step + 1 == cfg.steps:
        manager.save(step + 1, args=ocp.args.StandardSave({'heads': params,
                                                           'opt_state': opt_state}))
        manager.wait_until_finished()
        if on_save is not None:
          on_save(step + 1)
    bar.close()
  return {'params': params, 'step': cfg.steps, 'loss': float(loss),
          'accuracy': np.asarray(accuracy).tolist()}
