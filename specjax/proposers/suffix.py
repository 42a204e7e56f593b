"""Suffix decoding: continuations of the row's own text, proposed as a trie.

Below each row's last token the proposer finds every earlier place where the output so far
ends as it does now: in the output itself (windows ending before the last token) and, for
an encoder-decoder, in the encoder input (the source). Each place matches the last m <= N
tokens for its own m; the R places of the longest matches (at equal length: the source
first, then the earlier) are retrieved, and the D tokens after each are its continuation,
weighted by its match length. Their trie (`specjax.proposers.trie`) is the proposal: the N
nodes of most weight as a tree, or the heaviest path as a chain. Where the copy proposer
(`specjax.proposers.copy`) takes the next token of the single best match, one token at a
time, this proposes whole continuations of many matches at once, ranked by how often they
recur. Every node is a point mass, so the exact rules keep the target's output and
distribution. It reads the committed sequence the loop passes and keeps no state; all of it
runs on device, in fixed shapes.

Shape letters: B rows, W sequence width, S source length, N the longest match, R retrieved
continuations, D their depth.
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from specjax.proposers import copy as copy_lib
from specjax.proposers import trie

# Retrieved continuations per row and call.
SAMPLES = 16


def _after(text: jax.Array, ends: jax.Array, depth: int, last: jax.Array) -> tuple:
  """The D tokens after each window end ends [B, R] of text [B, L]: (tokens [B, R, D],
  in range [B, R, D]: at index <= last [B] and a real id)."""
  idx = ends[..., None] + 1 + jnp.arange(depth)[None, None]  # [B, R, D]
  tokens = jnp.take_along_axis(text[:, None], jnp.clip(idx, 0, text.shape[1] - 1), axis=2)
  return tokens, (idx <= last[:, None, None]) & (tokens >= 0)


@dataclasses.dataclass(frozen=True)
class SuffixDraft(copy_lib.SourceReader, trie.Retriever):
  """Continuations of the longest earlier matches of the row's text (module doc).

  Attributes:
    vocab_size: V (the target's).
    ngram: N, the longest suffix matched.
    samples: R, continuations retrieved per row and call.
    source: also search the encoder input (an encoder-decoder's source).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  ngram: int = 8
  samples: int = SAMPLES
  source: bool = True
  eos_id: int = 1
  pad_id: int = 0

  def retrieve(self, encoded: dict, seq: jax.Array, pos: jax.Array, depth: int):
    """R continuations: tokens [B, R, D] int32, valid [B, R, D] bool, weight [B, R]."""
    ids, pos = seq.astype(jnp.int32), pos.astype(jnp.int32)
    width = ids.shape[1]
    history = copy_lib.history_at(ids, pos[:, None], self.ngram)  # [B, 1, N]
    length = copy_lib.match_lengths(history, ids, self.ngram)[:, 0]  # [B, W]
    length = jnp.where(jnp.arange(width)[None] < pos[:, None], length, 0)  # earlier ends
    texts = [(ids, length, pos)]
    if self.source:
      src = encoded['source']
      src_length = copy_lib.match_lengths(history, src, self.ngram)[:, 0]  # [B, S]
      texts.append((src, src_length, jnp.full_like(pos, src.shape[1] - 1)))
    total = sum(t.shape[1] for t, _, _ in texts)
    scores, conts, valids = [], [], []
    offset = 0
    for text, m, last in texts:
      is_source = text is not ids
      ends = jnp.arange(text.shape[1], dtype=jnp.int32)
      rank = (2 * m + int(is_source)) * (total + 1) + (total - offset - ends)[None]
      scores.append(jnp.where(m > 0, rank, 0))
      offset += text.shape[1]
    score = jnp.concatenate(scores, axis=1)  # [B, W (+ S)]
    best, where = jax.lax.top_k(score, min(self.samples, total))  # [B, R]
    lengths = jnp.concatenate([m for _, m, _ in texts], axis=1)
    matched = jnp.take_along_axis(lengths, where, 1)  # [B, R]
    start = 0
    for text, _, last in texts:  # each retrieved end in its own text
      local = where - start
      inside = (local >= 0) & (local < text.shape[1])
      cont, valid = _after(text, jnp.clip(local, 0, text.shape[1] - 1), depth, last)
      conts.append(cont)
      valids.append(valid & inside[..., None])
      start += text.shape[1]
    cont = sum(jnp.where(v, c, 0) for c, v in zip(conts, valids))
    valid = jnp.any(jnp.stack(valids), axis=0) & (best > 0)[..., None]
    valid = jnp.cumsum(~valid, axis=-1) == 0  # closed under prefixes
    return cont, valid, matched.astype(jnp.float32)

  def continuations(self, params, encoded, seq: jax.Array, pos: jax.Array, depth: int):
    """`retrieve` (the interface `specjax.proposers.trie.Mixture` reads)."""
    del params
    return self.retrieve(encoded, seq, pos, depth)

