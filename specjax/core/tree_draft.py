"""The draft model as a proposer of token trees: a static shape (`tree.TreeShape`) or a tree
grown per row from the draft's own probabilities (`tree.DynamicTree`, EAGLE-2).

Both start with the chain's catch-up call (two tokens at positions pos - 1 and pos, so
that the draft's cache holds every committed token), then feed one depth's nodes per call
with a tree mask (`specjax.models.base.Tree`) in the draft's own scratch slots after the
root. Children are the draft's top tokens below a node by its logits (point masses: a
deterministic choice), or, at a depth of a static tree with one child per node under
sampling, a draw from the draft's warped distribution (as the chain drafts). Either way a node's candidates
are drawn independently of the target's randomness, which the exact tree rule needs.

Shape letters: B rows, N nodes, M = N + 1 tree slots, D depth, K nodes of one call,
P candidates of a dynamic tree, V vocab.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import sampling, tree
from specjax.core.state import LoopConfig, gather_rows, split_keys
from specjax.core.steps import Bound, nonfinite
from specjax.models.base import Tree


class Proposal(NamedTuple):
  """A tree of N nodes per row below each row's last token.

  Attributes:
    tokens: [B, N] int32, the nodes' tokens, breadth-first (a parent before its children).
    parents: [B, N] int32, each node's parent (-1 the root).
    depth: [B, N] int32, each node's depth, 1 .. D.
    q: [B, N, V] float32, the distribution each token was drawn from (a one-hot for a
      deterministic choice); None when greedy.
    cache: the draft's cache.
    draft_path_slots: [B, N] int32, the draft's own scratch node index of each node (the
      nodes it fed), for moving the accepted path in its cache (`tree.compact`).
    draft_nodes: the draft's scratch nodes (static).
    nonfinite: [B] bool, rows whose draft logits held a NaN or an infinity.
  """

  tokens: jax.Array
  parents: jax.Array
  depth: jax.Array
  q: Optional[jax.Array]
  cache: Any
  draft_path_slots: jax.Array
  draft_nodes: int
  nonfinite: jax.Array


def tree_call(base: jax.Array, slot_depth: jax.Array, visible: jax.Array, offset: int,
              count: int) -> Tree:
  """The `Tree` of a call that feeds tree slots offset .. offset + count - 1.

  Args:
    base: [B] the root's slot; slot_depth: [B, M] or [M]; visible: [B, M, M] or [M, M],
      ancestor-or-self of each tree slot.
  """
  batch = base.shape[0]
  slot_depth = jnp.broadcast_to(jnp.asarray(slot_depth, jnp.int32),
                                (batch,) + jnp.shape(slot_depth)[-1:])
  visible = jnp.asarray(visible)
  visible = jnp.broadcast_to(visible, (batch,) + visible.shape[-2:])
  return Tree(base=base, offset=jnp.full((batch,), offset, jnp.int32), depth=slot_depth,
              visible=jax.lax.slice_in_dim(visible, offset, offset + count, axis=1))


def _catch_up(draft: Bound, cache, seq: jax.Array, pos: jax.Array):
  """The draft's call of positions pos - 1 and pos: (the logits after the root [B, V],
  the cache)."""
  start = jnp.maximum(pos - 1, 0)
  pair = jnp.stack([gather_rows(seq, start), gather_rows(seq, start + 1)], axis=1)  # [B, 2]
  logits, cache = draft.decode(cache, pair, start)
  return jnp.take_along_axis(logits, (pos - start)[:, None, None], axis=1)[:, 0], cache


def _children(logits: jax.Array, branching: int, keys: Optional[jax.Array], params,
              cfg: LoopConfig):
  """The children of K nodes from the draft's logits [B, K, V]: tokens [B, K * b] and the
  distribution each was drawn from [B, K * b, V] (None when greedy).

  Several children per node are the draft's top b tokens by its logits (point masses; the
  order of the warped distribution too, where it keeps them): a greedy row of a sampled
  batch, whose warped q is one-hot, still gets b likely tokens. One child per node under
  sampling is a draw from the warped q, as a chain drafts."""
  batch, count, vocab = logits.shape
  if cfg.sampling.greedy or branching > 1:
    x = jax.lax.top_k(logits, branching)[1].reshape(batch, count * branching)
    return x, None if cfg.sampling.greedy else jax.nn.one_hot(x, vocab, dtype=jnp.float32)
  q = sampling.warp(logits, params, cfg.sampling)  # [B, K, V]
  node_keys = split_keys(keys, count)  # [K, B, ...]: each node its own draw
  x = jax.vmap(sampling.sample, in_axes=(0, 1), out_axes=1)(node_keys, q)  # [B, K]
  return x, q


def grow_static(draft: Bound, cache, seq: jax.Array, pos: jax.Array, keys, params,
                cfg: LoopConfig) -> Proposal:
  """The static tree `cfg.tree` below each row's last token.

  Args:
    draft: the draft and its rows' encoding.
    cache: the draft's cache.
    seq: [B, W] the rows' sequences; pos: [B] each row's last token's position.
    keys: [D, B, ...] a key per depth and row (None when greedy).
    params: the rows' SamplingParams.
    cfg: the static loop config (cfg.tree a `tree.TreeShape`).
  """
  shape = cfg.tree
  parents, depth = shape.parents(), shape.depths()
  slot_depth = tree.slot_depths(depth)
  visible = tree.ancestors(parents)
  logits, cache = _catch_up(draft, cache, seq, pos)
  bad = nonfinite(logits[:, None])
  tokens, q = _children(logits[:, None], shape.branching[0],
                        None if keys is None else keys[0], params, cfg)
  all_tokens, all_q = [tokens], [q]
  for d, (begin, size) in enumerate(zip(shape.level_starts()[:-1], shape.level_sizes()[:-1])):
    call = tree_call(pos, slot_depth, visible, begin + 1, size)
    logits, cache = draft.decode(cache, tokens, pos, tree=call)  # [B, K, V]
    bad |= nonfinite(logits)
    tokens, q = _children(logits, shape.branching[d + 1],
                          None if keys is None else keys[d + 1], params, cfg)
    all_tokens.append(tokens)
    all_q.append(q)
  tokens = jnp.concatenate(all_tokens, axis=1)
  batch, num = tokens.shape
  rows = lambda a: jnp.broadcast_to(jnp.asarray(a, jnp.int32), (batch, num))
  return Proposal(tokens=tokens, parents=rows(parents), depth=rows(depth),
                  q=None if cfg.sampling.greedy else jnp.concatenate(all_q, axis=1),
                  cache=cache, draft_path_slots=rows(np.arange(num)), draft_nodes=num,
                  nonfinite=bad)


def _scores(logits: jax.Array) -> jax.Array:
  """Log-probabilities the dynamic tree ranks by: the draft's own softmax, [..., V] (the
  ranking reads the draft alone, whatever it is, so the tree rule stays exact)."""
  return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


def grow_dynamic(draft: Bound, cache, seq: jax.Array, pos: jax.Array,
                 cfg: LoopConfig) -> Proposal:
  """A tree grown per row (`tree.DynamicTree`, cfg.tree): every candidate is a point mass,
  the choice a function of the draft's probabilities alone.

  The draft's scratch slots: the root, then the `top` expanded nodes of each depth
  1 .. D - 1 (node (d - 1) * top + j); the candidates: `top` at depth 1, `top` * `top` at
  each depth after (P), of which the N likeliest are verified.
  """
  spec = cfg.tree
  top, depth_count = spec.top, spec.depth
  logits, cache = _catch_up(draft, cache, seq, pos)
  batch = pos.shape[0]
  bad = nonfinite(logits[:, None])
  lp = _scores(logits)  # [B, V]
  score, token = jax.lax.top_k(lp, top)  # [B, top]
  pool_tokens, pool_scores = [token], [score]
  pool_parents = [jnp.full((batch, top), -1, jnp.int32)]
  pool_fed = [jnp.full((batch, top), -1, jnp.int32)]  # draft scratch node, -1 not fed
  draft_nodes = (depth_count - 1) * top
  draft_parent = jnp.full((batch, max(draft_nodes, 1)), -1, jnp.int32)
  frontier = jnp.broadcast_to(jnp.arange(top, dtype=jnp.int32), (batch, top))  # pool index
  f_tokens, f_scores = token, score
  offset = 0  # pool index of the current depth's first candidate
  for d in range(1, depth_count):
    # feed the frontier (depth d) into draft scratch nodes (d - 1) * top + j
    first = (d - 1) * top
    f_parent_pool = jnp.take_along_axis(jnp.concatenate(pool_parents, 1), frontier, 1)
    fed_all = jnp.concatenate(pool_fed, 1)
    f_parent_draft = jnp.where(f_parent_pool < 0, -1, jnp.take_along_axis(
        fed_all, jnp.maximum(f_parent_pool, 0), 1))  # [B, top]
    draft_parent = draft_parent.at[:, first:first + top].set(f_parent_draft)
    pool_fed = _mark_fed(pool_fed, frontier, first, top)
    slot_depth = tree.slot_depths(jnp.repeat(jnp.arange(1, depth_count, dtype=jnp.int32),
                                             top))  # [Md]
    visible = tree.ancestors(draft_parent)  # [B, Md, Md]
    call = tree_call(pos, slot_depth, visible, first + 1, top)
    logits, cache = draft.decode(cache, f_tokens, pos, tree=call)  # [B, top, V]
    bad |= nonfinite(logits)
    lp = _scores(logits)  # [B, top, V]
    child_score, child_token = jax.lax.top_k(lp, top)  # [B, top, top]
    child_score = child_score + f_scores[:, :, None]
    offset += top if d == 1 else top * top
    pool_tokens.append(child_token.reshape(batch, top * top))
    pool_scores.append(child_score.reshape(batch, top * top))
    pool_parents.append(jnp.repeat(frontier, top, axis=1))
    pool_fed.append(jnp.full((batch, top * top), -1, jnp.int32))
    f_scores, best = jax.lax.top_k(child_score.reshape(batch, top * top), top)
    frontier = offset + best.astype(jnp.int32)
    f_tokens = jnp.take_along_axis(child_token.reshape(batch, top * top), best, 1)
  tokens = jnp.concatenate(pool_tokens, 1)  # [B, P]
  scores = jnp.concatenate(pool_scores, 1)
  parents = jnp.concatenate(pool_parents, 1)
  fed = jnp.concatenate(pool_fed, 1)
  pool_depth = jnp.asarray(spec.pool_depths())
  # The N likeliest, shallower first on ties (the pool is depth-major: a stable sort keeps
  # every parent ahead of its children), then back in pool order: breadth-first.
  chosen = jnp.sort(jnp.argsort(-scores, axis=1, stable=True)[:, :spec.nodes], axis=1)
  inverse = jax.vmap(lambda c: jnp.full((tokens.shape[1],), -1, jnp.int32).at[c].set(
      jnp.arange(spec.nodes, dtype=jnp.int32)))(chosen)  # [B, P]
  pool_parent = jnp.take_along_axis(parents, chosen, 1)
  new_parents = jnp.where(pool_parent < 0, -1, jnp.take_along_axis(
      inverse, jnp.maximum(pool_parent, 0), 1))
  new_tokens = jnp.take_along_axis(tokens, chosen, 1)
  q = None if cfg.sampling.greedy else jax.nn.one_hot(new_tokens, logits.shape[-1],
                                                      dtype=jnp.float32)
  return Proposal(tokens=new_tokens, parents=new_parents, depth=pool_depth[chosen],
                  q=q, cache=cache, draft_path_slots=jnp.take_along_axis(fed, chosen, 1),
                  draft_nodes=max(draft_nodes, 1), nonfinite=bad)


def _mark_fed(pool_fed: list, frontier: jax.Array, first: int, top: int) -> list:
  """Records that pool candidates `frontier` [B, top] were fed as draft nodes first + j."""
  sizes = [a.shape[1] for a in pool_fed]
  fed = jnp.concatenate(pool_fed, 1)
  fed = jax.vmap(lambda f, idx: f.at[idx].set(first + jnp.arange(top, dtype=jnp.int32)))(
      fed, frontier)
  return list(jnp.split(fed, np.cumsum(sizes)[:-1], axis=1))


def propose(draft: Bound, cache, seq: jax.Array, pos: jax.Array, keys, params,
            cfg: LoopConfig) -> Proposal:
  """The draft model's tree for cfg.tree (static or dynamic)."""
  if isinstance(cfg.tree, tree.DynamicTree):
    return grow_dynamic(draft, cache, seq, pos, cfg)
  return grow_static(draft, cache, seq, pos, keys, params, cfg)
