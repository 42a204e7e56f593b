"""Tokens per target call of lookahead decoding (`--draft lookahead:W,N,G`) on the bundled
tasks' first test lines (EnDe, man pages, and the decoder-only pair's man-page
continuation), greedy and sampled, for several W, N, G; on the encoder-decoder tasks also
with the window's first guesses taken from the decoder's own last tokens instead of the
input (`LookaheadDraft.window_from_source` off), in the same run.

    python scripts/lookahead_trees.py --json docs/lookahead_trees.json --markdown docs/benchmarks.md

Tokens per target call is hardware-free (decodes compiled at XLA's lowest optimisation
level, as scripts/tree_tokens_per_call.py's sweep does); a greedy row says whether its
output is the target alone's. With --markdown the section "## Lookahead decoding" of that
file is written (replaced where it is already there).
"""
from __future__ import annotations

import dataclasses
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proposer_trees  # pylint: disable=wrong-import-position
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags

import jax  # pylint: disable=wrong-import-position

from specjax.core import decoder  # pylint: disable=wrong-import-position
from specjax.proposers import draft_names  # pylint: disable=wrong-import-position

SECTION = '## Lookahead decoding'
CONFIGS = '5,3,4;4,4,4;8,3,8;12,3,8'
OFF = ' (window from the decoder)'  # the proposer's name with window_from_source off


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION)
  p.set_defaults(tasks='ende,manpages,manlm')
  p.add_argument('--configs', default=CONFIGS, help='W,N,G of each lookahead, ;-separated')
  return p.parse_args(argv)


def run_task(task: str, args) -> tuple:
  target, tp, _, _, inputs = sweep.load_task(task, args.num_examples)
  rows = []
  for config in args.configs.split(';'):
    draft = draft_names.lookahead(f'{draft_names.LOOKAHEAD}:{config}', target)
    variants = {config: draft}
    if draft.source:  # an encoder-decoder: the window's first guesses from its input or not
      variants[config + OFF] = dataclasses.replace(draft, window_from_source=False)
    for name, d in variants.items():
      rows += proposer_trees.decode_rows(task, target, tp, inputs,
                                         {name: (d, {}, [proposer_trees.OWN_TREE])}, args)
      decoder.drop_programs()
      jax.clear_caches()
  return rows, {}


def markdown(rows: list, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'Tokens per target call (hardware-free) of lookahead decoding, the target\'s own '
           'Jacobi window of W guesses in N - 1 levels and G n-grams from its pool, verified '
           'as one tree of (W + G)(N - 1) nodes, on the first test lines of each task (batch '
           '8, refilled; sampled rows pooled over two seeds). A fresh window guesses an '
           'encoder-decoder\'s output to be its input copied in place (column "from the '
           'input"); the last column starts it from the decoder\'s own last tokens instead, '
           'which at an encoder-decoder\'s first call are all its start token, so every '
           'column of the window holds the same guess. The decoder-only pair (manlm) has no '
           'input to copy: its window starts from the prompt\'s last tokens either way. Every '
           'greedy row was identical to the target alone (`identical_to_target` in the '
           'JSON).', '',
           '| task | T | W,N,G | nodes | tok/call, window from the input | '
           'tok/call, window from the decoder |', '|---|---|---|---|---|---|']
  keys = dict.fromkeys((r['task'], r['temperature'], r['proposer'].replace(OFF, ''))
                       for r in rows)
  for task, temperature, config in keys:
    mine = {r['proposer']: r for r in rows
            if (r['task'], r['temperature']) == (task, temperature)}
    on, off = mine[config], mine.get(config + OFF)
    lines.append(f'| {task} | {temperature:g} | {config} | {on["nodes"]} | '
                 f'{on["tokens_per_call"]:.2f} | '
                 f'{"-" if off is None else format(off["tokens_per_call"], ".2f")} |')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/lookahead_trees.py --json docs/lookahead_trees.json '
             '--markdown docs/benchmarks.md')
  return proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, command))


if __name__ == '__main__':
  sys.exit(main())
