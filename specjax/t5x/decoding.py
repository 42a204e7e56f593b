"""T5X's prediction contract on top of specjax's decode (pure jax; imports no t5x).

`predict` is what `SpeculativeEncoderDecoderModel.predict_batch_with_aux` runs: T5X's
decoder params (temperature, topk, topp; per example or one for all, concrete or traced)
become per-row specjax sampling settings, each example is decoded `num_decodes` times as
rows [e0, e0, e1, e1, ...] (T5X's `flat_batch_beam_expand`), every decode is scored with
the target's log-probability, and the decodes come back [B, N, L] sorted by score, best
last, as T5X's `temperature_sample` returns them. Shape letters: B examples, N decodes per
example, S input width, L max decode length, V vocab.
"""
from __future__ import annotations

from typing import Any, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core.figures import per_example_figures
from specjax.core.sampling import SamplingParams
from specjax.core.traced import mode_for, traced_decode

PyTree = Any
# The DecodeStats counters a Prediction sums over its real examples.
TOTALS = ('generated', 'target_calls', 'accepted', 'drafted', 'beta_sum', 'beta_count')
# T5X's decoding.MIN_TEMPERATURE: at or below it T5X decodes greedily.
MIN_TEMPERATURE = 1e-4


def _host_or_traced(x):
  """x as numpy when its value is known (so the static mode can read it), else as is."""
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return x


def _per_row(x, num_decodes: int):
  """A scalar stays a scalar; per-example values [B] repeat to rows [B * N]."""
  xp = np if isinstance(x, np.ndarray) else jnp
  return x if xp.ndim(x) == 0 else xp.repeat(x, num_decodes, axis=0)


def sampling_from_t5x(temperature=0.0, topk=0, topp=0.0, num_decodes: int = 1
                      ) -> SamplingParams:
  """T5X's sampling knobs as specjax's per-row settings.

  Args:
    temperature: a scalar or [B] per example; at or below MIN_TEMPERATURE is greedy.
    topk: scalar or [B]; 0 keeps every token; 1 (temperature_sample's default) is the
      argmax, decoded greedily.
    topp: scalar or [B]; 0 keeps every token (T5X's convention; specjax's is 1).
    num_decodes: N, rows per example.

  Returns:
    SamplingParams with scalar or [B * N] leaves, numpy where the values are concrete.
  """
  t, k, p = (_per_row(_host_or_traced(v), num_decodes) for v in (temperature, topk, topp))
  xp = lambda v: np if isinstance(v, np.ndarray) else jnp
  return SamplingParams(
      # topk 1 samples the argmax at any temperature: decoding it greedily is the same.
      temperature=(np if xp(t) is xp(k) is np else jnp).where(
          (t <= MIN_TEMPERATURE) | (k == 1), 0.0, t).astype(np.float32),
      top_k=xp(k).asarray(k).astype(np.int32),
      top_p=xp(p).where(p <= 0.0, 1.0, p).astype(np.float32))


def sequence_log_probs(target, params: PyTree, inputs: jax.Array, tokens: jax.Array,
                       lengths: jax.Array) -> jax.Array:
  """The target's log-probability of each decode, teacher-forced (what score_batch gives).

  Args:
    target: the target model; params: its params.
    inputs: [R, S] encoder inputs; tokens: [R, L] decodes; lengths: [R] tokens per decode
      (EOS included; positions past it do not count).

  Returns:
    [R] float32 sums of log p(token_t | inputs, tokens_<t).
  """
  start = jnp.zeros_like(tokens[:, :1])
  logits = target.logits(params, inputs, jnp.concatenate([start, tokens[:, :-1]], axis=1))
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)  # [R, L, V]
  picked = jnp.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]  # [R, L]
  keep = jnp.arange(tokens.shape[1])[None, :] < lengths[:, None]
  return jnp.sum(jnp.where(keep, picked, 0.0), axis=1)


