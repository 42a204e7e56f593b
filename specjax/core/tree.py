"""Token trees: their static shapes, their attention masks, and the move of an accepted path
into place in a cache.

A tree of N nodes hangs below a root, the row's last committed token. Its nodes are listed
in breadth-first order, so a node's parent always comes before it: `parents[i]` is the
index of node i's parent (-1: the root), `depth[i]` its depth (1 .. D). In a call that
feeds the whole tree the root sits at tree slot 0 and node i at slot i + 1 (M = N + 1
slots); the token at slot m has position base + depth, whatever its slot
(`specjax.models.base.Tree`). A chain of G drafts is the tree whose node i has parent
i - 1.

Shape letters: B rows, N nodes, M = N + 1 tree slots, D the deepest depth, T cache length.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class TreeShape:
  """A static tree: how many children each node at each depth has (`--tree 4,2,2,1`:
  top-4 below the root, top-2 below each of those, ...), the same for every row and call.

  Attributes:
    branching: b_1 .. b_D >= 1, the children of every node at depth d - 1.
  """

  branching: Tuple[int, ...]

  def __post_init__(self):
    if not self.branching or any(int(b) < 1 for b in self.branching):
      raise ValueError(f'a tree needs a branching >= 1 per depth, got {self.branching!r}')
    object.__setattr__(self, 'branching', tuple(int(b) for b in self.branching))

  @classmethod
  def parse(cls, text: str) -> 'TreeShape':
    """'4,2,2,1' -> TreeShape((4, 2, 2, 1)); a one-line ValueError otherwise."""
    try:
      return cls(tuple(int(part) for part in text.split(',')))
    except ValueError:
      hint = ('; a dynamic tree (dynamic:N:D:K in the bench\'s tables) is --tree-nodes N '
              '--tree-depth D --tree-top K' if text.startswith('dynamic') else '')
      raise ValueError(f'--tree takes the children per depth as integers >= 1, e.g. '
                       f'4,2,2,1; got {text!r}{hint}') from None

  @classmethod
  def chain(cls, gamma: int) -> 'TreeShape':
    """G drafts in a row: one child per depth."""
    return cls((1,) * gamma)

  @property
  def depth_count(self) -> int:
    """D, the deepest depth."""
    return len(self.branching)

  def level_sizes(self) -> Tuple[int, ...]:
    """Nodes at depth 1 .. D: b_1, b_1 b_2, ..."""
    sizes, n = [], 1
    for b in self.branching:
      n *= b
      sizes.append(n)
    return tuple(sizes)

  @property
  def num_nodes(self) -> int:
    """N, the nodes below the root."""
    return sum(self.level_sizes())

  def level_starts(self) -> Tuple[int, ...]:
    """The index of each depth's first node (depth 1 .. D)."""
    starts, at = [], 0
    for size in self.level_sizes():
      starts.append(at)
      at += size
    return tuple(starts)

  def parents(self) -> np.ndarray:
    """[N] int32: each node's parent (-1: the root); the children of a node are
    contiguous, in the order of their rank."""
    parents = [-1] * self.branching[0]
    starts = self.level_starts()
    for d in range(1, self.depth_count):
      for j in range(self.level_sizes()[d - 1]):
        parents += [starts[d - 1] + j] * self.branching[d]
    return np.asarray(parents, np.int32)

  def depths(self) -> np.ndarray:
    """[N] int32: each node's depth, 1 .. D."""
    return np.concatenate([np.full(size, d + 1, np.int32)
                           for d, size in enumerate(self.level_sizes())])

  def visible(self) -> np.ndarray:
    """[M, M] bool, ancestor-or-self of each tree slot (`ancestors`, on the host: a
    constant of the compiled program)."""
    parents = self.parents()
    anc = np.eye(len(parents) + 1, dtype=bool)
    for i, parent in enumerate(parents):  # breadth-first: a parent's row comes first
      anc[i + 1] |= anc[parent + 1]
    return anc

  def ranks(self) -> np.ndarray:
    """[N] int32: each node's rank among its siblings (0: its parent's first child)."""
    return np.concatenate([np.tile(np.arange(b, dtype=np.int32), size // b)
                           for b, size in zip(self.branching, self.level_sizes())])


@dataclasses.dataclass(frozen=True)
class DynamicTree:
  """A tree grown per row from the draft's own probabilities (EAGLE-2): at each depth the
  `top` nodes of highest cumulative draft probability are expanded by their `top` likeliest
  children, and of all the candidates the N likeliest are verified (a node's cumulative
  probability is at most its parent's, so they form a tree).

  Attributes:
    nodes: N, the nodes verified per call.
    depth: D, the expansions (the deepest depth).
    top: the nodes expanded per depth, and the children each gets.
  """

  nodes: int
  depth: int
  top: int = 4

  def __post_init__(self):
    for name in ('nodes', 'depth', 'top'):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f'a dynamic tree needs {name} >= 1, got {value!r}')
    if self.nodes > self.pool_size:
      raise ValueError(f'a dynamic tree of depth {self.depth} and top {self.top} has '
                       f'{self.pool_size} candidates, fewer than the {self.nodes} nodes asked '
                       'for: raise --tree-depth or --tree-top, or lower --tree-nodes')

  @property
  def depth_count(self) -> int:
    """D, the deepest depth."""
    return self.depth

  @property
  def num_nodes(self) -> int:
    """N, the nodes verified per call."""
    return self.nodes

  @property
  def pool_size(self) -> int:
    """The candidates grown: top at depth 1, top * top at each depth after."""
    return self.top + (self.depth - 1) * self.top * self.top

  def pool_depths(self) -> np.ndarray:
    """[P] int32: the depth of each candidate, depth-major."""
    return np.concatenate([np.ones(self.top, np.int32)] + [
        np.full(self.top * self.top, d, np.int32) for d in range(2, self.depth + 1)])


