"""REST: drafts retrieved from a datastore of text (`python -m specjax.datastore build`).

The datastore is a corpus of documents (token ids, each document followed by -1) and its
suffix array, sorted by each suffix's first Q tokens. Below each row's last token the
proposer looks up what the row has written so far:

- anchored: while the row's whole output is at most Q tokens (T5: from the first token after
  the decoder start; it is empty before the first token), the documents that begin with it
  (an index of the document starts, sorted the same way, made when the datastore loads);
- otherwise, or where no document begins so, the longest suffix of the output (at most Q
  tokens) that occurs in the corpus.

Both are two binary searches per query length, on device inside the decode loop (about
2 log2(L) steps of Q-token comparisons per row and query length, no host round trip). The
matches form a range of the sorted index, ordered by what follows them; R evenly spaced
entries of the range are retrieved, so a continuation comes back about as often as its
share of the matches. R more come from a shorter match: the longest suffix shorter than
the longest (where the row is anchored: the longest suffix). Each of those weighs less than
one of the longer match's, so they fill the trie only with nodes the longer match does not
reach: where it occurs once or a few times, its continuations hold fewer nodes than the
tree verifies. The next tokens of all 2R are proposed as a trie (`specjax.proposers.
trie`): the N nodes the most weight passes through, or the heaviest path as a chain.
R is `SAMPLES` for a chain and a trie of up to 2 SAMPLES nodes, N / 2 for a larger trie
(`sized_for`): a 128-node trie keeps 2.39 tokens per call on the man pages with 64 against
2.29 with 32 (greedy; 2.23 against 2.16 sampled), and the gathers are a small part of the
proposal's cost (the searches are most).
Every node is a point mass, so the exact rules keep the target's output and distribution.
The datastore's arrays are the proposer's params (replicated on a mesh); it keeps no state.

Shape letters: B rows, W sequence width, Q the longest query, L corpus tokens, R retrieved
continuations, D their depth.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.proposers import trie

# Retrieved continuations per row and call, from each of the two matches (at least; a trie
# of N > 2 SAMPLES nodes retrieves N / 2: `RestDraft.sized_for`).
SAMPLES = 32


def window(tokens: jax.Array, starts: jax.Array, width: int) -> jax.Array:
  """tokens[start : start + width] of each of starts [...] -> [..., width], -1 past the
  corpus's end."""
  size = tokens.shape[0]
  idx = starts[..., None] + jnp.arange(width, dtype=jnp.int32)
  return jnp.where(idx < size, jnp.take(tokens, jnp.clip(idx, 0, size - 1)), -1)


def bounds(tokens: jax.Array, index: jax.Array, query: jax.Array, length: jax.Array):
  """The range [lo, hi) of `index` whose suffixes begin with the query.

  Args:
    tokens: [L] int32, the corpus (-1 after each document).
    index: [K] int32, suffix start positions sorted by their first Q tokens.
    query: [..., Q] int32, of which the first `length` [...] tokens are compared.

  Returns:
    (lo, hi), each [...] int32.
  """
  width, size = query.shape[-1], index.shape[0]
  use = jnp.arange(width) < length[..., None]

  def compare(mid):  # -1: the suffix sorts before the query, 0: it begins with it, 1: after
    win = window(tokens, jnp.take(index, mid), width)
    diff = (win != query) & use
    at = jnp.argmax(diff, axis=-1)[..., None]
    less = jnp.take_along_axis(win, at, -1)[..., 0] < jnp.take_along_axis(query, at, -1)[..., 0]
    return jnp.where(jnp.any(diff, axis=-1), jnp.where(less, -1, 1), 0)

  steps = max(1, math.ceil(math.log2(size + 1)))

  def bound(upper: bool):
    def body(_, carry):
      lo, hi = carry
      mid = (lo + hi) // 2
      order = compare(jnp.clip(mid, 0, size - 1))
      right = ((order < 0) | (upper & (order == 0))) & (lo < hi)
      return jnp.where(right, mid + 1, lo), jnp.where(right | (lo >= hi), hi, mid)
    start = (jnp.zeros(length.shape, jnp.int32), jnp.full(length.shape, size, jnp.int32))
    return jax.lax.fori_loop(0, steps, body, start)[0]

  return bound(False), bound(True)


