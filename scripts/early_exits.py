"""Layer-skip with and without a trained early exit: tokens per target call and alpha of the
best chain and the best tree of the target's first M decoder layers, closed by the target's
own final norm and projection (`--draft layerskip:M`) or by an exit trained for the cut
(`--draft layerskip:PATH`, `python -m specjax.train_draft --kind layerskip`), on the
bundled tasks' first test lines, at each temperature.

    python scripts/early_exits.py --json docs/early_exits.json --markdown docs/benchmarks.md \
        --train ende=demotrain.txt,manpages=mantrain.jsonl --exits runs/exits

Each exit trains in --exits/TASK/layerskipM (a rerun reuses what is there; --decodes
TASK=DIR copies a train_draft run's cached target decodes of the same inputs there first).
The exit costs what the target's own does: c is layer-skip's (## Layer-skip
self-speculation). Tokens per target call and alpha are hardware-free (programs compiled at
XLA's lowest optimisation level). With --markdown, the section "## Layer-skip with a trained
early exit" of that file is written (replaced where it is already there).
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags
import proposer_trees  # pylint: disable=wrong-import-position

from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.proposers.layer_skip import LayerSkip, layer_count  # pylint: disable=wrong-import-position

SECTION = '## Layer-skip with a trained early exit'
SHAPES = ['chain 2', 'chain 4', 'chain 6', 'dynamic:16:4:4']
# Encoder widths of the tasks' training inputs (man pages are long).
MAX_INPUT_LEN = {'ende': 64, 'manpages': 192}


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION, ';'.join(SHAPES))
  p.add_argument('--train', default='', help='TASK=FILE,...: each task\'s training inputs')
  p.add_argument('--decodes', default='', help='TASK=DIR,...: cached target decodes of them')
  p.add_argument('--exits', default='runs/exits', help='where the exits train')
  p.add_argument('--steps', type=int, default=300)
  p.add_argument('--learning-rate', default='1e-3')
  return p.parse_args(argv)


def _pairs(text: str) -> dict:
  return dict(item.split('=', 1) for item in text.split(',') if item)


def trained_exit(task: str, layers: int, args) -> str:
  """The exit of the task's target's first `layers` layers, trained here unless it is."""
  workdir = os.path.join(args.exits, task, f'layerskip{layers}')
  output = os.path.join(workdir, 'heads')
  if os.path.isdir(output):
    return output
  cached = _pairs(args.decodes).get(task)
  if cached and not os.path.isdir(os.path.join(workdir, 'decodes')):
    shutil.copytree(cached, os.path.join(workdir, 'decodes'))
  train = _pairs(args.train)
  if task not in train:
    raise SystemExit(f'no training inputs for {task}: pass --train {task}=FILE')
  cmd = [sys.executable, '-m', 'specjax.train_draft', '--kind', 'layerskip', '--layers',
         str(layers), '--target', sweep.TASKS[task] + 'target', '--input', train[task],
         '--workdir', workdir, '--steps', str(args.steps), '--learning-rate',
         args.learning_rate, '--max-input-len', str(MAX_INPUT_LEN[task]), '--quiet']
  subprocess.run(cmd, check=True)
  return output


def run_task(task: str, args) -> tuple:
  target, tp, _, _, inputs = sweep.load_task(task, args.num_examples)
  shapes = args.shapes.split(';')
  proposers, info = {}, {'layers': layer_count(target), 'exits': {}}
  for m in range(1, layer_count(target)):
    meta, params = heads_io.load_heads(trained_exit(task, m, args))
    info['exits'][m] = {k: meta[k] for k in ('examples', 'steps', 'learning_rate',
                                             'final_loss', 'final_accuracy')}
    proposers[f'layerskip:{m}'] = (LayerSkip(target, m), {}, shapes)
    proposers[f'layerskip:{m}+exit'] = (LayerSkip(target, m, trained_exit=True), params,
                                        shapes)
  return proposer_trees.decode_rows(task, target, tp, inputs, proposers, args), info


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'The target\'s first M decoder layers draft, closed by the target\'s own final '
           'norm and output projection (`layerskip:M`) or by a copy of them trained for the '
           'cut (`layerskip:M+exit`: `python -m specjax.train_draft --kind layerskip '
           '--layers M`, the forward KL from the target\'s distributions on its own greedy '
           'decodes of the training inputs; `--draft layerskip:PATH`). The exit adds no '
           'compute: c is layer-skip\'s (## Layer-skip self-speculation). Tokens per target '
           'call (hardware-free) and alpha of the best chain and the best tree; every greedy '
           'row was identical to the target alone (`identical_to_target` in the JSON).', '',
           '| task | T | draft | best chain | tok/call | alpha | best tree | tok/call | '
           'alpha |', '|---|---|---|---|---|---|---|---|---|']
  fmt = lambda a: '-' if a is None else f'{a:.3f}'
  for task, temperature, kind, chain, tree in proposer_trees.best_by_group(rows):
    lines.append(f'| {task} | {temperature:g} | {kind} | {chain["shape"]} | '
                 f'{chain["tokens_per_call"]:.2f} | {fmt(chain["alpha"])} | {tree["shape"]} | '
                 f'{tree["tokens_per_call"]:.2f} | {fmt(tree["alpha"])} |')
  lines.append('')
  for task, info in tasks.items():
    for m, e in info['exits'].items():
      lines.append(f'- {task}, M {m}: trained {e["steps"]} steps at {e["learning_rate"]} on '
                   f'{e["examples"]} decodes; final KL {e["final_loss"]:.3f}, agreement '
                   f'with the target\'s argmax {e["final_accuracy"]:.3f}.')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/early_exits.py --json docs/early_exits.json --markdown '
             'docs/benchmarks.md --train ende=demotrain.txt,manpages=mantrain.jsonl')
  return proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))


if __name__ == '__main__':
  sys.exit(main())
