"""Continuations retrieved from text, proposed as a trie (a token tree) or as one chain.

Retrieval proposers (`specjax.proposers.rest`: a datastore of text; `specjax.proposers.
suffix`: the row's own input and output so far) find C continuations of what the row has
written, each up to D tokens. Their common prefixes form a trie; a trie node's weight is
the total weight of the continuations that pass through it (their count, where each
retrieved continuation weighs 1), and the N heaviest nodes are verified as a tree (a node
weighs at most what its parent does, and on ties the shallower comes first, so the N form
a tree). A chain is the path that takes the heaviest child at each depth.

Every node is a deterministic choice, a point mass, so the exact tree and chain rules keep
the target's output (greedy) and its distribution (sampled) whatever was retrieved.

Shape letters: B rows, C continuations, D depth, N nodes, G chain length, P = C * D trie
candidates, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import tree as tree_lib
from specjax.core.state import LoopConfig


def prefixes(tokens: jax.Array, valid: jax.Array) -> jax.Array:
  """same [B, C, C, D] bool: continuations c and c' agree on their first d + 1 tokens,
  both of which are valid (tokens [B, C, D] int32, valid [B, C, D] bool, closed under
  prefixes)."""
  equal = (tokens[:, :, None] == tokens[:, None]) & valid[:, :, None] & valid[:, None]
  return jnp.cumsum(~equal, axis=-1) == 0


def weights(tokens: jax.Array, valid: jax.Array, weight: jax.Array):
  """(node weight [B, C, D] float32, canonical [B, C, D] bool, representative [B, C, D]):
  each prefix's total weight, whether continuation c is the first to hold its prefix of
  d + 1 tokens (the trie node's representative), and that first continuation's index."""
  same = prefixes(tokens, valid)  # [B, C, C, D]
  score = jnp.einsum('bcxd,bx->bcd', same.astype(jnp.float32), weight.astype(jnp.float32))
  first = jnp.argmax(same, axis=2).astype(jnp.int32)  # [B, C, D]
  canonical = valid & (first == jnp.arange(tokens.shape[1])[None, :, None])
  return score, canonical, first


def tree(tokens: jax.Array, valid: jax.Array, weight: jax.Array, nodes: int,
         fallback: int, vocab_size: int, greedy: bool, state: Any) -> proposal_lib.Proposal:
  """The N heaviest trie nodes of continuations tokens [B, C, D] (valid [B, C, D], closed
  under prefixes; weight [B, C] >= 0) as a Proposal, breadth-first.

  Where the trie has fewer than N nodes, the rest are children of the root holding
  `fallback` (they follow the real nodes, so a sibling of theirs is tried first).
  """
  return tree_and_nodes(tokens, valid, weight, nodes, fallback, vocab_size, greedy, state)[0]


def tree_and_nodes(tokens: jax.Array, valid: jax.Array, weight: jax.Array, nodes: int,
                   fallback: int, vocab_size: int, greedy: bool, state: Any):
  """`tree`, and the node of each continuation's prefix: [B, C, D] int32 (the node
  index of continuation c's first d + 1 tokens, -1 where that prefix is not verified)."""
  batch, count, depth = tokens.shape
  pool = count * depth
  score, canonical, first = weights(tokens, valid, weight)
  # Candidates depth-major (p = d * C + c): on equal weights the shallower comes first.
  flat = lambda a: jnp.swapaxes(a, 1, 2).reshape(batch, pool)
  key = jnp.where(flat(canonical), flat(score), -1.0)  # [B, P]
  key = jnp.pad(key, ((0, 0), (0, nodes)), constant_values=-1.0)  # room for N fallbacks
  chosen = jnp.argsort(-key, axis=1, stable=True)[:, :nodes]  # [B, N]
  real = jnp.take_along_axis(key, chosen, 1) >= 0  # [B, N]
  # Breadth-first: real nodes by candidate index, then the fallback nodes.
  order = jnp.argsort(jnp.where(real, chosen, pool + jnp.arange(nodes)[None]), axis=1)
  chosen, real = (jnp.take_along_axis(a, order, 1) for a in (chosen, real))
  chosen = jnp.where(real, chosen, 0)
  cand_d = chosen // count  # [B, N], each node's depth - 1
  flat_tokens = flat(tokens)
  node_tokens = jnp.where(real, jnp.take_along_axis(flat_tokens, chosen, 1), fallback)
  # A node's parent: the representative of its first d tokens, at depth d - 1.
  parent_c = jnp.take_along_axis(flat(first), jnp.maximum(chosen - count, 0), 1)
  parent_p = jnp.where(cand_d > 0, (cand_d - 1) * count + parent_c, -1)  # [B, N]
  inverse = jax.vmap(lambda c, r: jnp.full((pool,), -1, jnp.int32).at[
      jnp.where(r, c, pool)].set(jnp.arange(nodes, dtype=jnp.int32), mode='drop'))(
          chosen, real)  # [B, P]: the node index of each chosen candidate
  parents = jnp.where(real & (parent_p >= 0), jnp.take_along_axis(
      inverse, jnp.maximum(parent_p, 0), 1), -1).astype(jnp.int32)
  node_depth = jnp.where(real, cand_d + 1, 1).astype(jnp.int32)
  q = None if greedy else jax.nn.one_hot(node_tokens, vocab_size, dtype=jnp.float32)
  node_of = jnp.take_along_axis(inverse, flat(first) + (jnp.arange(pool) // count *
                                                        count)[None], 1)  # [B, P]
  node_of = jnp.where(flat(valid), node_of, -1).reshape(batch, depth, count)
  return proposal_lib.Proposal(
      tokens=node_tokens.astype(jnp.int32), parents=parents, depth=node_depth,
      visible=tree_lib.ancestors(parents), q=q, state=state,
      nonfinite=jnp.zeros((batch,), bool), drafted=jnp.full((batch,), nodes, jnp.int32)
  ), jnp.swapaxes(node_of, 1, 2)


def chain(tokens: jax.Array, valid: jax.Array, weight: jax.Array, gamma: int,
          fallback: int, vocab_size: int, greedy: bool, state: Any) -> proposal_lib.Proposal:
  """The trie's heaviest path, G tokens deep, as a chain Proposal: at each depth the
  heaviest child of the node so far (on ties, the continuation retrieved first).

  A row proposes as many tokens as its path is deep (`drafted`, at least 1: the fallback
  where nothing was retrieved); the positions past it hold `fallback`.
  """
  batch, count, depth = tokens.shape
  score, _, _ = weights(tokens, valid, weight)
  alive = jnp.ones((batch, count), bool)
  for d in range(min(depth, gamma)):  # keep the continuations on the heaviest path
    at = jnp.where(alive & valid[:, :, d], score[:, :, d], -1.0)  # [B, C]
    best = jnp.max(at, axis=1, keepdims=True)
    alive = jnp.where(best >= 0, alive & (at == best), alive)
  pick = jnp.argmax(alive, axis=1)  # [B]
  path = jnp.take_along_axis(tokens, pick[:, None, None], 1)[:, 0]  # [B, D]
  ok = jnp.take_along_axis(valid, pick[:, None, None], 1)[:, 0]
  if depth < gamma:
    path = jnp.pad(path, ((0, 0), (0, gamma - depth)))
    ok = jnp.pad(ok, ((0, 0), (0, gamma - depth)))
  path, ok = path[:, :gamma], ok[:, :gamma]
  x = jnp.where(ok, path, fallback).astype(jnp.int32)  # [B, G]
  drafted = jnp.maximum(jnp.sum(ok, axis=1), 1).astype(jnp.int32)
  q = None if greedy else jax.nn.one_hot(x, vocab_size, dtype=jnp.float32)
  return proposal_lib.chain(x, q, state, jnp.zeros((batch,), bool), drafted)


def propose(tokens: jax.Array, valid: jax.Array, weight: jax.Array, cfg, fallback: int,
            vocab_size: int, state: Any) -> proposal_lib.Proposal:
  """`chain` of cfg.gamma, or `tree` of cfg.tree's nodes (a `tree.DynamicTree`: its
  node count and depth; the continuations are cut to that depth).

  Raises:
    ValueError: a static tree (its shape is the retrieval's, not a fixed branching).
  """
  greedy = cfg.sampling.greedy
  if cfg.tree is None:
    return chain(tokens, valid, weight, cfg.gamma, fallback, vocab_size, greedy, state)
  if not isinstance(cfg.tree, tree_lib.DynamicTree):
    raise ValueError('a retrieval draft proposes the trie of what it retrieved, not a fixed '
                     'branching: pass --tree-nodes N --tree-depth D instead of --tree')
  depth = cfg.tree.depth
  if tokens.shape[2] < depth:
    pad = ((0, 0), (0, 0), (0, depth - tokens.shape[2]))
    tokens, valid = jnp.pad(tokens, pad), jnp.pad(valid, pad)
  return tree(tokens[:, :, :depth], valid[:, :, :depth], weight, cfg.tree.nodes, fallback,
              vocab_size, greedy, state)


class Retriever(proposal_lib.Stateless):
  """The proposal of a retrieval proposer: the chain or trie (`propose` above) of what its
  `continuations(params, encoded, seq, pos, depth)` -> (tokens [B, R, D], valid [B, R, D],
  weight [B, R]) finds below each row's last token, R as `sized_for` the trie's nodes says.
  It keeps no state."""

  def sized_for(self, nodes: int) -> 'Retriever':
    """The proposer that retrieves for a trie of `nodes` nodes (this one: R is fixed)."""
    del nodes
    return self

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma tokens, or the trie of cfg.tree's node count."""
    del keys, sampling, active
    depth = cfg.gamma if cfg.tree is None else cfg.tree.depth_count
    retriever = self if cfg.tree is None else self.sized_for(cfg.tree.num_nodes)
    cont, valid, weight = retriever.continuations(params, encoded, seq, pos, depth)
    return propose(cont, valid, weight, cfg, self.eos_id, self.vocab_size, state)


@dataclasses.dataclass(frozen=True)
class Mixture(Retriever):
  """One trie of the continuations several retrieval proposers find (`--draft rest+suffix`:
  the datastore's and the row's own text's), each proposer's weights scaled to sum to 1
  per row, so that neither outweighs the other by retrieving more.

  Params and encoding {'0': the first's, '1': the second's, ...}.

  Attributes:
    parts: proposers with `continuations(params, encoded, seq, pos, depth)` -> (tokens
      [B, R, D], valid [B, R, D], weight [B, R]): `specjax.proposers.rest.RestDraft`,
      `specjax.proposers.suffix.SuffixDraft`.
  """

  parts: Tuple[Any, ...]

  @property
  def vocab_size(self) -> int:
    return self.parts[0].vocab_size

  @property
  def eos_id(self) -> int:
    return self.parts[0].eos_id

  @property
  def pad_id(self) -> int:
    return self.parts[0].pad_id

  def sized_for(self, nodes: int) -> 'Mixture':
    return dataclasses.replace(self, parts=tuple(p.sized_for(nodes) for p in self.parts))

  def _each(self, method: str, *args) -> dict:
    return {str(i): getattr(p, method)(*args) for i, p in enumerate(self.parts)}

  def init(self, rng: jax.Array) -> dict:
    return self._each('init', rng)

  def param_axes(self) -> dict:
    return self._each('param_axes')

  def encode(self, params, inputs: jax.Array) -> dict:
    return {str(i): p.encode(params[str(i)], inputs) for i, p in enumerate(self.parts)}

  def encoded_axes(self) -> dict:
    return self._each('encoded_axes')

  def continuations(self, params, encoded, seq: jax.Array, pos: jax.Array, depth: int):
    """Every part's continuations, each part's weights scaled to sum to 1 per row."""
    found = [p.continuations(params[str(i)], encoded[str(i)], seq, pos, depth)
             for i, p in enumerate(self.parts)]
    scaled = [w / jnp.maximum(jnp.sum(w * v[..., 0], axis=1, keepdims=True), 1e-9)
              for _, v, w in found]
    return (jnp.concatenate([c for c, _, _ in found], axis=1),
            jnp.concatenate([v for _, v, _ in found], axis=1),
            jnp.concatenate(scaled, axis=1))
