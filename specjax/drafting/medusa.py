"""Training Medusa heads (`specjax.proposers.medusa`) on the target's own decodes.

The target is frozen: each step runs it teacher-forced over a batch of its own decoder
sequences (prompt, then its greedy output) for the final hidden states, and head k at
position t learns the token at t + 1 + k by cross-entropy through the target's output
projection; positions from the prompt's last token on, labels up to the output's EOS.
The loop, its checkpoints and its resume are `specjax.drafting.fit`'s.

Shape letters: B rows, T sequence positions, K heads, D hidden width, V vocab, S inputs.
"""
from __future__ import annotations

from typing import Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

from specjax.drafting import fit as fit_lib
from specjax.proposers.medusa import MedusaHeads, head_states


# The settings of a run (`specjax.drafting.fit.Training`).
MedusaTraining = fit_lib.Training


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


def loss_fn(heads: dict, model: MedusaHeads, tp, inputs: jax.Array,
            seqs: jax.Array, spans: jax.Array):
  """(mean cross-entropy over the counted labels of every head, per-head accuracy [K])."""
  target = model.target
  _, _, hidden = fit_lib.teacher_forced(target, tp, inputs, seqs)  # [B, T, D]
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


def make_step(model: MedusaHeads, tx: optax.GradientTransformation) -> Callable:
  """`specjax.drafting.fit.make_step` of `loss_fn`."""
  return fit_lib.make_step(loss_fn, model, tx)


def train(model: MedusaHeads, tp, data: tuple, workdir: str, cfg: fit_lib.Training,
          init: Optional[dict] = None, progress: bool = True,
          on_save: Optional[Callable[[int], None]] = None) -> dict:
  """Trains the heads (`specjax.drafting.fit.fit`); returns {'heads', 'step', 'loss',
  'accuracy' [K]} of the last step.

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
  heads = init if init is not None else model.init(jax.random.PRNGKey(cfg.seed))
  result = fit_lib.fit(lambda tx: make_step(model, tx), heads, tp, data, workdir, cfg,
                       'medusa heads', progress, on_save)
  if np.ndim(result['accuracy']) == 0:  # no step ran (resumed at the end)
    result['accuracy'] = [float('nan')] * model.num_heads
  return {'heads': result.pop('params'), **result}
