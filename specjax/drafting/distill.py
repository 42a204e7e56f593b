"""Distilling a draft model on the target's decodes or its own (DistillSpec).

The target is frozen: each step runs it teacher-forced over a batch of decoder sequences
(prompt, then an output: the target's own greedy or sampled decode, or on-policy the
draft's own) for its next-token distributions p, and the draft model, teacher-forced over
the same sequences, learns them: the forward KL divergence KL(p || q) of its distribution
q, or the total variation distance 0.5 sum |p - q| (`divergence`), at every position from
the prompt's last token on, while the token it predicts is in the sequence. Alpha is the
expectation of sum min(p, q) = 1 - the total variation over the positions the draft
proposes, which this pulls up where the draft was trained on references rather than on
what the target says. The loop, its checkpoints and its resume are
`specjax.drafting.fit`'s.

Shape letters: B rows, T sequence positions, V vocab, S inputs.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import optax

from specjax.drafting import fit as fit_lib


@dataclasses.dataclass(frozen=True)
class Distillation:
  """What a distillation trains: the draft model, against the frozen target.

  Attributes:
    target: the target model.
    draft: the draft model (its params are what train).
    loss: 'kl' or 'tvd' (`divergence`).
  """

  target: Any
  draft: Any
  loss: str = 'kl'


def divergence(log_p: jax.Array, log_q: jax.Array, kind: str) -> jax.Array:
  """Per position, of the target's log-probabilities log_p [..., V] and the draft's log_q:
  'kl', the forward KL(p || q); 'tvd', the total variation 0.5 sum |p - q| (1 - the
  chance that the rule accepts a token the draft samples there). [...]."""
  if kind == 'tvd':
    return 0.5 * jnp.sum(jnp.abs(jnp.exp(log_p) - jnp.exp(log_q)), -1)
  if kind != 'kl':
    raise ValueError(f'a distillation loss is kl or tvd, got {kind!r}')
  return jnp.sum(jnp.exp(log_p) * (log_p - log_q), -1)


def loss_fn(dp, pair: Distillation, tp, inputs: jax.Array, seqs: jax.Array,
            spans: jax.Array):
  """(the mean `divergence` (pair.loss) over the counted positions of seqs [B, T], the
  draft's top-1 agreement with the target's argmax there)."""
  batch, width = seqs.shape
  _, logits, _ = fit_lib.teacher_forced(pair.target, tp, inputs, seqs)  # [B, T, V]
  draft = pair.draft
  q_logits, _ = draft.decode(dp, draft.encode(dp, inputs), draft.init_cache(batch, width),
                             seqs, jnp.zeros((batch,), jnp.int32))
  log_p = jax.nn.log_softmax(logits, -1)
  log_q = jax.nn.log_softmax(q_logits.astype(jnp.float32), -1)
  per_position = divergence(log_p, log_q, pair.loss)  # [B, T]
  weight = fit_lib.counted(spans, width).astype(jnp.float32)
  total = jnp.maximum(jnp.sum(weight), 1.0)
  agree = (jnp.argmax(q_logits, -1) == jnp.argmax(logits, -1)).astype(jnp.float32)
  return jnp.sum(per_position * weight) / total, jnp.sum(agree * weight) / total


def make_step(pair: Distillation, tx: optax.GradientTransformation) -> Callable:
  """`specjax.drafting.fit.make_step` of `loss_fn`."""
  return fit_lib.make_step(loss_fn, pair, tx)


def train(pair: Distillation, tp, dp, data: tuple, workdir: str, cfg: fit_lib.Training,
          progress: bool = True, on_save: Optional[Callable[[int], None]] = None) -> dict:
  """Fine-tunes the draft's params dp (`specjax.drafting.fit.fit`); returns {'params',
  'step', 'loss', 'accuracy'} of the last step.

  Args:
    pair: the target and the draft.
    tp: the target's params (frozen); dp: the draft's, where training starts.
    data: (inputs [N, S], sequences [N, T], spans [N, 2]) of `specjax.drafting.data`.
    workdir: checkpoints go to workdir/checkpoints; a rerun resumes from the latest.
    cfg: the run's settings.
    progress: a progress bar with the loss.
    on_save: called with the step after each checkpoint (tests stop a run there).
  """
  dp = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), dp)
  return fit_lib.fit(lambda tx: make_step(pair, tx), dp, tp, data, workdir, cfg,
                     'distilled draft', progress, on_save)
