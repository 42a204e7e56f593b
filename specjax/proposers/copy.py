"""A proposer that costs nothing: copy from the source (prompt lookup).

After the last n tokens of the output, it proposes the token that followed the longest
earlier match of them in the encoder input (the source) or in the output so far, with
probability 1: its q is a point mass, so the acceptance rule keeps the target's
distribution exactly (the draft token is accepted with probability p(x)). Without any
match it proposes by `fallback`. A chain drafts token after token, each draft extending the
history the next one matches. A static tree (`--tree 3,1,1`) takes below each node the
next tokens of its b best matches that differ (longest first, then the source, then the
earliest), so several earlier continuations are verified in one call; every node is a
point mass, which the tree rule keeps exact whatever the choice. Its only state is the
committed sequence the loop hands it (no cache); everything is on device, in fixed shapes.

Shape letters: B rows, K queries, S source length, W sequence width, L searched length,
N the longest n-gram, b children per node, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import proposal as proposal_lib
from specjax.core import steps, tree
from specjax.core.state import LoopConfig
from specjax.models import base

# Logit of every token a point mass leaves out: finite, so the loop's non-finite check
# stays quiet, and far enough below 0 that softmax gives it exactly 0.
OFF = -1e9


def match_lengths(history: jax.Array, text: jax.Array, ngram: int) -> jax.Array:
  """[B, K, L] int32: the longest m <= N such that text's window of m tokens ending at j
  equals the last m of history [B, K, N] (-3 where there is no token)."""
  ends = jnp.arange(text.shape[1])
  ok = jnp.ones(history.shape[:2] + text.shape[1:], bool)
  length = jnp.zeros(ok.shape, jnp.int32)
  for i in range(ngram):  # text[j - i] == history[N - 1 - i]
    idx = ends - i  # [L]
    token = jnp.take(text, jnp.clip(idx, 0, text.shape[1] - 1), axis=1)  # [B, L]
    ok &= (idx >= 0)[None, None] & (token[:, None] == history[:, :, -1 - i, None])
    length += ok
  return length


def best_matches(history: jax.Array, texts: List[Tuple[jax.Array, bool]],
                 query: jax.Array, count: int, ngram: int) -> Tuple[jax.Array, jax.Array]:
  """The next tokens of the `count` best matches that differ, after each query.

  A match is a window of text equal to the query's last m tokens whose next token is
  known; better is longer, then (at equal length) in the source, then earlier.

  Args:
    history: [B, K, N] each query's last N tokens (-3 where there is none).
    texts: (text [B, L], is_source) pairs searched; ids < 0 never match or follow.
    query: [B, K] the position of each query's last token: an output window must end
      before it (its next token already known).
    count: b.
    ngram: N.

  Returns:
    (tokens [B, K, b] int32, found [B, K, b] bool).
  """
  scores, nexts, offset = [], [], 0
  total = sum(text.shape[1] for text, _ in texts)
  for text, is_source in texts:
    ends = jnp.arange(text.shape[1])
    length = match_lengths(history, text, ngram)  # [B, K, L]
    nxt = jnp.take(text, jnp.clip(ends + 1, 0, text.shape[1] - 1), axis=1)  # [B, L]
    valid = ((ends + 1) < text.shape[1])[None, None] & (nxt >= 0)[:, None] & (length > 0)
    if not is_source:
      valid &= (ends[None, None] + 1) <= query[:, :, None]
    rank = (2 * length + int(is_source)) * (total + 1) + (total - offset - ends)[None, None]
    scores.append(jnp.where(valid, rank, 0))
    nexts.append(jnp.broadcast_to(nxt[:, None], length.shape))
    offset += text.shape[1]
  score, nxt = jnp.concatenate(scores, axis=2), jnp.concatenate(nexts, axis=2)
  tokens, found = [], []
  for _ in range(count):
    best = jnp.argmax(score, axis=2)  # [B, K]
    token = jnp.take_along_axis(nxt, best[..., None], axis=2)[..., 0]
    found.append(jnp.take_along_axis(score, best[..., None], axis=2)[..., 0] > 0)
    tokens.append(token)
    score = jnp.where(nxt == token[..., None], 0, score)  # the next ones differ
  return jnp.stack(tokens, axis=2).astype(jnp.int32), jnp.stack(found, axis=2)


def point_mass(token: jax.Array, vocab_size: int) -> jax.Array:
  """[..., V] float32 logits of a point mass on each of token [...]: 0 there, OFF elsewhere."""
  return jnp.where(jnp.arange(vocab_size) == token[..., None], 0.0, OFF).astype(jnp.float32)


def history_at(ids: jax.Array, query: jax.Array, ngram: int) -> jax.Array:
  """[B, K, N]: the N tokens of ids [B, W] up to each query position [B, K]."""
  back = query[:, :, None] - ngram + 1 + jnp.arange(ngram)[None, None]  # [B, K, N]
  return jnp.where(back >= 0, jnp.take_along_axis(
      ids[:, None], jnp.clip(back, 0, ids.shape[1] - 1), axis=2), -3)


class SourceReader:
  """The params and encoding of a proposer with no params that reads an encoder-decoder's
  input, the source, when its `source` attribute says so (its `pad_id` the padding)."""

  def init(self, rng: jax.Array) -> dict:
    """No parameters."""
    del rng
    return {}

  def param_axes(self) -> dict:
    return {}

  def encode(self, params, inputs: jax.Array) -> dict:
    """The source: inputs [B, S] themselves (padding, -2, never matches a real token)."""
    del params
    if not self.source:
      return {}
    return {'source': jnp.where(inputs == self.pad_id, -2, inputs).astype(jnp.int32)}

  def encoded_axes(self) -> dict:
    return {'source': ('batch', 'length')} if self.source else {}


@dataclasses.dataclass(frozen=True)
class CopyDraft(SourceReader, proposal_lib.Stateless):
  """Proposes the tokens after the longest matches of the recent output (module doc).

  Attributes:
    vocab_size: V (the target's).
    ngram: N, the longest suffix of the output that is matched (then N-1, ..., 1).
    source: search the encoder input (an encoder-decoder's source; a decoder-only
      target's prompt is in the output history already).
    fallback: without a match, 'uniform' (q uniform over V: rarely accepted) or 'eos'
      (propose the end of sequence). In a tree, a node without a match proposes the
      fallback's likeliest token (EOS, or token 0 as a greedy chain would).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  ngram: int = 3
  source: bool = True
  fallback: str = 'uniform'
  eos_id: int = 1
  pad_id: int = 0

  def _texts(self, encoded: dict, ids: jax.Array):
    return [(ids, False)] + ([(encoded['source'], True)] if self.source else [])

  def _logits(self, token: jax.Array, found: jax.Array) -> jax.Array:
    """[B, K, V]: 0 at each proposal and OFF elsewhere (a point mass), or the fallback's
    where nothing matched."""
    point = point_mass(token, self.vocab_size)
    if self.fallback == 'eos':
      other = point_mass(jnp.full_like(token, self.eos_id), self.vocab_size)
    else:
      other = jnp.zeros_like(point)
    return jnp.where(found[..., None], point, other)

  def lookup(self, encoded: dict, ids: jax.Array, tokens: jax.Array, positions: jax.Array):
    """Writes tokens [B, K] into the history ids [B, W] at positions [B]: (ids, the
    proposal after each token [B, K] int32, whether it was found [B, K] bool)."""
    ids = base.write_cache(ids, tokens.astype(jnp.int32), positions)
    query = positions.astype(jnp.int32)[:, None] + jnp.arange(tokens.shape[1])[None]
    token, found = best_matches(history_at(ids, query, self.ngram),
                                self._texts(encoded, ids), query, 1, self.ngram)
    return ids, token[..., 0], found[..., 0]

  def scorer(self, encoded: dict) -> proposal_lib.Scorer:
    """The chain's next-token scores (`lookup` as logits): its 'cache' is the history ids
    [B, W]."""
    def decode(ids, tokens, positions, tree=None):
      del tree
      ids, token, found = self.lookup(encoded, ids, tokens, positions)
      return self._logits(token, found), ids
    return proposal_lib.Scorer(decode)

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma copies, or the static tree cfg.tree of distinct copies."""
    del params
    ids = seq.astype(jnp.int32)
    if cfg.tree is None:
      d = steps.draft_block(self.scorer(encoded), ids, seq, pos, keys, sampling, cfg,
                            active=active)
      return proposal_lib.chain(d.x, d.q, state, d.nonfinite, d.confidence)
    if not isinstance(cfg.tree, tree.TreeShape):
      raise ValueError('the copy draft grows static trees only (--tree B1,B2,..): it has '
                       'no probabilities to grow a dynamic tree by')
    return self._tree(encoded, state, ids, pos, cfg)

  def _tree(self, encoded, state, ids: jax.Array, pos: jax.Array, cfg: LoopConfig
            ) -> proposal_lib.Proposal:
    shape, batch = cfg.tree, pos.shape[0]
    pos = pos.astype(jnp.int32)
    history = history_at(ids, pos[:, None], self.ngram)  # [B, 1, N]: the root's
    texts = self._texts(encoded, ids)
    fallback = self.eos_id if self.fallback == 'eos' else 0
    levels = []
    for b in shape.branching:
      count = history.shape[1]
      token, found = best_matches(history, texts, jnp.broadcast_to(pos[:, None],
                                                                    (batch, count)),
                                  b, self.ngram)  # [B, K, b]
      token = jnp.where(found, token, fallback).reshape(batch, count * b)
      levels.append(token)
      history = jnp.concatenate([jnp.repeat(history, b, axis=1)[..., 1:], token[..., None]],
                                axis=2)  # [B, K * b, N]: each child's own
    tokens = jnp.concatenate(levels, axis=1)  # [B, N]
    num = tokens.shape[1]
    rows = lambda a: jnp.broadcast_to(jnp.asarray(a, jnp.int32), (batch, num))
    q = None if cfg.sampling.greedy else jax.nn.one_hot(tokens, self.vocab_size,
                                                        dtype=jnp.float32)
    return proposal_lib.Proposal(
        tokens=tokens, parents=rows(shape.parents()), depth=rows(shape.depths()),
        visible=np.asarray(shape.visible()), q=q, state=state,
        nonfinite=jnp.zeros((batch,), bool), drafted=jnp.full((batch,), num, jnp.int32))
