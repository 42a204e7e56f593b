"""Token trees grown from a draft's next-token scores: a static shape (`tree.TreeShape`) or a
tree grown per row from the draft's own probabilities (`tree.DynamicTree`, EAGLE-2). The
draft is a model (`specjax.core.model_proposer`) or a proposer's scores in a model's shape
(`specjax.core.proposal.Scorer`: a bigram table); either returns a `Proposal`.

Both start with the chain's first call (`steps.first_call`: by default the catch-up of
two tokens at positions pos - 1 and pos, so that the draft's cache holds every committed
token), then feed one depth's nodes per call with a tree mask (`specjax.models.base.Tree`)
in the draft's scratch slots after the root. Children are the draft's top tokens below a
node by its logits (point masses: a deterministic choice), or, at a depth of a static tree
with one child per node under sampling, a draw from the draft's warped distribution (as
the chain drafts); under sampling a dynamic tree's expanded nodes each draw their first
child so and take the likeliest other tokens as its siblings. Either way a node's
candidates are drawn independently of the target's randomness, which the exact tree rule
needs.

Shape letters: B rows, N nodes, M = N + 1 tree slots, D depth, K nodes of one call,
P candidates of a dynamic tree, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import sampling, tree
from specjax.core.proposal import Proposal
from specjax.core.state import LoopConfig, split_keys
from specjax.core.steps import Bound, first_call, nonfinite
from specjax.models.base import Tree


def tree_call(base: jax.Array, slot_depth: jax.Array, visible: jax.Array, offset,
              count: int) -> Tree:
  """The `Tree` of a call that feeds tree slots offset .. offset + count - 1.

  Args:
    base: [B] the root's slot; slot_depth: [B, M] or [M]; visible: [B, M, M] or [M, M],
      ancestor-or-self of each tree slot.
    offset: the call's first tree slot, an int or a traced int32 scalar (a loop's).
    count: K, the call's tokens (static).
  """
  batch = base.shape[0]
  slot_depth = jnp.broadcast_to(jnp.asarray(slot_depth, jnp.int32),
                                (batch,) + jnp.shape(slot_depth)[-1:])
  visible = jnp.asarray(visible)
  visible = jnp.broadcast_to(visible, (batch,) + visible.shape[-2:])
  return Tree(base=base, offset=jnp.full((batch,), offset, jnp.int32), depth=slot_depth,
              visible=jax.lax.dynamic_slice_in_dim(visible, offset, count, axis=1))


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
                cfg: LoopConfig, catch_up: bool = True) -> Proposal:
  """The static tree `cfg.tree` below each row's last token.

  Args:
    draft: the draft and its rows' encoding.
    cache: the draft's cache.
    seq: [B, W] the rows' sequences; pos: [B] each row's last token's position.
    keys: [D, B, ...] a key per depth and row (None when greedy).
    params: the rows' SamplingParams.
    cfg: the static loop config (cfg.tree a `tree.TreeShape`).
    catch_up: the first call's (`steps.first_call`).
  """
  shape = cfg.tree
  parents, depth = shape.parents(), shape.depths()
  slot_depth = tree.slot_depths(depth)
  visible = shape.visible()  # [M, M], a constant of the program
  logits, cache = first_call(draft, cache, seq, pos, catch_up)
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
  q = None if cfg.sampling.greedy else jnp.concatenate(all_q, axis=1)
  return Proposal(tokens=tokens, parents=rows(parents), depth=rows(depth),
                  visible=jnp.asarray(visible), q=q, state=cache, nonfinite=bad,
                  drafted=jnp.full((batch,), num, jnp.int32), slots=rows(np.arange(num)),
                  scratch=num)


def _scores(logits: jax.Array) -> jax.Array:
  """Log-probabilities the dynamic tree ranks by: the draft's own softmax, [..., V] (the
  ranking reads the draft alone, whatever it is, so the tree rule stays exact)."""
  return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


def _expand(logits: jax.Array, top: int, keys: Optional[jax.Array], params,
            cfg: LoopConfig):
  """The `top` children of K nodes of a dynamic tree from the draft's logits [B, K, V]:
  (tokens [B, K, top], ranking scores [B, K, top], the warped q [B, K, V] or None).

  Greedy: the top tokens by the draft's log-probabilities, their scores those. Sampling:
  the first child is a draw from the warped q (as a chain drafts) and its ranking score is
  the node's largest log-probability, whatever was drawn; the others are the top - 1
  likeliest of the other tokens (point masses) with their own scores, no larger."""
  logp = _scores(logits)  # [B, K, V]
  if cfg.sampling.greedy:
    score, token = jax.lax.top_k(logp, top)
    return token, score, None
  batch, count, _ = logits.shape
  q = sampling.warp(logits, params, cfg.sampling)  # [B, K, V]
  if count == 1:
    first = sampling.sample(keys, q[:, 0])[:, None]  # [B, 1]
  else:
    node_keys = split_keys(keys, count)  # [K, B, ...]: each node its own draw
    first = jax.vmap(sampling.sample, in_axes=(0, 1), out_axes=1)(node_keys, q)  # [B, K]
  best = jnp.max(logp, axis=-1, keepdims=True)  # [B, K, 1]: the first child's rank score
  token, score = first[..., None].astype(jnp.int32), best
  if top > 1:
    rest = jnp.where(jnp.arange(logp.shape[-1]) == first[..., None], -jnp.inf, logp)
    rest_score, rest_token = jax.lax.top_k(rest, top - 1)  # [B, K, top - 1]
    token = jnp.concatenate([token, rest_token.astype(jnp.int32)], axis=-1)
    score = jnp.concatenate([score, rest_score], axis=-1)
  return token, score, q


def grow_dynamic(draft: Bound, cache, seq: jax.Array, pos: jax.Array, keys, params,
                 cfg: LoopConfig, catch_up: bool = True,
                 sample_first: bool = True) -> Proposal:
  """A tree grown per row (`tree.DynamicTree`, cfg.tree) from the draft's probabilities.

  The draft's scratch slots: the root, then the `top` expanded nodes of each depth
  1 .. D - 1 (node (d - 1) * top + j); the candidates: `top` at depth 1, `top` * `top` at
  each depth after (P), of which the N likeliest are verified, ranked by their cumulative
  draft log-probabilities. Greedy, every candidate is one of its parent's top tokens (a
  point mass). Sampling (with `sample_first`), each expanded node's first child is drawn
  from the draft's warped distribution, which is its q in the tree rule, and ranks with
  its parent's likeliest token's score, whatever was drawn; the rest are the likeliest
  other tokens (point masses). Whatever depends on a drawn token (its siblings, its
  descendants and what they push out) then ranks at or below it, and after it in pool
  order, so whether the drawn child, its ancestors and their earlier siblings are
  verified does not depend on the draw: the draw keeps its q, and the tree rule stays
  exact (docs/algorithm.md). Without `sample_first` every child is a point mass under
  sampling too.

  Args:
    draft: the draft and its rows' encoding.
    cache: the draft's cache.
    seq: [B, W] the rows' sequences; pos: [B] each row's last token's position.
    keys: [D, B, ...] a key per depth and row (None when greedy).
    params: the rows' SamplingParams.
    cfg: the static loop config (cfg.tree a `tree.DynamicTree`).
    catch_up: the first call's (`steps.first_call`).
    sample_first: draw each expanded node's first child (sampling only).
  """
  spec = cfg.tree
  top, depth_count, pool = spec.top, spec.depth, spec.pool_size
  sampled = sample_first and not cfg.sampling.greedy
  grow_cfg = cfg if sampled else dataclasses.replace(
      cfg, sampling=dataclasses.replace(cfg.sampling, greedy=True))
  logits, cache = first_call(draft, cache, seq, pos, catch_up)
  batch = pos.shape[0]
  bad = nonfinite(logits[:, None])
  token, score, q_root = _expand(logits[:, None], top, None if keys is None else keys[0],
                                 params, grow_cfg)
  token, score = token[:, 0], score[:, 0]  # [B, top]
  # The candidates, depth-major: `top` at depth 1, then top * top per depth (frontier node
  # by frontier node, each's children by rank); every slot is written once below.
  tokens = jnp.zeros((batch, pool), jnp.int32).at[:, :top].set(token)
  scores = jnp.full((batch, pool), -jnp.inf, jnp.float32).at[:, :top].set(score)
  parents = jnp.full((batch, pool), -1, jnp.int32)
  fed = jnp.full((batch, pool), -1, jnp.int32)  # the draft scratch node of a candidate
  draft_nodes = max((depth_count - 1) * top, 1)
  slot_depth = tree.slot_depths(np.repeat(np.arange(1, depth_count, dtype=np.int32), top))
  eye = jnp.asarray(np.eye(draft_nodes + 1, dtype=bool))
  visible = jnp.broadcast_to(eye, (batch,) + eye.shape)  # [B, Md, Md], grown per depth
  frontier = jnp.broadcast_to(jnp.arange(top, dtype=jnp.int32), (batch, top))  # pool index
  vocab = logits.shape[-1]
  # [B, 1 + (D - 1) * top, V]: the drawn children's q, the root's expansion first
  q_nodes = (jnp.zeros((batch, 1 + (depth_count - 1) * top, vocab), jnp.float32)
             .at[:, :1].set(q_root) if sampled else None)

  def grow(d, carry):
    """Depth d: the frontier (its `top` nodes) becomes draft scratch nodes first ..
    first + top - 1, one draft call scores them, and their children join the pool. One
    body for every depth, so the program holds the draft's call once."""
    cache, visible, fed, tokens, scores, parents, frontier, f_tokens, f_scores, bad, q_nodes = (
        carry)
    first, start = (d - 1) * top, top + (d - 1) * top * top
    f_parent = jnp.take_along_axis(parents, frontier, 1)  # [B, top], pool index or -1
    parent_slot = jnp.where(f_parent < 0, 0, jnp.take_along_axis(
        fed, jnp.maximum(f_parent, 0), 1) + 1)  # [B, top]
    rows = jnp.take_along_axis(visible, parent_slot[:, :, None], axis=1)  # [B, top, Md]
    own = jax.lax.dynamic_slice_in_dim(eye, first + 1, top)  # [top, Md]: their draft slots
    visible = jax.lax.dynamic_update_slice_in_dim(visible, rows | own, first + 1, axis=1)
    fed = jax.vmap(lambda f, idx: f.at[idx].set(first + jnp.arange(top, dtype=jnp.int32)))(
        fed, frontier)
    call = tree_call(pos, slot_depth, visible, first + 1, top)
    logits, cache = draft.decode(cache, f_tokens, pos, tree=call)  # [B, top, V]
    bad |= nonfinite(logits)
    child_token, child_score, q = _expand(logits, top, None if keys is None else keys[d],
                                          params, grow_cfg)  # [B, top, top]
    if sampled:
      q_nodes = jax.lax.dynamic_update_slice_in_dim(q_nodes, q, first + 1, axis=1)
    child_score = (child_score + f_scores[:, :, None]).reshape(batch, top * top)
    child_token = child_token.reshape(batch, top * top)
    put = lambda a, new: jax.lax.dynamic_update_slice_in_dim(a, new.astype(a.dtype), start,
                                                             axis=1)
    tokens, scores = put(tokens, child_token), put(scores, child_score)
    parents = put(parents, jnp.repeat(frontier, top, axis=1))
    f_scores, best = jax.lax.top_k(child_score, top)
    frontier = start + best.astype(jnp.int32)
    f_tokens = jnp.take_along_axis(child_token, best, 1)
    return (cache, visible, fed, tokens, scores, parents, frontier, f_tokens, f_scores, bad,
            q_nodes)

  (cache, _, fed, tokens, scores, parents, _, _, _, bad, q_nodes) = jax.lax.fori_loop(
      1, depth_count, grow,
      (cache, visible, fed, tokens, scores, parents, frontier, token, score, bad, q_nodes))
  pool_depth = jnp.asarray(spec.pool_depths())
  # The N likeliest, shallower first on ties (the pool is depth-major: a stable sort keeps
  # every parent ahead of its children), then back in pool order: breadth-first.
  chosen = jnp.sort(jnp.argsort(-scores, axis=1, stable=True)[:, :spec.nodes], axis=1)
  inverse = jax.vmap(lambda c: jnp.full((pool,), -1, jnp.int32).at[c].set(
      jnp.arange(spec.nodes, dtype=jnp.int32)))(chosen)  # [B, P]
  pool_parent = jnp.take_along_axis(parents, chosen, 1)
  new_parents = jnp.where(pool_parent < 0, -1, jnp.take_along_axis(
      inverse, jnp.maximum(pool_parent, 0), 1))
  new_tokens = jnp.take_along_axis(tokens, chosen, 1)
  q = None
  if not cfg.sampling.greedy:
    q = jax.nn.one_hot(new_tokens, vocab, dtype=jnp.float32)  # [B, N, V]
  if sampled:  # a drawn first child's q: the warped distribution it was drawn from
    drawn = np.full((pool,), -1, np.int32)  # pool index -> its expansion's q (or -1)
    drawn[0] = 0
    for d in range(1, depth_count):
      start = top + (d - 1) * top * top
      drawn[start:start + top * top:top] = 1 + (d - 1) * top + np.arange(top)
    which = jnp.asarray(drawn)[chosen]  # [B, N]
    q_drawn = jnp.take_along_axis(q_nodes, jnp.maximum(which, 0)[:, :, None], axis=1)
    q = jnp.where((which >= 0)[:, :, None], q_drawn, q)
  return Proposal(tokens=new_tokens, parents=new_parents, depth=pool_depth[chosen],
                  visible=tree.ancestors(new_parents), q=q, state=cache, nonfinite=bad,
                  drafted=jnp.full((batch,), spec.nodes, jnp.int32),
                  slots=jnp.take_along_axis(fed, chosen, 1), scratch=draft_nodes)


def propose(draft: Bound, cache, seq: jax.Array, pos: jax.Array, keys, params,
            cfg: LoopConfig, catch_up: bool = True) -> Proposal:
  """The draft model's tree for cfg.tree (static or dynamic); catch_up, the first call's
  (`steps.first_call`)."""
  if isinstance(cfg.tree, tree.DynamicTree):
    return grow_dynamic(draft, cache, seq, pos, keys, params, cfg, catch_up)
  return grow_static(draft, cache, seq, pos, keys, params, cfg, catch_up)
