"""The decode as a pure function to call inside an outer jit (e.g. T5X's partitioned step).

`specjax.speculative_decode` reads its sampling values on the host to choose the static
`SamplingMode`; inside another framework's jitted step those values may be tracers (T5X
passes `temperature` as a traced value). `traced_decode` takes the mode explicitly instead
(`mode_for` derives the narrowest one the values allow) and runs the same loop
(`Decoder.whole`) inline, with no jit of its own. Shape letters: N rows, S input width,
L max_decode_len.
"""
from __future__ import annotations

from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import api
from specjax.core import decoder as decoder_lib
from specjax.core.sampling import SamplingMode, SamplingParams
from specjax.core.state import DecodeOutput


def _concrete(x) -> Optional[np.ndarray]:
  """x as numpy, or None when it is a tracer (its value is unknown while tracing)."""
  try:
    return np.asarray(x)
  except (jax.errors.TracerArrayConversionError, jax.errors.ConcretizationTypeError):
    return None


def mode_for(sampling: SamplingParams) -> SamplingMode:
  """The narrowest static SamplingMode that is exact for these values, concrete or traced.

  Concrete values decide exactly (`SamplingParams.mode`); a traced temperature may hold
  greedy and sampled rows alike (greedy rows are then one-hot at the argmax: still exactly
  the target's greedy decode); a traced top-k or top-p may be in use.
  """
  t, k, p = (_concrete(a) for a in (sampling.temperature, sampling.top_k, sampling.top_p))
  if t is not None and not np.any(t > 0):
    return SamplingMode()  # every row greedy, whatever k and p say
  sampled = True if t is None else (t > 0)
  return SamplingMode(
      greedy=False, greedy_rows=t is None or not bool(np.all(t > 0)),
      top_k=k is None or bool(np.any(sampled & (k > 0))),
      top_p=p is None or bool(np.any(sampled & (p < 1))))


def traced_decode(target, target_params, draft, draft_params, inputs: jax.Array, *,
                  gamma: int, max_decode_len: int, sampling: SamplingParams,
                  mode: Optional[SamplingMode] = None, rng: Optional[jax.Array] = None,
                  row_ids: Optional[jax.Array] = None, eos_id: Optional[int] = None,
                  pad_id: Optional[int] = None, verification: str = 'token',
                  draft_threshold: float = 0.0, lenience: float = 1.0,
                  threshold_rule: str = 'token', tree=None) -> DecodeOutput:
  """Speculative decode (or the target alone, draft None) callable under an outer jit.

  The output is exactly `specjax.speculative_decode`'s for the same arguments: the same
  loop, the same per-row keys fold_in(rng, row_ids[i]).

  Args:
    target, target_params: the target model and its params (may be tracers).
    draft, draft_params: the draft and its params, or None, None for the target alone.
    inputs: [N, S] int32 encoder inputs, right-padded with the pad id.
    gamma: G >= 1 draft tokens per target call (ignored without a draft).
    max_decode_len: L, the most tokens per row (EOS included).
    sampling: SamplingParams whose leaves are scalars or [N] arrays, concrete or traced
      (temperature 0 greedy, top_k 0 and top_p 1 keep every token).
    mode: the static mode; None derives it with `mode_for`.
    rng: the run's PRNG key (PRNGKey(0) when None).
    row_ids: [N] int32 each row's index in the run (default 0..N-1).
    eos_id, pad_id: static ints (default: the target's).
    verification, draft_threshold, lenience, threshold_rule: the verification rule, as
      `specjax.speculative_decode` (ignored without a draft).
    tree: a token tree instead of a chain, as `specjax.speculative_decode` ('4,2,2,1', a
      `TreeShape` or a `DynamicTree`); gamma is then the tree's depth.

  Returns:
    DecodeOutput(tokens [N, L], lengths [N], stats, iterations).

  Raises:
    ValueError: gamma < 1 with a draft, target and draft vocabularies differ, or a bad
      verification rule (`specjax.core.rule.VerificationRule.checked`).
  """
  num = inputs.shape[0]
  tree = api.tree_shape(tree) if draft is not None else None
  if tree is not None:
    gamma = tree.depth_count
  if draft is not None:
    if not isinstance(gamma, (int, np.integer)) or gamma < 1:
      raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), '
                       f'got {gamma!r}')
    if draft.vocab_size != target.vocab_size:
      raise ValueError(f'target and draft vocab sizes differ ({target.vocab_size} vs '
                       f'{draft.vocab_size}); use a draft trained on the target\'s vocabulary')
  mode = mode_for(sampling) if mode is None else mode  # before jnp makes values tracers
  rows = lambda a, dtype: jnp.broadcast_to(jnp.asarray(a, dtype), (num,))
  sampling = SamplingParams(temperature=rows(sampling.temperature, jnp.float32),
                            top_k=rows(sampling.top_k, jnp.int32),
                            top_p=rows(sampling.top_p, jnp.float32))
  rule = (dict(verification=verification, draft_threshold=draft_threshold,
               lenience=lenience, threshold_rule=threshold_rule, tree=tree)
          if draft is not None else {})
  cfg = api.loop_config(target, int(gamma) if draft is not None else 0, max_decode_len, mode,
                        eos_id, pad_id, **rule)
  dec = decoder_lib.build(target, draft, cfg)
  row_ids = jnp.arange(num, dtype=jnp.int32) if row_ids is None else row_ids
  rng = jax.random.PRNGKey(0) if rng is None else rng
  return dec.whole(target_params, {} if draft is None else draft_params,
                   jnp.asarray(inputs, jnp.int32), jnp.asarray(num, jnp.int32),
                   jnp.asarray(row_ids, jnp.int32), rng, sampling)