def ancestors(parents: jax.Array) -> jax.Array:
  """Ancestor-or-self of the tree slots: [..., N] parents -> [..., M, M] bool, where
  [m, a] says slot a is slot m itself or one of its ancestors (slot 0, the root, is an
  ancestor of every slot). Works for per-row parents [B, N] as for one tree [N]."""
  parents = jnp.asarray(parents, jnp.int32)
  num = parents.shape[-1]
  slots = num + 1
  eye = jnp.eye(slots, dtype=bool)
  anc = jnp.broadcast_to(eye, parents.shape[:-1] + (slots, slots))
  for i in range(num):  # breadth-first order: a parent's row is complete before its children
    parent_row = jnp.take_along_axis(anc, (parents[..., i:i + 1] + 1)[..., None], axis=-2)
    anc = anc.at[..., i + 1, :].set(parent_row[..., 0, :] | eye[i + 1])
  return anc


def slot_depths(depth: jax.Array) -> jax.Array:
  """[..., N] node depths -> [..., M] tree slot depths (the root's 0 first)."""
  depth = jnp.asarray(depth, jnp.int32)
  return jnp.concatenate([jnp.zeros(depth.shape[:-1] + (1,), jnp.int32), depth], axis=-1)


def path_slots(path: jax.Array) -> jax.Array:
  """Node indices [B, D] (-1 past the accepted depth) -> their tree slots (node + 1)."""
  return jnp.where(path >= 0, path + 1, 0)


