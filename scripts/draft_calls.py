"""How many calls of the draft model one proposal makes, counted in a real decode.

A draft model's chain of G makes G calls of one token each. A vertical cascade
(`specjax.proposers.cascade.VerticalCascade`) makes one call of k + 2 tokens (the token
before the chain's last, the last, k cheap drafts), then one of k + 1 per iteration of its
loop, which runs until every active row holds G drafts: its calls depend on how many of
the cheap drafts the draft model keeps, and on the slowest row of the batch. On
memory-bound hardware a call costs about the same whatever its few tokens, so calls per
proposal is the cascade's hardware-free draft cost.

`Counted` wraps the draft model: its cache carries a counter [B] that every call of
`decode` adds one to (all rows alike). A decode run with it (`counted_decode`) gives the
calls the loop made, over its iterations (`DecodeOutput.iterations`, one proposal each).
The prefill of a decoder-only prompt (P tokens, at the start and at each refill) is not a
proposal's call and is not counted: calls of exactly P tokens are skipped, and P must be
longer than any call of a proposal.
"""

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import api
from specjax.core.sampling import SamplingParams

CALLS = 'calls'


@dataclasses.dataclass(frozen=True)
class Counted:
  """A model whose cache {'cache': the model's, 'calls': [B] int32} counts its decode
  calls, but those of `prefill_width` tokens (None: all). Everything else is the model's."""

  model: Any
  prefill_width: Optional[int] = None

  def __getattr__(self, name):
    if name in ('model', 'prefill_width'):  # not set yet (copying, unpickling)
      raise AttributeError(name)
    return getattr(self.model, name)

  def init_cache(self, batch: int, length: int, dtype: Any = None):
    return {'cache': self.model.init_cache(batch, length, dtype),
            CALLS: jnp.zeros((batch,), jnp.int32)}

  def cache_axes(self):
    return {'cache': self.model.cache_axes(), CALLS: ('batch',)}

  def decode(self, params, encoded, cache, tokens: jax.Array, positions: jax.Array, **kw):
    out = self.model.decode(params, encoded, cache['cache'], tokens, positions, **kw)
    counted = cache[CALLS] + (0 if tokens.shape[1] == self.prefill_width else 1)
    return (out[0], {'cache': out[1], CALLS: counted}) + tuple(out[2:])


def counted(draft, prefill_width: Optional[int] = None):
  """`draft` (a model, or a vertical cascade of one) with its draft model `Counted`."""
  if hasattr(draft, 'inner_gamma'):
    return dataclasses.replace(draft, draft=Counted(draft.draft, prefill_width))
  return Counted(draft, prefill_width)


def counted_decode(target, tp, draft, dp, inputs, *, gamma: int, max_decode_len: int,
                   sampling, rng, slots: int) -> dict:
  """A speculative decode with `draft`'s model calls counted.

  Args:
    target, tp: the target and its params.
    draft, dp: a draft model or a vertical cascade of one, and its params.
    inputs: [N, S] int32.
    gamma, max_decode_len, sampling, rng, slots: as `specjax.speculative_decode`.

  Returns:
    {'tokens' [N, L], 'calls' (the draft model's batched calls), 'proposals' (the loop's
    iterations), 'calls_per_proposal', 'drafted' and 'target_calls' [N] (each input's
    draft tokens proposed and its target calls)}.
  """
  width = int(target.decoder_prompt(inputs[:1])[0].shape[1])
  widest = gamma + getattr(draft, 'inner_gamma', 0) + 1
  if 1 < width <= widest:
    raise ValueError(f'a prompt of {width} tokens is not told from a proposal\'s calls '
                     f'(up to {widest} tokens): pad the inputs wider')
  draft = counted(draft, width if width > 1 else None)
  num = int(inputs.shape[0])
  dec = api.decoder_of(target, draft, gamma=gamma, max_decode_len=max_decode_len,
                       sampling=sampling, rows=num, slots=slots)
  params = SamplingParams.of(sampling, num)

  @jax.jit
  def run(tp, dp, inputs, rng):
    carry = dec.start(tp, dp, inputs, jnp.int32(num), jnp.arange(num, dtype=jnp.int32), rng,
                      params)
    out, carry = dec.loop(tp, dp, carry)
    return out, carry.state.draft_cache[CALLS]

  out, calls = run(tp, dp, inputs, rng)
  calls = np.asarray(calls)
  if not np.all(calls == calls[0]):  # every batched call counts every row
    raise AssertionError(f'rows counted unequal calls: {calls}')
  proposals = int(out.iterations)
  return {'tokens': np.asarray(out.tokens), 'calls': int(calls[0]), 'proposals': proposals,
          'calls_per_proposal': int(calls[0]) / max(proposals, 1),
          'drafted': np.asarray(out.stats.drafted),
          'target_calls': np.asarray(out.stats.target_calls)}