def document_starts(tokens: np.ndarray, max_query: int) -> np.ndarray:
  """[S] int32: the position of each document's first token, sorted by its first Q tokens
  as the suffix array is (on the host, once per load)."""
  tokens = np.asarray(tokens)
  ends = tokens < 0
  starts = np.flatnonzero(~ends & np.concatenate([[True], ends[:-1]]))
  padded = np.concatenate([tokens, np.full(max_query, -1, tokens.dtype)])
  columns = [padded[starts + j] for j in reversed(range(max_query))]  # last key first
  return starts[np.lexsort(columns)].astype(np.int32) if len(starts) else starts.astype(
      np.int32)


@dataclasses.dataclass(frozen=True)
class RestDraft(trie.Retriever):
  """Retrieval from a datastore (module doc); params {'tokens', 'suffixes', 'starts'}.

  Attributes:
    vocab_size: V (the target's).
    num_tokens, num_suffixes, num_starts: the sizes of the params' arrays.
    max_query: Q, the datastore's sort key length: the longest suffix looked up.
    text_start: the first position of a row's own text (1 for an encoder-decoder, after
      the decoder start token; 0 for a decoder-only model, whose prompt is text).
    samples: R, continuations retrieved per row, call and match (2R in all).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  num_tokens: int
  num_suffixes: int
  num_starts: int
  max_query: int = 8
  text_start: int = 1
  samples: int = SAMPLES
  eos_id: int = 1
  pad_id: int = 0

  def sized_for(self, nodes: int) -> 'RestDraft':
    """This proposer retrieving R = max(samples, N / 2) per match for a trie of N nodes."""
    return dataclasses.replace(self, samples=max(self.samples, nodes // 2))

  def init(self, rng: jax.Array) -> dict:
    """An empty corpus of the params' shapes (every token -1: nothing is retrieved)."""
    del rng
    return {'tokens': jnp.full((self.num_tokens,), -1, jnp.int32),
            'suffixes': jnp.zeros((self.num_suffixes,), jnp.int32),
            'starts': jnp.zeros((self.num_starts,), jnp.int32)}

  def param_axes(self) -> dict:
    return {'tokens': (None,), 'suffixes': (None,), 'starts': (None,)}

  def encode(self, params, inputs: jax.Array) -> dict:
    del params, inputs
    return {}

  def encoded_axes(self) -> dict:
    return {}

  def retrieve(self, params: dict, seq: jax.Array, pos: jax.Array, depth: int):
    """2R continuations of each row's text, the longer match's R first: tokens [B, 2R, D]
    int32, valid [B, 2R, D], weight [B, 2R] float32 (1 for the longer match's, 1 / (R + 1)
    for the shorter's)."""
    tokens, q = params['tokens'], self.max_query
    pos = pos.astype(jnp.int32)
    written = pos - self.text_start + 1  # [B] tokens of the row's own text
    lengths = jnp.arange(1, q + 1, dtype=jnp.int32)  # [Q] query lengths
    # Floating: the last m tokens, m = 1 .. Q, for every row: [B, Q(m), Q].
    back = pos[:, None, None] - lengths[None, :, None] + 1 + jnp.arange(q)[None, None]
    query = jnp.take_along_axis(seq[:, None], jnp.clip(back, 0, seq.shape[1] - 1), axis=2)
    ok = lengths[None] <= written[:, None]  # [B, Q]
    lo, hi = bounds(tokens, params['suffixes'], query, jnp.broadcast_to(lengths, ok.shape))
    found = jnp.where(ok & (hi > lo), lengths[None], 0)  # [B, Q]: m where found, else 0
    best = jnp.max(found, axis=1)  # [B]: the longest, or 0
    below = jnp.max(jnp.where(found < best[:, None], found, 0), axis=1)  # the next, or 0

    def suffix_range(m):  # (lo, count) [B] of the suffixes of length m (none where m = 0)
      at = jnp.maximum(m - 1, 0)[:, None]
      m_lo, m_hi = (jnp.take_along_axis(a, at, 1)[:, 0] for a in (lo, hi))
      return m_lo, jnp.where(m > 0, m_hi - m_lo, 0)

    # Anchored: the whole text so far, among the document starts.
    text = jnp.take_along_axis(seq, jnp.clip(self.text_start + jnp.arange(q)[None], 0,
                                             seq.shape[1] - 1), axis=1)  # [B, Q]
    short = written <= q
    a_lo, a_hi = bounds(tokens, params['starts'], text, jnp.clip(written, 0, q))
    anchored = short & (a_hi > a_lo)
    (best_lo, best_count), (below_lo, below_count) = suffix_range(best), suffix_range(below)
    longer = self._sampled(params, jnp.where(anchored, a_lo, best_lo),
                           jnp.where(anchored, a_hi - a_lo, best_count),
                           jnp.where(anchored, written, best), depth, anchored)
    shorter = self._sampled(params, jnp.where(anchored, best_lo, below_lo),
                            jnp.where(anchored, best_count, below_count),
                            jnp.where(anchored, best, below), depth)
    cont, valid = (jnp.concatenate(pair, axis=1) for pair in zip(longer, shorter))
    weight = jnp.concatenate([jnp.ones((seq.shape[0], self.samples), jnp.float32),
                              jnp.full((seq.shape[0], self.samples),
                                       1.0 / (self.samples + 1), jnp.float32)], axis=1)
    return cont, valid, weight

  def _sampled(self, params: dict, lo: jax.Array, count: jax.Array, matched: jax.Array,
               depth: int, anchored: Optional[jax.Array] = None):
    """The D tokens after the `matched` [B] tokens of R evenly spaced entries of each row's
    range [lo, lo + count) (all of it when it is smaller) of the document starts where
    `anchored` [B], else (or where it is None) of the suffix array: tokens [B, R, D],
    valid [B, R, D]."""
    r = jnp.arange(self.samples, dtype=jnp.int32)[None]
    spread = jnp.where(count[:, None] >= self.samples,
                       (r * count[:, None]) // self.samples, r)
    entry = lo[:, None] + jnp.minimum(spread, jnp.maximum(count[:, None] - 1, 0))  # [B, R]
    index = jnp.take(params['suffixes'], jnp.clip(entry, 0, self.num_suffixes - 1))
    if anchored is not None:
      index = jnp.where(anchored[:, None], jnp.take(params['starts'], jnp.clip(
          entry, 0, self.num_starts - 1)), index)
    cont = window(params['tokens'], index + matched[:, None], depth)  # [B, R, D]
    valid = (jnp.cumsum(cont < 0, axis=-1) == 0) & (r < count[:, None])[..., None]
    return cont, valid

  def continuations(self, params, encoded, seq: jax.Array, pos: jax.Array, depth: int):
    """`retrieve`'s continuations: tokens [B, 2R, D], valid [B, 2R, D], weight [B, 2R]
    (the interface `specjax.proposers.trie.Mixture` reads)."""
    del encoded
    return self.retrieve(params, seq.astype(jnp.int32), pos, depth)


def from_arrays(tokens: np.ndarray, suffixes: np.ndarray, max_query: int, target,
                samples: int = SAMPLES):
  """(RestDraft, params) for `target` from a datastore's corpus and suffix array."""
  tokens = np.asarray(tokens, np.int32)
  starts = document_starts(tokens, max_query)
  draft = RestDraft(vocab_size=target.vocab_size, num_tokens=len(tokens),
                    num_suffixes=len(suffixes), num_starts=len(starts), max_query=max_query,
                    text_start=1 if target.encoded_axes() else 0, samples=samples,
                    eos_id=target.eos_id, pad_id=target.pad_id)
  params = {'tokens': jnp.asarray(tokens), 'suffixes': jnp.asarray(suffixes, jnp.int32),
            'starts': jnp.asarray(starts)}
  return draft, params