def compact(cache: Any, axes: Any, base: jax.Array, path: jax.Array, n: jax.Array,
            num_nodes: int) -> Any:
  """Moves each row's accepted path into place: the cache entries of tree slot
  path[b, d] + 1 go to slot d + 1 (cache slot base + d + 1) for d < n[b].

  The cache then holds what a chain decode of the accepted tokens would have written (the
  model wrote each node with its position base + depth), so the next call reads it as
  any committed prefix. Only the D' = min(D, N) slots after the root are written, in
  place: each leaf's D' picked entries are read by a masked sum over its length axis (one
  pass over the leaf, no gather: a gather or a per-row slice along a cache's minor length
  axis costs several times the leaf on TPU), then written by one update of D' slots per
  row. A slot d + 1 with d >= n[b] gets its own entries back, so a row with n = 0 keeps
  its cache.

  Args:
    cache: a model's cache pytree, leaves [B, ..., T, ...] (batch first, 'length'
      anywhere after it).
    axes: the model's `cache_axes()`: each leaf's logical axis names, 'batch' first and
      one of them 'length'.
    base: [B] int32, the root's cache slot.
    path: [B, D] int32, the accepted node at depth 1 .. D (-1 past n, or for a node the
      cache never held).
    n: [B] int32, the accepted depth.
    num_nodes: N, the tree's nodes (slots base + 1 .. base + N hold them); base + N < T
      is the caller's job.

  Returns:
    The cache with the same structure and shapes.
  """
  depth = min(path.shape[1], num_nodes)  # a path of n <= N distinct nodes
  path = path[:, :depth]
  steps = jnp.arange(depth, dtype=jnp.int32)[None]  # [1, D']
  keep = (steps < n[:, None]) & (path >= 0)
  source = base[:, None] + 1 + jnp.where(keep, path, steps)  # [B, D'] cache slots

  def leaf(array, names):
    if names[0] != 'batch':
      raise ValueError(f'a cache leaf\'s axes must start with batch, got {names!r}')
    axis = names.index('length')
    length = array.shape[axis]
    # [B, ..., T, D', ...]: which length slot each of the D' picks reads
    at = jnp.arange(length, dtype=jnp.int32)[None, :, None] == source[:, None, :]
    at = at.reshape((array.shape[0],) + (1,) * (axis - 1) + (length, depth) +
                    (1,) * (array.ndim - axis - 1))
    picked = jnp.sum(jnp.where(at, jnp.expand_dims(array, axis + 1),
                               jnp.zeros((), array.dtype)), axis=axis, dtype=array.dtype)
    if array.shape[0] == 1:  # one row: one update, not a vmapped one (a scatter)
      start = [0] * array.ndim
      start[axis] = base[0] + 1
      return jax.lax.dynamic_update_slice(array, picked, start)

    def row(r, p, start):
      return jax.lax.dynamic_update_slice_in_dim(r, p, start, axis - 1)
    return jax.vmap(row)(array, picked, base + 1)

  is_axes = lambda x: isinstance(x, tuple) and all(isinstance(a, str) for a in x)
  flat_axes = jax.tree.leaves(axes, is_leaf=is_axes)
  leaves, treedef = jax.tree.flatten(cache)
  if len(flat_axes) != len(leaves):
    raise ValueError('cache_axes() does not match the cache: '
                     f'{len(flat_axes)} axes for {len(leaves)} leaves')
  return jax.tree.unflatten(treedef, [leaf(a, names) for a, names in zip(leaves, flat_axes)])


TREE_SYNTAX = ("trees separated by ';' (quote them in a shell): a static shape is its "
               "children per depth, e.g. 4,1,1 (N = 4 + 4 + 4 nodes, depth 3); a dynamic "
               "EAGLE-2 tree is dynamic:NODES:DEPTH[:TOP] (TOP 4 when left out), e.g. "
               "'4,1,1;2,2,1;dynamic:16:6:4'")


def tree_label(tree) -> str:
  """'4,1,1' for a static shape, 'dynamic:16:6:4' for a dynamic tree (what `parse_tree`
  reads back)."""
  if isinstance(tree, DynamicTree):
    return f'dynamic:{tree.nodes}:{tree.depth}:{tree.top}'
  return ','.join(map(str, tree.branching))


def parse_tree(text: str, flag: str):
  """One tree written as `tree_label` writes it: a `TreeShape` or a `DynamicTree`.

  Args:
    text: e.g. '4,1,1' or 'dynamic:16:6:4'.
    flag: the flag it came from, named in the errors (e.g. '--trees').

  Raises:
    ValueError: a bad tree (one line naming the flag, the item and the syntax).
  """
  item = text.strip()
  bad = ValueError(f'{flag}: bad tree {item!r}; {TREE_SYNTAX}')
  if item.lower().startswith('dynamic'):
    parts = item.split(':')
    if parts[0].lower() != 'dynamic' or len(parts) not in (3, 4):
      raise bad
    try:
      numbers = [int(p) for p in parts[1:]]
    except ValueError:
      raise bad from None
    nodes, depth, top = (numbers + [4])[:3]
    if min(numbers) < 1:
      raise ValueError(f'{flag}: {item}: NODES, DEPTH and TOP must be >= 1')
    pool = top + (depth - 1) * top * top  # DynamicTree.pool_size
    if nodes > pool:
      raise ValueError(f'{flag}: {item}: depth {depth} and top {top} grow {pool} '
                       f'candidates, fewer than its {nodes} nodes; raise DEPTH or TOP, or '
                       'lower NODES')
    return DynamicTree(nodes, depth, top)
  try:
    return TreeShape(tuple(int(p) for p in item.split(',')))
  except ValueError:
    raise bad from None
