"""Token-tree rows of `python -m specjax.bench --trees`: each tree a decode of the bench's
inputs, timed against the target alone in interleaved rounds as the chain rows are.

`--trees` lists trees separated by ';': a static shape is its children per depth
('4,1,1': N = b1 + b1 b2 + ... nodes, depth D = its length), a dynamic (EAGLE-2) tree is
'dynamic:NODES:DEPTH[:TOP]' (exactly NODES nodes, grown per row from the draft's
cumulative probabilities, TOP expanded per depth, 4 when left out). The trees are decoded
with the draft model and with each draft of `--drafts` that grows them
(`specjax.bench.kinds.grows`); a draft that verifies a tree of its own (lookahead) has
that tree's row instead.
"""
from __future__ import annotations

import sys
from typing import Dict, List, Optional, Sequence, Tuple, Union

import jax
import numpy as np

from specjax.bench import compiled
from specjax.bench import decodes
from specjax.bench import kinds
from specjax.bench import rows as bench_rows
from specjax.core import api
from specjax.core.figures import decode_figures
from specjax.core.sampling import SamplingConfig
from specjax.core import tree as tree_lib
from specjax.core.tree import DynamicTree, TreeShape

Tree = Union[TreeShape, DynamicTree]
OWN_TREE = kinds.OWN_TREE
SYNTAX = tree_lib.TREE_SYNTAX
label = tree_lib.tree_label


def parse_one(text: str) -> Tree:
  """One tree of --trees; a one-line ValueError naming the bad item otherwise."""
  return tree_lib.parse_tree(text, '--trees')


def parse_trees(spec: str) -> List[Tree]:
  """The trees of --trees ('' gives none); a one-line ValueError for a bad item."""
  if not spec.strip():
    return []
  items = spec.split(';')
  if any(not item.strip() for item in items):
    raise ValueError(f'--trees: an empty tree in {spec!r}; {SYNTAX}')
  return [parse_one(item) for item in items]


def decode_fns(target, tp, draft, dp, tree: Tree, sampling: SamplingConfig,
               max_decode_len: int, seed: int = 0, slots: Optional[int] = None
               ) -> Tuple:
  """(tree decode, target alone): functions of one batch (or a stream with `slots`)."""
  kw = dict(max_decode_len=max_decode_len, sampling=sampling, rng=jax.random.PRNGKey(seed),
            slots=slots)
  return (lambda x: api.speculative_decode(target, tp, draft, dp, x, tree=tree, **kw),
          lambda x: api.autoregressive_decode(target, tp, x, **kw))


def figures_row(stats, tree: Tree) -> dict:
  """The hardware-free figures of a tree decode's stats (through `decode_figures`):
  tokens per target call, nodes verified per call, alpha (None where no draft position was
  scored) and the share of calls whose accepted path reached each depth."""
  f = decode_figures(stats)
  scored = int(np.sum(np.asarray(stats.beta_count))) > 0
  return {'tree': label(tree), 'kind': 'dynamic' if isinstance(tree, DynamicTree) else 'static',
          'nodes': int(tree.num_nodes), 'depth': int(tree.depth_count),
          'tokens_per_call': float(f.tokens_per_call),
          'nodes_per_call': float(f.drafted_per_call),
          'accepted_per_call': float(f.accepted_per_call),
          'alpha': float(f.alpha) if scored else None,
          'reached_depth': [float(x) for x in np.asarray(f.accepted_per_position)],
          'target_calls': int(np.sum(np.asarray(stats.target_calls)))}


