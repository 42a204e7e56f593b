"""EAGLE heads trained with one pass or more (`--eagle-passes`), side by side: tokens per
target call and alpha of chains and dynamic trees, and the chance of each chain depth's
acceptance given the one before, on a task's first test lines.

    python scripts/eagle_passes.py --heads 1=runs/p1/heads,2=runs/p2/heads \
        --json docs/eagle_passes.json --markdown docs/benchmarks.md

Each head comes from `python -m specjax.train_draft --kind eagle --eagle-passes P`, the
same settings and steps but P. A second pass feeds the head its own states where the first
feeds the target's, as a draft deeper than one token does; what it should lift is the
acceptance past the first draft position. Tokens per call is hardware-free (programs
compiled at XLA's lowest optimisation level, as scripts/tree_tokens_per_call.py does).
With --markdown, the section "## EAGLE heads trained on their own states" of that file is
written (replaced where it is already there).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proposer_trees  # pylint: disable=wrong-import-position
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

import specjax  # pylint: disable=wrong-import-position
from specjax.core import decoder  # pylint: disable=wrong-import-position
from specjax.core.figures import decode_figures  # pylint: disable=wrong-import-position
from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position

SECTION = '## EAGLE heads trained on their own states'
SHAPES = ['chain 1', 'chain 2', 'chain 3', 'chain 4', 'chain 6', 'dynamic:16:4:4',
          'dynamic:16:6:4']
DEPTH_GAMMA = 4  # the chain whose per-depth acceptance is reported


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION)
  p.add_argument('--heads', required=True,
                 help='LABEL=PATH,...: the heads of `train_draft --kind eagle` to compare')
  p.set_defaults(tasks='manlm', max_decode_len=32, seeds=1)
  return p.parse_args(argv)


def _heads(spec: str) -> dict:
  out = {}
  for item in spec.split(','):
    label, sep, path = item.partition('=')
    if not sep or not path:
      raise SystemExit(f'error: --heads takes LABEL=PATH,...; got {item!r}')
    out[label] = path
  return out


def depths(target, tp, head, hp, inputs, args) -> list:
  """P(draft position i accepted | position i - 1 was), i = 1..DEPTH_GAMMA, of a greedy
  chain of DEPTH_GAMMA."""
  out = specjax.speculative_decode(target, tp, head, hp, inputs, gamma=DEPTH_GAMMA,
                                   max_decode_len=args.max_decode_len, slots=args.batch_size)
  reached = np.asarray(decode_figures(jax.tree.map(np.asarray, out.stats)
                                      ).accepted_per_position)
  before = np.concatenate([[1.0], reached[:-1]])
  return [float(r / b) if b > 0 else None for r, b in zip(reached, before)]


def run_task(task: str, args) -> tuple:
  target, tp, _, _, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'target'
  rows, info = [], {}
  for label, path in _heads(args.heads).items():
    head, hp = drafts.resolve_draft(f'eagle:{path}', target, name, None)
    meta, _ = heads_io.load_heads(path)
    mine = proposer_trees.decode_rows(task, target, tp, inputs, {label: (head, hp, SHAPES)},
                                      args)
    rows += mine
    info[label] = {'passes': meta.get('passes', 1), 'steps': meta['steps'],
                   'learning_rate': meta['learning_rate'], 'final_loss': meta['final_loss'],
                   'final_accuracy': meta['final_accuracy'],
                   'depths': depths(target, tp, head, hp, inputs, args)}
    decoder.drop_programs()
  return rows, info


def markdown(rows: list, tasks: dict, command: str, args) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'EAGLE heads for `manlm_target` trained alike but for `--eagle-passes P`, the '
           'steps S and the learning rate LR (`python -m specjax.train_draft --kind eagle '
           '--target manlm_target --input FILE --workdir DIR --max-input-len 32 '
           '--max-decode-len 32 --steps S --learning-rate LR --eagle-passes P`, from the '
           'target\'s last layer; FILE the first 12 words of 4096 train texts of '
           'scripts/build_manpage_corpus.py, as for the bundled head, which is P 1, S 1200, '
           'LR 5e-4), measured on the first '
           f'{args.num_examples} test lines, at most {args.max_decode_len} new tokens. '
           'Tokens per target call (hardware-free) and alpha of the best chain and the best '
           f'dynamic tree of 16 nodes; "depth i" is the chance that a greedy chain of '
           f'{DEPTH_GAMMA} has its draft at depth i accepted when the one before was. Every '
           'greedy row was identical to the target alone.', '',
           '| task | P | S | LR | agreement (train) | T | best chain | tok/call | alpha | '
           'best tree | tok/call | ' + ' | '.join(
               f'depth {i + 1}' for i in range(DEPTH_GAMMA)) + ' |',
           '|' + '---|' * (11 + DEPTH_GAMMA)]
  for task, temperature, label, chain, tree in proposer_trees.best_by_group(rows):
    h = tasks[task][label]
    shown = (' | '.join('-' if d is None else f'{d:.3f}' for d in h['depths'])
             if temperature == 0 else ' | '.join('-' * DEPTH_GAMMA))
    lines.append(f'| {task} | {h["passes"]} | {h["steps"]} | {h["learning_rate"]:g} | '
                 f'{h["final_accuracy"]:.3f} | {temperature:g} | {chain["shape"]} | '
                 f'{chain["tokens_per_call"]:.2f} | {chain["alpha"]:.3f} | {tree["shape"]} | '
                 f'{tree["tokens_per_call"]:.2f} | {shown} |')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/eagle_passes.py --heads ' + args.heads +
             ' --json docs/eagle_passes.json --markdown docs/benchmarks.md')
  return proposer_trees.finish(args, rows, tasks, SECTION,
                               markdown(rows, tasks, command, args))


if __name__ == '__main__':
  sys.exit(main())
