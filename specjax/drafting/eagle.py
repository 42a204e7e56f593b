"""Training an EAGLE head (`specjax.proposers.eagle`) on the target's own decodes.

The target is frozen: each step runs it teacher-forced over a batch of its own decoder
sequences (prompt, then its greedy output) for its final hidden states f and its logits.
The head reads, at each position t, the token there and f[t-1] (zero before the first),
and learns f[t] as EAGLE does: a smooth-L1 regression on the hidden state plus 0.1 times
the cross-entropy of its logits (through the target's own projection) against the
target's distribution of the token at t + 1. Positions count from the prompt's last token
on, while the token they predict is in the sequence. The loop, its checkpoints and its
resume are `specjax.drafting.fit`'s.

A draft deeper than one token feeds the head its own g in place of the target's f. With
`passes` P > 1 the head also learns from its own states, as EAGLE-3's training-time test
does: pass k (k = 2..P) runs the head over the sequence again with g of pass k - 1 at
position t - 1 as the feature of position t, so that its input at t is the one a chain
step at depth k reads (the previous pass's input was one step nearer the target's f); its
loss counts as much as the first pass's. The passes' attention reads their own earlier
positions, where a draft's reads the target's at committed positions: an approximation of
the training-time test's attention, at the cost of one more head call per pass.

Shape letters: B rows, T sequence positions, H hidden width, V vocab, S inputs.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional

import jax
import jax.numpy as jnp
import optax

from specjax.drafting import fit as fit_lib
from specjax.proposers.eagle import EagleHead

# The weight of the cross-entropy beside the hidden-state regression (EAGLE's).
CLASSIFICATION_WEIGHT = 0.1


def _smooth_l1(x: jax.Array) -> jax.Array:
  a = jnp.abs(x)
  return jnp.where(a < 1.0, 0.5 * x * x, a - 0.5)


def loss_fn(own: dict, head: EagleHead, tp, inputs: jax.Array, seqs: jax.Array,
            spans: jax.Array, passes: int = 1):
  """(the loss, the head's top-1 agreement with the target's argmax on its first pass) over
  the counted positions of seqs [B, T]; the loss is the mean over the `passes`."""
  target = head.target
  batch, width = seqs.shape
  encoded, logits, f = fit_lib.teacher_forced(target, tp, inputs, seqs)  # [B,T,V], [B,T,H]
  weight = fit_lib.counted(spans, width).astype(jnp.float32)  # [B, T]
  total = jnp.maximum(jnp.sum(weight), 1.0)
  p = jax.nn.softmax(logits, -1)
  states, loss = f, 0.0
  for k in range(passes):
    feats = jnp.concatenate([jnp.zeros_like(f[:, :1]), states[:, :-1]], axis=1)  # [t-1]
    g, head_logits, _ = head.run({'target': tp, 'own': own}, {'target': encoded},
                                 head.init_cache(batch, width), seqs, feats,
                                 jnp.zeros((batch,), jnp.int32))
    regression = jnp.sum(jnp.mean(_smooth_l1(g - f), -1) * weight) / total
    cross = -jnp.sum(p * jax.nn.log_softmax(head_logits, -1), -1)
    classification = jnp.sum(cross * weight) / total
    loss = loss + (regression + CLASSIFICATION_WEIGHT * classification) / passes
    if k == 0:
      agree = (jnp.argmax(head_logits, -1) == jnp.argmax(logits, -1)).astype(jnp.float32)
      accuracy = jnp.sum(agree * weight) / total
    states = g
  return loss, accuracy


def make_step(head: EagleHead, tx: optax.GradientTransformation, passes: int = 1
              ) -> Callable:
  """`specjax.drafting.fit.make_step` of `loss_fn` with `passes`."""
  return fit_lib.make_step(functools.partial(loss_fn, passes=passes), head, tx)


def train(head: EagleHead, tp, data: tuple, workdir: str, cfg: fit_lib.Training,
          init: Optional[dict] = None, progress: bool = True,
          on_save: Optional[Callable[[int], None]] = None, passes: int = 1) -> dict:
  """Trains the head (`specjax.drafting.fit.fit`); returns {'heads', 'step', 'loss',
  'accuracy'} of the last step.

  Args:
    head: the head (its target).
    tp: the target's params (frozen).
    data: (inputs [N, S], sequences [N, T], spans [N, 2]) of `specjax.drafting.data`.
    workdir: checkpoints go to workdir/checkpoints; a rerun resumes from the latest.
    cfg: the run's settings.
    init: the params to start from (default `head.from_target(tp)`).
    progress: a progress bar with the loss.
    on_save: called with the step after each checkpoint (tests stop a run there).
    passes: the head's passes over each sequence (`loss_fn`; > 1: it also learns from
      its own states).
  """
  if passes < 1:
    raise ValueError(f'passes must be >= 1, got {passes}')
  own = init if init is not None else head.from_target(tp)
  result = fit_lib.fit(lambda tx: make_step(head, tx, passes), own, tp, data, workdir, cfg,
                       'eagle head', progress, on_save)
  return {'heads': result.pop('params'), **result}
