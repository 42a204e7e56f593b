"""`--tree auto`: the token trees `--gamma auto` weighs against the best chain.

A candidate is written as `python -m specjax.bench --trees` writes one: a static shape is
its children per depth ('2,1,1,1': N = 2 + 2 + 2 + 2 nodes, depth 4), a dynamic (EAGLE-2)
tree is 'dynamic:NODES:DEPTH[:TOP]' (TOP 4 when left out); `--auto-trees` lists them
separated by ';'. The calibration (`specjax.job.calibrate.choose_tree`) predicts each
one's speedup from its draft calls (`draft_calls`) and its verify call of N + 1 tokens.
Shape letters: N nodes, D depth.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple, Union

from specjax.core import tree as tree_lib
from specjax.core.tree import DynamicTree, TreeShape

Tree = Union[TreeShape, DynamicTree]
FLAG = '--auto-trees'
# The default candidates: a few static shapes of 8 to 20 nodes and the dynamic trees of 8,
# 16 and 32 nodes that did best per node budget on the bundled tasks (docs/benchmarks.md,
# "Token trees"), all at most 8 deep.
DEFAULT = '2,1,1,1;2,2,1,1;4,2,1;dynamic:8:8:2;dynamic:16:8:4;dynamic:32:8:4'
SYNTAX = tree_lib.TREE_SYNTAX
label = tree_lib.tree_label


def parse_one(text: str) -> Tree:
  """One candidate; a one-line ValueError naming it otherwise."""
  return tree_lib.parse_tree(text, FLAG)


def parse(spec: Optional[str]) -> List[Tree]:
  """The candidates of `--auto-trees` (None: `DEFAULT`), in order, without repeats.

  Raises:
    ValueError: an empty list, an empty item or a bad tree (one line).
  """
  spec = DEFAULT if spec is None else spec
  items = spec.split(';')
  if not spec.strip() or any(not item.strip() for item in items):
    raise ValueError(f'{FLAG}: an empty tree in {spec!r}; {SYNTAX}')
  return unique([parse_one(item) for item in items])


def unique(trees: Sequence[Tree]) -> List[Tree]:
  """`trees` without repeats, first ones kept."""
  out = []
  for tree in trees:
    if tree not in out:
      out.append(tree)
  return out


def fit(trees: Sequence[Tree], limit: int) -> List[Tree]:
  """The candidates cut to at most `limit` deep (the decode length, or the depth a
  proposer reaches: Medusa heads): a static shape loses its deeper levels, a dynamic tree
  its deeper expansions (dropped when the shallower pool holds fewer than its N nodes);
  repeats dropped."""
  out = []
  for tree in trees:
    if tree.depth_count > limit:
      if isinstance(tree, TreeShape):
        tree = TreeShape(tree.branching[:limit])
      elif tree.top + (limit - 1) * tree.top * tree.top >= tree.nodes:
        tree = DynamicTree(tree.nodes, limit, tree.top)
      else:
        continue
    out.append(tree)
  return unique(out)


def of_kinds(trees: Sequence[Tree], static: bool, dynamic: bool) -> List[Tree]:
  """The candidates of the kinds a proposer grows."""
  return [t for t in trees if (static if isinstance(t, TreeShape) else dynamic)]


def draft_calls(tree: Optional[Tree], gamma: int = 0) -> Tuple[int, ...]:
  """The tokens each draft call of one proposal feeds: a chain of `gamma` (tree None) makes
  gamma one-token calls; a static tree one call per depth, its first of the root (as a
  chain's) and then one of each level but the deepest (b1, b1 b2, ...); a dynamic tree its
  first call and D - 1 calls of its TOP expanded nodes."""
  if tree is None:
    return (1,) * gamma
  if isinstance(tree, DynamicTree):
    return (1,) + (tree.top,) * (tree.depth - 1)
  return (1,) + tuple(tree.level_sizes()[:-1])


def to_json(tree: Optional[Tree]) -> Optional[dict]:
  """The tree as `DecodeConfig.tree_json` names it (None: a chain)."""
  if tree is None:
    return None
  if isinstance(tree, DynamicTree):
    return dict(kind='dynamic', nodes=tree.nodes, depth=tree.depth, top=tree.top)
  return dict(kind='static', branching=list(tree.branching), nodes=tree.num_nodes,
              depth=tree.depth_count)


def from_json(data: Optional[dict]) -> Optional[Tree]:
  """The tree `to_json` wrote (None: a chain).

  Raises:
    ValueError: not a tree `to_json` writes.
  """
  if data is None:
    return None
  try:
    if data['kind'] == 'dynamic':
      return DynamicTree(int(data['nodes']), int(data['depth']), int(data['top']))
    if data['kind'] == 'static':
      return TreeShape(tuple(int(b) for b in data['branching']))
  except (KeyError, TypeError, ValueError):
    pass
  raise ValueError(f'not a token tree: {data!r}')


def describe(gamma: int, tree: Optional[Tree]) -> str:
  """What a choice decodes with, in words: 'gamma 0 (the target alone)', 'a chain of
  gamma 2', 'the tree 2,1,1,1 (gamma 4, its depth)', 'the dynamic tree dynamic:16:8:4
  (gamma 8, its depth)'."""
  if gamma == 0:
    return 'gamma 0 (the target alone)'
  if tree is None:
    return f'a chain of gamma {gamma}'
  kind = 'dynamic tree' if isinstance(tree, DynamicTree) else 'tree'
  return f'the {kind} {label(tree)} (gamma {tree.depth_count}, its depth)'
