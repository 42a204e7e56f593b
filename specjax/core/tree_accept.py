"""Exact verification of a token tree in one target call (docs/algorithm.md, token trees).

The target scored the root and every node: p[:, m] is its distribution after tree slot m
(slot 0 the root, slot i + 1 node i). Greedy keeps the deepest path whose every token is
the target's argmax after its parent, then the target's argmax after the path's end.

Sampling walks down from the root. At a node whose target distribution is p, the
candidate children are tried in index order; child c, drawn from q_c (the draft's
distribution, or a point mass for a token chosen deterministically, such as a top-k),
is accepted when u * q_c(x_c) < r(x_c), u uniform, r the residual, at first p itself;
after a rejection r becomes norm(max(0, r - q_c)). An accepted child becomes the node
(r resets to its own p); once no child of the node is accepted, the next token is drawn
from r. This is recursive rejection sampling (SpecInfer; for point masses, sequential
elimination from p): each step keeps the distribution exactly p whenever the candidates
of a node are drawn independently of each other from their q, as i.i.d. samples or
deterministic choices are. A chain is the tree of one child per node, and then this is the
token rule of `specjax.core.acceptance.accept`.

Shape letters: B rows, N nodes, M = N + 1 tree slots, D deepest depth, V vocab.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import jax
import jax.numpy as jnp

from specjax.core import sampling
from specjax.core.acceptance import residual, typical_threshold
from specjax.core.state import split_keys
from specjax.core.tree import ancestors


class TreeAcceptance(NamedTuple):
  """What the verification of a tree keeps.

  Attributes:
    n: [B] int32, the accepted depth (0 .. D): tokens taken from the tree.
    y: [B] int32, the token drawn after them (the target's).
    path: [B, D] int32, the accepted node at depth 1 .. D (-1 past n).
    beta: [B, D] float32, sum_x min(p(x), q(x)) of the first child tried at each depth
      the walk reached (0 beyond): the chain's beta when the tree is a chain.
    reached: [B, D] bool, the depths whose first child was tried (the beta's positions).
  """

  n: jax.Array
  y: jax.Array
  path: jax.Array
  beta: jax.Array
  reached: jax.Array


def _path(chosen: jax.Array, parents: jax.Array, depth: jax.Array, n: jax.Array,
          max_depth: int, visible: Optional[jax.Array]) -> jax.Array:
  """The nodes from depth 1 down to node `chosen` [B] (-1 past n): [B, D]."""
  anc = ancestors(parents) if visible is None else jnp.broadcast_to(
      visible, parents.shape[:1] + visible.shape[-2:])  # [B, M, M]
  slot = jnp.maximum(chosen, 0) + 1
  on_path = jnp.take_along_axis(anc, slot[:, None, None], axis=1)[:, 0, 1:]  # [B, N]
  on_path &= (n > 0)[:, None]
  at_depth = on_path[:, None, :] & (depth[:, None, :] ==
                                    jnp.arange(1, max_depth + 1)[None, :, None])  # [B, D, N]
  return jnp.where(jnp.any(at_depth, -1), jnp.argmax(at_depth, -1), -1).astype(jnp.int32)


def _rows(array: jax.Array, batch: int) -> jax.Array:
  array = jnp.asarray(array, jnp.int32)
  return jnp.broadcast_to(array, (batch,) + array.shape[-1:])


def accept_tree_greedy(target_tokens: jax.Array, tokens: jax.Array, parents: jax.Array,
                       depth: jax.Array, max_depth: int,
                       visible: Optional[jax.Array] = None) -> TreeAcceptance:
  """Greedy verification: the deepest path of argmax matches (the first such node where
  two siblings carry the same token).

  Args:
    target_tokens: [B, M] int32, the target's argmax after each tree slot.
    tokens: [B, N] int32, the nodes' tokens.
    parents: [N] or [B, N] int32, each node's parent (-1 the root), breadth-first order.
    depth: [N] or [B, N] int32, each node's depth 1 .. D.
    max_depth: D.
    visible: [B, M, M] or [M, M] bool, ancestor-or-self of the tree slots, where the
      caller has it (`tree.ancestors` of parents otherwise).

  Returns:
    A `TreeAcceptance`; beta is 1 where the first child tried at a depth matched.
  """
  batch, num = tokens.shape
  parents, depth = _rows(parents, batch), _rows(depth, batch)
  expected = jnp.take_along_axis(target_tokens, parents + 1, axis=1)  # [B, N]
  ok = tokens == expected
  chosen, n, path, reached = _deepest(ok, parents, depth, max_depth, visible)
  y = jnp.take_along_axis(target_tokens, (chosen + 1)[:, None], axis=1)[:, 0]
  # The first child of each reached node: does it match? (beta of a one-hot p and q)
  first_ok = _first_child_values(ok.astype(jnp.float32), parents, path, max_depth)
  return TreeAcceptance(n=n, y=y, path=path, beta=jnp.where(reached, first_ok, 0.0),
                        reached=reached)


def _deepest(ok: jax.Array, parents: jax.Array, depth: jax.Array, max_depth: int,
             visible: Optional[jax.Array]):
  """The deepest node whose every ancestor-or-self is `ok` [B, N] (the first such node
  on ties): (chosen [B], -1 for none; n [B] its depth; path [B, D]; reached [B, D])."""
  batch, num = ok.shape

  def body(i, acc):
    parent_ok = jnp.where(parents[:, i] < 0, True,
                          jnp.take_along_axis(acc, jnp.maximum(parents[:, i], 0)[:, None],
                                              axis=1)[:, 0])
    return acc.at[:, i].set(ok[:, i] & parent_ok)
  acc = jax.lax.fori_loop(0, num, body, jnp.zeros((batch, num), bool))  # [B, N]
  score = jnp.where(acc, depth * (num + 1) + (num - jnp.arange(num))[None], -1)
  chosen = jnp.where(jnp.any(acc, 1), jnp.argmax(score, 1), -1).astype(jnp.int32)  # [B]
  n = jnp.where(chosen >= 0, jnp.take_along_axis(depth, jnp.maximum(chosen, 0)[:, None],
                                                 1)[:, 0], 0).astype(jnp.int32)
  path = _path(chosen, parents, depth, n, max_depth, visible)
  return chosen, n, path, jnp.arange(max_depth)[None] <= n[:, None]


def accept_tree_typical(p: jax.Array, q: jax.Array, tokens: jax.Array, parents: jax.Array,
                        depth: jax.Array, keys: jax.Array, max_depth: int, epsilon: float,
                        delta: float, visible: Optional[jax.Array] = None
                        ) -> TreeAcceptance:
  """Typical acceptance of a tree (Medusa), NOT exact: the deepest path whose every
  token x has p(x) > `specjax.core.acceptance.typical_threshold`(p) under its parent's
  distribution p, then a token drawn from the target's p after the path's end. Shapes as
  `accept_tree`; epsilon and delta as `specjax.core.rule.typical_parameters`."""
  batch, num = tokens.shape
  parents, depth = _rows(parents, batch), _rows(depth, batch)
  p_parent = jnp.take_along_axis(p, (parents + 1)[..., None], 1)  # [B, N, V]
  p_x = jnp.take_along_axis(p_parent, tokens[..., None], axis=-1)[..., 0]  # [B, N]
  ok = p_x > typical_threshold(p_parent, epsilon, delta)
  chosen, n, path, reached = _deepest(ok, parents, depth, max_depth, visible)
  p_end = jnp.take_along_axis(p, (chosen + 1)[:, None, None], axis=1)[:, 0]  # [B, V]
  y = sampling.sample(split_keys(keys, 2)[1], p_end)
  beta = _first_child_values(jnp.sum(jnp.minimum(p_parent, q), axis=-1), parents, path,
                             max_depth)
  return TreeAcceptance(n=n, y=y, path=path, beta=jnp.where(reached, beta, 0.0),
                        reached=reached)


def _first_child_values(values: jax.Array, parents: jax.Array, path: jax.Array,
                        max_depth: int) -> jax.Array:
  """values [B, N] at the first child of the root and of each path node: [B, D]."""
  del max_depth
  heads = jnp.concatenate([jnp.full(path.shape[:1] + (1,), -1, jnp.int32), path[:, :-1]],
                          axis=1)  # [B, D]: the node whose first child depth d+1 tries
  is_child = parents[:, None, :] == heads[:, :, None]  # [B, D, N]
  first = jnp.argmax(is_child, axis=-1)  # [B, D]
  has = jnp.any(is_child, axis=-1)
  return jnp.where(has, jnp.take_along_axis(values, first, axis=1), 0.0)


def accept_tree(p: jax.Array, q: jax.Array, tokens: jax.Array, parents: jax.Array,
                depth: jax.Array, keys: jax.Array, max_depth: int,
                q_scale: float = 1.0, visible: Optional[jax.Array] = None
                ) -> TreeAcceptance:
  """Sampled verification (module doc): exact for the target's distribution.

  Args:
    p: [B, M, V] float32, the warped target distributions after each tree slot.
    q: [B, N, V] float32, the distribution each node's token was drawn from (a one-hot for
      a deterministic choice).
    tokens: [B, N] int32, the nodes' tokens.
    parents: [N] or [B, N] int32, each node's parent (-1 the root), breadth-first order.
    depth: [N] or [B, N] int32, each node's depth 1 .. D.
    keys: [B, ...] one PRNG key per row.
    max_depth: D.
    q_scale: lenience l in (0, 1]: accept when u * l * q(x) < r(x); 1 is exact.
    visible: as `accept_tree_greedy`.

  Returns:
    A `TreeAcceptance`.
  """
  batch, num = tokens.shape
  parents, depth = _rows(parents, batch), _rows(depth, batch)
  accept_keys, extra_keys = split_keys(keys, 2)
  u = sampling.uniform(accept_keys, (num,))  # [B, N]
  q_x = jnp.take_along_axis(q, tokens[..., None], axis=-1)[..., 0]  # [B, N]
  beta_first = jnp.sum(jnp.minimum(jnp.take_along_axis(p, (parents + 1)[..., None], 1), q),
                       axis=-1)  # [B, N]: beta of each node against its parent's p

  def body(i, carry):
    node, r = carry  # [B] the current node (-1 the root), [B, V] its residual
    tried = parents[:, i] == node
    r_x = jnp.take_along_axis(r, tokens[:, i][:, None], axis=1)[:, 0]
    ok = tried & (u[:, i] * (q_scale * q_x[:, i]) < r_x)
    rejected = tried & ~ok
    r = jnp.where(ok[:, None], p[:, i + 1],
                  jnp.where(rejected[:, None], residual(r, q[:, i], q_scale), r))
    return jnp.where(ok, i, node), r

  node, r = jax.lax.fori_loop(0, num, body, (jnp.full((batch,), -1, jnp.int32), p[:, 0]))
  y = sampling.sample(extra_keys, r)  # [B]
  n = jnp.where(node >= 0, jnp.take_along_axis(depth, jnp.maximum(node, 0)[:, None],
                                               1)[:, 0], 0).astype(jnp.int32)
  path = _path(node, parents, depth, n, max_depth, visible)
  reached = jnp.arange(max_depth)[None] <= n[:, None]
  beta = _first_child_values(beta_first, parents, path, max_depth)
  return TreeAcceptance(n=n, y=y, path=path, beta=jnp.where(reached, beta, 0.0),
                        reached=reached)


def accepted_tokens(tokens: jax.Array, path: jax.Array, y: jax.Array,
                    n: jax.Array) -> jax.Array:
  """The block a row commits: the path's tokens, then y: [B, D + 1] (stale past n + 1)."""
  picked = jnp.take_along_axis(tokens, jnp.maximum(path, 0), axis=1)  # [B, D]
  block = jnp.concatenate([picked, picked[:, :1]], axis=1)  # [B, D+1]
  at_n = jnp.arange(block.shape[1])[None] == n[:, None]
  return jnp.where(at_n, y[:, None], block)
