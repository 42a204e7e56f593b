"""Tokens per target call of the proposers that cost nothing, chains against trees: the
copy of earlier text (static trees of several earlier matches) and the bundled bigram
table (static and dynamic top-k trees), on the bundled tasks' first test lines, at each
temperature.

    python scripts/proposer_trees.py --json docs/proposer_trees.json --markdown docs/benchmarks.md

Tokens per target call is hardware-free; programs compile at XLA's lowest optimisation
level (as scripts/tree_tokens_per_call.py's sweep does). Every figure comes from
`specjax.core.figures.decode_figures`; a greedy row says whether its output is the target
alone's. With --markdown, the section "## Trees of the copy and bigram proposers" of that
file is written (replaced where it is already there).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

import specjax  # pylint: disable=wrong-import-position
from specjax.bench import trees as bench_trees  # pylint: disable=wrong-import-position
from specjax.core.figures import decode_figures  # pylint: disable=wrong-import-position
from specjax.core.sampling import SamplingConfig  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position

SECTION = '## Trees of the copy and bigram proposers'
OWN_TREE = 'own tree'  # a label: the tree a proposer verifies of itself (its tree_spec())
SETTINGS = {
    'copy': ['chain 2', 'chain 4', 'chain 6', 'chain 8', '2,1,1,1', '3,1,1,1', '4,1,1,1',
             '3,1,1,1,1,1'],
    'bigram': ['chain 1', 'chain 2', 'chain 3', '2,1', '2,2,1', '4,2,1', 'dynamic:16:4:4'],
}


def parser(doc: str, section: str, shapes: str = '') -> argparse.ArgumentParser:
  """The flags these measurement scripts share (with --shapes and --rounds when `shapes`
  is given: the default chains and trees, and c's timing rounds)."""
  p = argparse.ArgumentParser(description=doc.split('\n', 1)[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--tasks', default='ende,manpages', help='of ' + ', '.join(sweep.TASKS))
  p.add_argument('--num-examples', type=int, default=64, help='first test lines of each task')
  p.add_argument('--batch-size', type=int, default=8, help='rows (slots), refilled')
  p.add_argument('--max-decode-len', type=int, default=48)
  p.add_argument('--temperatures', default='0,1')
  p.add_argument('--seeds', type=int, default=2, help='decodes per sampled setting (pooled)')
  if shapes:
    p.add_argument('--shapes', default=shapes, help='chains and trees, ;-separated')
    p.add_argument('--rounds', type=int, default=3, help='timing rounds of c (fastest kept)')
  p.add_argument('--json', required=True, help='the results')
  p.add_argument('--markdown', help=f'write its "{section}" section into this file')
  p.add_argument('--render', action='store_true',
                 help='only write the --markdown section from --json (no decode)')
  return p


def parse_args(argv=None):
  return parser(__doc__, SECTION).parse_args(argv)


def collect(args, run_task) -> tuple:
  """(rows, per-task info): read from --json with --render, else `run_task(task, args)`
  -> (rows, info) of each of --tasks."""
  if args.render:
    with open(args.json, encoding='utf-8') as f:
      saved = json.load(f)
    return saved['rows'], saved.get('tasks', {})
  rows, tasks = [], {}
  for task in args.tasks.split(','):
    task_rows, tasks[task] = run_task(task, args)
    rows += task_rows
  return rows, tasks


def finish(args, rows: list, tasks: dict, section: str, text: str) -> int:
  """Refuses a greedy row that is not the target alone's (1); else writes --json (unless
  rendering) and the --markdown section `text` (0)."""
  greedy = [r for r in rows if 'identical_to_target' in r]
  if not all(r['identical_to_target'] for r in greedy):
    print('error: a greedy row is not the target alone\'s output', file=sys.stderr)
    return 1
  if not args.render:
    with open(args.json, 'w', encoding='utf-8') as f:
      json.dump({'settings': vars(args), 'tasks': tasks, 'rows': rows}, f, indent=1)
  if args.markdown:
    sweep.SECTION = section
    sweep.write_section(args.markdown, text)
  return 0


def run_task(task: str, args) -> tuple:
  target, tp, _, _, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'target'
  proposers = {'copy': (drafts.copy_draft(target), {}, SETTINGS['copy']),
               'bigram': (*drafts.resolve_draft('bigram', target, name, None),
                          SETTINGS['bigram'])}
  return decode_rows(task, target, tp, inputs, proposers, args), {}


def decode_rows(task: str, target, tp, inputs, proposers: dict, args) -> list:
  """A row per proposer, chain or tree label ('chain G', a tree of
  `specjax.bench.trees.parse_one`) and temperature: tokens per call and alpha, pooled over
  args.seeds sampled decodes; a greedy row says whether it is the target alone's output.

  Args:
    task: its name in the rows.
    target, tp: the target and its params.
    inputs: [N, S] the task's lines.
    proposers: name -> (draft, params, labels).
    args: num_examples, batch_size, max_decode_len, temperatures, seeds.
  """
  kw = dict(max_decode_len=args.max_decode_len, slots=args.batch_size)
  reference = jax.tree.map(np.asarray, specjax.autoregressive_decode(target, tp, inputs, **kw))
  rows = []
  for temperature in (float(t) for t in args.temperatures.split(',')):
    sampling = SamplingConfig(temperature=temperature)
    seeds = range(1 if sampling.greedy else args.seeds)
    for kind, (draft, dp, labels) in proposers.items():
      for label in labels:
        gamma = int(label.split()[1]) if label.startswith('chain') else None
        tree = None if gamma else (draft.tree_spec() if label == OWN_TREE
                                   else bench_trees.parse_one(label))
        outputs = [jax.tree.map(np.asarray, specjax.speculative_decode(
            target, tp, draft, dp, inputs, gamma=gamma, tree=tree, sampling=sampling,
            rng=jax.random.PRNGKey(seed), **kw)) for seed in seeds]
        f = decode_figures(sweep.pooled(outputs))
        row = {'task': task, 'proposer': kind, 'shape': label, 'temperature': temperature,
               'nodes': gamma or tree.num_nodes, 'tokens_per_call': float(f.tokens_per_call),
               'alpha': None if f.alpha is None else float(f.alpha), 'seeds': len(seeds)}
        if sampling.greedy:
          row['identical_to_target'] = bool(np.array_equal(outputs[0].tokens,
                                                           reference.tokens))
        rows.append(row)
        print(f'{task:8s} T {temperature:.0f} {kind:12s} {label:16s} '
              f'tok/call {row["tokens_per_call"]:.3f}'
              + (f' identical {row["identical_to_target"]}' if sampling.greedy else ''),
              file=sys.stderr, flush=True)
  return rows


def best_by_group(rows: list, order=None):
  """(task, temperature, proposer, the best chain row, the best tree row) of each group of
  rows, by tokens per call, in `order` of the groups (default: first seen)."""
  keys = list(dict.fromkeys((r['task'], r['temperature'], r['proposer']) for r in rows))
  for key in (sorted(keys, key=order) if order else keys):
    mine = [r for r in rows if (r['task'], r['temperature'], r['proposer']) == key]
    best = lambda chain: max((r for r in mine if r['shape'].startswith('chain') == chain),
                             key=lambda r: r['tokens_per_call'])
    yield (*key, best(True), best(False))


def markdown(rows: list, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'Tokens per target call (hardware-free) of the best chain and the best tree of '
           'each proposer; every greedy row was identical to the target alone '
           '(`identical_to_target` in the JSON).', '',
           '| task | T | proposer | best chain | tok/call | best tree | nodes | tok/call | '
           'x chain |', '|---|---|---|---|---|---|---|---|---|']
  gains = {}
  for task, temperature, kind, chain, tree in best_by_group(rows, order=lambda k: k):
    gain = tree['tokens_per_call'] / chain['tokens_per_call']
    gains.setdefault(kind, []).append(gain)
    lines.append(f'| {task} | {temperature:g} | {kind} | {chain["shape"]} | '
                 f'{chain["tokens_per_call"]:.2f} | {tree["shape"]} | {tree["nodes"]} | '
                 f'{tree["tokens_per_call"]:.2f} | {gain:.2f} |')
  lines += ['', 'Best tree over best chain, tokens per call: ' + '; '.join(
      f'{kind} {min(g):.2f}-{max(g):.2f}x' for kind, g in sorted(gains.items())) + '.']
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = collect(args, run_task)
  command = 'python scripts/proposer_trees.py --json docs/proposer_trees.json ' \
            '--markdown docs/benchmarks.md'
  return finish(args, rows, tasks, SECTION, markdown(rows, command))


if __name__ == '__main__':
  sys.exit(main())