class Prediction(NamedTuple):
  """What `predict` returns.

  Attributes:
    decodes: [B, N, L] int32, pad after EOS, sorted by score (best last).
    scores: [B, N] float32, the target's log-probability of each decode, ascending.
    aux: per-example [B] values over its N decodes (`figures.per_example_figures`):
      'alpha' (acceptance rate from the beta sums; 0 where no draft token was verified),
      'tokens_per_call' (generated tokens / per-row target calls) and 'target_calls'
      (summed).
    totals: the batch's counter sums over its examples that are not padding (an
      encoder input of pad ids alone, as T5X fills a last batch): scalar 'examples',
      'generated', 'target_calls', 'accepted', 'drafted', 'beta_sum', 'beta_count'.
  """

  decodes: jax.Array
  scores: jax.Array
  aux: Dict[str, jax.Array]
  totals: Optional[Dict[str, jax.Array]] = None


def predict(target, target_params: PyTree, draft, draft_params: PyTree, inputs: jax.Array,
            *, max_decode_len: int, gamma: int, num_decodes: int = 1,
            sampling: Optional[SamplingParams] = None, rng: Optional[jax.Array] = None,
            eos_id: int = 1, **rule) -> Prediction:
  """Decodes every example N times speculatively and returns T5X's prediction contract.

  Args:
    target, target_params: the target (a specjax model) and its params.
    draft, draft_params: the draft and its params (None, None: the target alone).
    inputs: [B, S] int32 encoder inputs.
    max_decode_len: L.
    gamma: draft tokens per target call.
    num_decodes: N decodes per example (independent samples; identical when greedy).
    sampling: from `sampling_from_t5x` (scalars or [B * N] leaves); None is greedy.
    rng: a PRNG key (PRNGKey(0) when None); row r draws from fold_in(rng, r).
    eos_id: the end-of-sequence id (static).
    **rule: verification, draft_threshold, threshold_rule, lenience, tree (as
      `specjax.speculative_decode`; with a tree, gamma is its depth).

  Returns:
    A Prediction.
  """
  batch = inputs.shape[0]
  rows = jnp.repeat(inputs, num_decodes, axis=0) if num_decodes > 1 else inputs  # [B*N, S]
  sampling = SamplingParams(0.0, 0, 1.0) if sampling is None else sampling
  out = traced_decode(target, target_params, draft, draft_params, rows, gamma=gamma,
                      max_decode_len=max_decode_len, sampling=sampling,
                      mode=mode_for(sampling), rng=rng, eos_id=eos_id, **rule)
  scores = sequence_log_probs(target, target_params, rows, out.tokens, out.lengths)
  decodes = out.tokens.reshape((batch, num_decodes, max_decode_len))
  scores = scores.reshape((batch, num_decodes))
  order = jnp.argsort(scores, axis=1, stable=True)  # ascending: best last, as T5X
  decodes = jnp.take_along_axis(decodes, order[:, :, None], axis=1)
  scores = jnp.take_along_axis(scores, order, axis=1)
  f = per_example_figures(out.stats, batch)
  aux = {'alpha': f.alpha, 'tokens_per_call': f.tokens_per_call,
         'target_calls': jnp.sum(out.stats.target_calls.reshape((batch, -1)), axis=1)}
  real = jnp.repeat(jnp.any(inputs != 0, axis=1), num_decodes)  # [B * N]: not padding
  totals = {name: jnp.sum(jnp.where(real, getattr(out.stats, name), 0))
            for name in TOTALS}
  totals['examples'] = jnp.sum(real) // num_decodes
  return Prediction(decodes=decodes, scores=scores, aux=aux, totals=totals)


def split_params(params: PyTree, draft_key: str) -> Tuple[PyTree, PyTree]:
  """(target params, draft params) of a T5X params tree holding the draft under a key ({}
  where the draft has no params of its own: layer-skip)."""
  target = {k: v for k, v in params.items() if k != draft_key}
  return target, params.get(draft_key, {})