def tree_row(target, tp, draft, dp, batches, tree: Tree, sampling: SamplingConfig,
             max_decode_len: int, seed: int = 0, rounds: int = 3,
             slots: Optional[int] = None, draft_label: Optional[str] = None) -> dict:
  """One tree row: the tree decode and the target alone over `batches`, each timed once per
  round in `rounds` interleaved rounds (each batch keeps its fastest pass), and the
  figures of the tree decode.

  Args:
    target, tp, draft, dp: the pair and their params (the draft takes tree calls).
    batches: [B, S] int32 inputs, one decode each (with `slots`: one stream each).
    tree: a TreeShape or DynamicTree.
    sampling: of both decodes.
    max_decode_len: L.
    seed: PRNG seed of both decodes.
    rounds: interleaved timing rounds.
    slots: refill through this many rows; None: each batch decodes as one.
    draft_label: the row's 'draft' (its --draft spelling), when given; a draft with a tree
      of its own (`kinds.own_tree`) has the tree OWN_TREE.

  Returns:
    The row: draft (with draft_label), tree, kind, nodes, depth, temperature,
    tokens_per_call, nodes_per_call,
    alpha (None where undefined), reached_depth, seconds, baseline_seconds, tokens/s of
    both, speedup (a ratio of tokens per second), compile_seconds, spread, and for greedy
    rows identical_to_target.
  """
  compiled.free_if_needed()  # as the chain rows do
  spec_fn, base_fn = decode_fns(target, tp, draft, dp, tree, sampling, max_decode_len, seed,
                                slots)
  compile_seconds, spec, base = decodes.compile_both(spec_fn, base_fn, batches)
  timings = bench_rows.interleaved_rounds({'seconds': spec, 'baseline_seconds': base}, rounds)
  t = {name: min(times) for name, times in timings.items()}
  run, ref = spec.summary(), base.summary()
  tokens, baseline_tokens = run['num_tokens'], ref['num_tokens']
  row = {**({} if draft_label is None else {'draft': draft_label}),
         **figures_row(run['stats'], tree), 'temperature': sampling.temperature,
         'tokens': tokens, 'baseline_tokens': baseline_tokens,
         'batch_size': slots or len(batches[0]), 'refill': bool(slots),
         'iterations': run['iterations'], **t,
         'tokens_per_second': tokens / t['seconds'],
         'baseline_tokens_per_second': baseline_tokens / t['baseline_seconds'],
         'compile_seconds': compile_seconds,
         'spread': {name: bench_rows.spread(times) for name, times in timings.items()}}
  row['speedup'] = row['tokens_per_second'] / row['baseline_tokens_per_second']
  if kinds.own_tree(draft) is not None:
    row['tree'] = OWN_TREE
  if sampling.greedy:
    row['identical_to_target'] = bool(np.array_equal(run['tokens'], ref['tokens']))
  return row


def format_row(row: dict) -> str:
  alpha = 'n/a' if row['alpha'] is None else f'{row["alpha"]:.3f}'
  return (('' if 'draft' not in row else f'{row["draft"]}  ')
          + f'tree {row["tree"]:>16s}  T {row["temperature"]:.1f}  N {row["nodes"]:3d}  '
          f'D {row["depth"]}  alpha {alpha}  tok/call {row["tokens_per_call"]:.2f}  '
          f'nodes/call {row["nodes_per_call"]:.1f}  {row["tokens_per_second"]:8.1f} tok/s  '
          f'speedup {row["speedup"]:.2f}x'
          + ('' if 'identical_to_target' not in row else
             f'  identical {row["identical_to_target"]}'))


def tree_rows(target, tp, draft, dp, batches, trees: Sequence[Tree],
              temperatures: Sequence[float], max_len: int, seed: int = 0, rounds: int = 3,
              slots: Optional[int] = None, draft_label: Optional[str] = None) -> List[dict]:
  """A row (`tree_row`) per tree and temperature, printed as it is measured."""
  out = []
  for temperature in temperatures:
    sampling = SamplingConfig(temperature=temperature)
    for tree in trees:
      out.append(tree_row(target, tp, draft, dp, batches, tree, sampling, max_len, seed,
                          rounds, slots, draft_label))
      print(format_row(out[-1]), file=sys.stderr)
  return out


def draft_tree_rows(target, tp, drafts: Dict[str, tuple], batches, trees: Sequence[Tree],
                    temperatures: Sequence[float], max_len: int, target_name: str,
                    seed: int = 0, rounds: int = 3, slots: Optional[int] = None
                    ) -> List[dict]:
  """The tree rows of the drafts of --drafts: each draft's own tree (lookahead's), or
  each of `trees` the draft grows (`kinds.grows`), per temperature.

  Args:
    target, tp: the target and its params.
    drafts: --drafts spelling -> (draft, params), resolved.
    batches: [B, S] int32 inputs, one decode each (with `slots`: one stream each).
    trees: --trees.
    temperatures: of every row.
    max_len: L.
    target_name: --target (the decode's check of each draft and tree reads its datastore).
    seed, rounds, slots: as `tree_row`.

  Returns:
    Tree rows, each with 'draft' set.
  """
  plans = {label: ([own] if (own := kinds.own_tree(d)) is not None else
                   [t for t in trees if kinds.grows(label, t, target_name, max_len)])
           for label, (d, _) in drafts.items()}
  out = []
  for temperature in temperatures:
    for label, (d, p) in drafts.items():
      if plans[label]:
        out += tree_rows(target, tp, d, p, batches, plans[label], [temperature], max_len,
                         seed, rounds, slots, label)
  return out
