"""A draft that costs nothing: copy from the source (prompt lookup), on the model contract.

After the last n tokens of the output, it proposes the token that followed the longest
earlier match of them in the encoder input (the source) or in the output so far, with
probability 1: its q is a point mass, so the acceptance rule keeps the target's
distribution exactly (the draft token is accepted with probability p(x)). Without any
match it proposes by `fallback`. Everything is on device, in fixed shapes: the token
history is the draft's "cache" (ids [B, T], written at the positions the loop gives, so a
rollback is a smaller position, as for a KV cache).

Shape letters: B rows, K tokens in this call, S source length, T history length, N the
longest n-gram, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.numpy as jnp

from specjax.models import base

# Logit of every token a point mass leaves out: finite, so the loop's non-finite check
# stays quiet, and far enough below 0 that softmax gives it exactly 0.
OFF = -1e9


def _windows_match(history: jax.Array, text: jax.Array, ends: jax.Array, length: int,
                   ) -> jax.Array:
  """Where text's window of `length` tokens ending at j equals the history's last ones.

  Args:
    history: [B, K, N] the last N tokens before each query (-1 where there is none).
    text: [B, L] the text searched.
    ends: [L] the window ends j.
    length: m <= N, the window length.

  Returns:
    [B, K, L] bool.
  """
  ok = jnp.ones(history.shape[:2] + text.shape[1:], bool)
  for i in range(length):  # text[j - i] == history[N - 1 - i]
    idx = ends - i  # [L]
    token = jnp.take(text, jnp.clip(idx, 0, text.shape[1] - 1), axis=1)  # [B, L]
    ok &= (idx >= 0)[None, None] & (token[:, None] == history[:, :, -1 - i, None])
  return ok


@dataclasses.dataclass(frozen=True)
class CopyDraft:
  """Proposes the token after the longest match of the recent output (see module doc).

  Attributes:
    vocab_size: V (the target's).
    ngram: N, the longest suffix of the output that is matched (then N-1, ..., 1).
    source: search the encoder input (an encoder-decoder's source; a decoder-only
      target's prompt is in the output history already).
    fallback: without a match, 'uniform' (q uniform over V: rarely accepted) or 'eos'
      (propose the end of sequence).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  ngram: int = 3
  source: bool = True
  fallback: str = 'uniform'
  eos_id: int = 1
  pad_id: int = 0

  def init(self, rng: jax.Array) -> dict:
    """No parameters."""
    del rng
    return {}

  def param_axes(self) -> dict:
    return {}

  def encode(self, params, inputs: jax.Array) -> dict:
    """The source: inputs [B, S] themselves (padding never matches a real token)."""
    del params
    return {'source': jnp.where(inputs == self.pad_id, -2, inputs).astype(jnp.int32)}

  def encoded_axes(self) -> dict:
    return {'source': ('batch', 'length')}

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """As an encoder-decoder's (the loop takes the target's prompt anyway)."""
    return base.encoder_decoder_prompt(inputs)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> dict:
    """The output's token ids so far: [B, T] int32."""
    del dtype
    return {'ids': jnp.full((batch, max_len), -1, jnp.int32)}

  def cache_axes(self) -> dict:
    return {'ids': ('batch', 'length')}

  def propose(self, encoded: dict, ids: jax.Array, positions: jax.Array, num_tokens: int
              ) -> Tuple[jax.Array, jax.Array]:
    """The proposal after each of the K queries at positions[b] + k: (token [B, K] int32,
    found [B, K] bool), from the history ids [B, T] (already holding the queries)."""
    n, length = self.ngram, ids.shape[1]
    query = positions[:, None] + jnp.arange(num_tokens)[None]  # [B, K]
    back = query[:, :, None] - n + 1 + jnp.arange(n)[None, None]  # [B, K, N]
    history = jnp.where(back >= 0, jnp.take_along_axis(
        ids[:, None], jnp.clip(back, 0, length - 1), axis=2), -3)  # [B, K, N]
    best = jnp.zeros(query.shape, jnp.int32)
    token = jnp.zeros(query.shape, jnp.int32)
    texts = [('output', ids)] + ([('source', encoded['source'])] if self.source else [])
    for m in range(1, n + 1):  # longer matches overwrite shorter ones
      for name, text in texts:
        ends = jnp.arange(text.shape[1])
        ok = _windows_match(history, text, ends, m)  # [B, K, L]
        nxt = jnp.take(text, jnp.clip(ends + 1, 0, text.shape[1] - 1), axis=1)  # [B, L]
        ok &= ((ends + 1) < text.shape[1])[None, None] & (nxt >= 0)[:, None]
        if name == 'output':  # an earlier window whose next token is already known
          ok &= (ends[None, None] + 1) <= query[:, :, None]
        first = jnp.argmax(ok, axis=2)  # [B, K]
        hit = jnp.any(ok, axis=2)
        found = jnp.take_along_axis(jnp.broadcast_to(nxt[:, None], ok.shape), first[..., None],
                                    axis=2)[..., 0]
        take = hit & (best < m) if name == 'output' else hit & (best <= m)
        token, best = jnp.where(take, found, token), jnp.where(take, m, best)
    return token, best > 0

  def decode(self, params, encoded: dict, cache: dict, tokens: jax.Array,
             positions: jax.Array, tree=None, return_hidden: bool = False):
    """Writes tokens [B, K] into the history; logits [B, K, V]: 0 at each proposal and
    OFF elsewhere (a point mass), or the fallback's where nothing matched.

    Raises:
      NotImplementedError: a token tree (the history is a chain of positions), or
        return_hidden (no hidden state).
    """
    del params
    if tree is not None:
      raise NotImplementedError('the copy draft does not decode token trees')
    if return_hidden:
      raise NotImplementedError('the copy draft has no hidden state to return')
    ids = base.write_cache(cache['ids'], tokens.astype(jnp.int32), positions)  # [B, T]
    token, found = self.propose(encoded, ids, positions.astype(jnp.int32), tokens.shape[1])
    vocab = jnp.arange(self.vocab_size)[None, None]
    point = jnp.where(vocab == token[..., None], 0.0, OFF)  # [B, K, V]
    if self.fallback == 'eos':
      other = jnp.where(vocab == self.eos_id, 0.0, OFF)
    else:
      other = jnp.zeros_like(point)
    return jnp.where(found[..., None], point, other).astype(jnp.float32), {'ids': ids}
