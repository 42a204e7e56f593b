"""Medusa heads beside the task's draft model: tokens per target call and alpha of the best
chain and the best tree of each, on the bundled tasks' first test lines, at each
temperature, each draft's cost c, and the heads' model cards.

    python scripts/medusa_heads.py --json docs/medusa_heads.json --markdown docs/benchmarks.md

The heads are the bundled ones (`--draft medusa`: specjax/assets/*/medusa, trained by
`python -m specjax.train_draft`). Tokens per target call and alpha are hardware-free
(programs compiled at XLA's lowest optimisation level, as scripts/tree_tokens_per_call.py
does); c is timed on this machine with XLA's defaults (`scripts/layer_skip.py`'s `costs`).
With --markdown, the section "## Medusa heads" of that file is written (replaced where it
is already there), and each task's heads get their MODEL_CARD.md.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags
import layer_skip  # pylint: disable=wrong-import-position
import proposer_trees  # pylint: disable=wrong-import-position

from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position

SECTION = '## Medusa heads'
CORPUS = {'ende': 'scripts/build_demo_corpus.py', 'manpages': 'scripts/build_manpage_corpus.py'}
SHAPES = ['chain 1', 'chain 2', 'chain 3', 'chain 4', '2,1', '3,2,1', '4,2,2,1', '2,2,2,2',
          'dynamic:16:4:4']


def parse_args(argv=None):
  return proposer_trees.parser(__doc__, SECTION, ';'.join(SHAPES)).parse_args(argv)


def run_task(task: str, args, kind: str = 'medusa') -> tuple:
  """The rows of the task's draft model and of its bundled heads of `kind` ('medusa' or
  'eagle'), and {'c': each one's cost, 'heads': the heads' draft.json}."""
  target, tp, draft, dp, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'target'
  shapes = args.shapes.split(';')
  heads, hp = drafts.resolve_draft(kind, target, name, None)
  proposers = {sweep.TASKS[task] + 'draft': (draft, dp, shapes), kind: (heads, hp, shapes)}
  rows = proposer_trees.decode_rows(task, target, tp, inputs, proposers, args)
  meta, _ = heads_io.load_heads(heads_path(task, kind))
  return rows, {'c': layer_skip.costs(task, ['model', kind], args.rounds), 'heads': meta}


def heads_path(task: str, kind: str = 'medusa') -> str:
  """The task target's bundled heads of `kind`."""
  return drafts.TRAINED[kind][sweep.TASKS[task] + 'target']


def table(rows: list, tasks: dict) -> list:
  """The lines of the table of the best chain and tree of each task, temperature and
  draft."""
  lines = ['| task | T | draft | c | best chain | tok/call | alpha | best tree | nodes | '
           'tok/call | alpha |', '|---|---|---|---|---|---|---|---|---|---|---|']
  fmt = lambda a: '-' if a is None else f'{a:.3f}'
  for task, temperature, kind, chain, tree in proposer_trees.best_by_group(rows):
    lines.append(f'| {task} | {temperature:g} | {kind} | {fmt(tasks[task]["c"].get(kind))} | '
                 f'{chain["shape"]} | {chain["tokens_per_call"]:.2f} | '
                 f'{fmt(chain["alpha"])} | {tree["shape"]} | {tree["nodes"]} | '
                 f'{tree["tokens_per_call"]:.2f} | {fmt(tree["alpha"])} |')
  return lines


def card_table(rows: list, kind: str) -> list:
  """The lines of a model card's table: the heads' best chain and tree per temperature."""
  lines = ['| T | best chain | tokens per call | alpha | best tree | tokens per call | alpha |',
           '|---|---|---|---|---|---|---|']
  for _, temperature, proposer, chain, tree in proposer_trees.best_by_group(
      rows, order=lambda k: k[1]):
    if proposer != kind:
      continue
    lines.append(f'| {temperature:g} | {chain["shape"]} | {chain["tokens_per_call"]:.2f} | '
                 f'{chain["alpha"]:.3f} | {tree["shape"]} | {tree["tokens_per_call"]:.2f} | '
                 f'{tree["alpha"]:.3f} |')
  return lines


def stored_mb(task: str, kind: str) -> float:
  """The bundled heads' size on disk, their model card apart: MB."""
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(
      heads_path(task, kind)) for f in fs if f != 'MODEL_CARD.md') / 1e6


def _best(rows, chain: bool):
  mine = [r for r in rows if r['shape'].startswith('chain') == chain]
  return max(mine, key=lambda r: r['tokens_per_call'])


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'The bundled Medusa heads (`--draft medusa`: K = 4 heads on the target\'s last '
           'hidden state, trained by `python -m specjax.train_draft` on the target\'s own '
           'greedy decodes of 4096 training inputs; their MODEL_CARD.md says how) beside '
           'the task\'s draft model. Tokens per target call (hardware-free) and alpha of '
           'the best chain and the best tree of each; c, one proposal over a target step, '
           'timed on this CPU (XLA defaults). Every greedy row was identical to the target '
           'alone (`identical_to_target` in the JSON).', ''] + table(rows, tasks)
  lines.append('')
  for task in tasks:
    greedy = [r for r in rows if r['task'] == task and r['temperature'] == 0.0]
    heads = _best([r for r in greedy if r['proposer'] == 'medusa'], False)
    model = _best([r for r in greedy if r['proposer'] != 'medusa'], True)
    lines.append(f'- {task}, T=0: the heads\' best tree {heads["tokens_per_call"]:.2f} tokens '
                 f'per call against the draft model\'s chain {model["tokens_per_call"]:.2f}: '
                 'on these 10 M-parameter targets one D x D layer per head on the last hidden '
                 'state predicts two or more tokens ahead poorly (alpha '
                 f'{heads["alpha"]:.2f} against {model["alpha"]:.2f}).')
  tpu = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                     'tpu_medusa_cost.json')
  if os.path.exists(tpu):
    with open(tpu, encoding='utf-8') as f:
      cost = json.load(f)
    lines += ['', 'Compile-only TPU v4, T5-XXL, one chip (`python scripts/tpu_head_cost.py '
              '--kind medusa --json docs/tpu_medusa_cost.json`, roofline times):', '',
              '| batch | 4 heads\' proposal / T5-XXL step | t5_small step / T5-XXL step | '
              'predicted x, heads (chain 4) | predicted x, t5_small (gamma 4) |',
              '|---|---|---|---|---|']
    for batch in ('B=1', 'B=8'):
      pr = cost[batch]['predicted']
      lines.append(f'| {batch[2:]} | {pr["c_medusa_proposal"]:.4f} | '
                   f'{pr["c_t5_small_step"]:.4f} | {pr["medusa speedup"]:.2f} | '
                   f'{pr["t5_small gamma 4 speedup"]:.2f} |')
    lines += ['', 'The prediction takes the EnDe demo pair\'s tokens per call (heads\' chain 4: '
              f'{cost["tokens_per_call"]["medusa"]:.2f}; demo_draft\'s gamma 4: '
              f'{cost["tokens_per_call"]["t5_small gamma 4"]:.2f}) as T5-XXL\'s, and a verify '
              'of 5 tokens as one step. A proposal of all 4 heads costs '
              + ' and '.join(f'{p["c_medusa_proposal"] / p["c_t5_small_step"]:.1f} t5_small '
                             f'steps at batch {b[2:]}' for b, p in
                             ((b, cost[b]['predicted']) for b in ('B=1', 'B=8')))
              + ', about what t5_small\'s chain of 4 costs: heads that accepted as a draft '
              'model does would predict about the same speedup, with no draft model to train '
              'or serve; these do not accept enough.']
  return '\n'.join(lines) + '\n'


def card(task: str, rows: list, info: dict) -> str:
  """The heads' MODEL_CARD.md."""
  meta = info['heads']
  size = stored_mb(task, 'medusa') * 1e6
  lines = [f'# Medusa heads for {meta["target"]}', '',
           'Written by `scripts/medusa_heads.py`; do not edit by hand.', '',
           f'{meta["num_heads"]} heads, each h + SiLU(h W_k + b_k) on the target\'s final '
           f'hidden state (D = {meta["hidden"]}), read through the target\'s own output '
           'projection: head k proposes the token k past the last one. '
           f'{meta["num_heads"]} x {meta["hidden"]} x ({meta["hidden"]} + 1) params, stored '
           f'bfloat16: {size / 1e6:.2f} MB on disk.', '',
           f'Trained by `python -m specjax.train_draft --kind medusa --target {meta["target"]}` '
           f'on the target\'s own greedy decodes of the first {meta["examples"]} inputs of '
           f'the task\'s train split (`{CORPUS[task]}` writes it; never the test lines '
           'below), '
           f'{meta["steps"]} steps of {meta["batch_size"]} sequences, Adam at '
           f'{meta["learning_rate"]:g}; on its last training batch, loss {meta["final_loss"]:.3f} '
           'and teacher-forced accuracy per head ' + ', '.join(f'{a:.3f}' for a in meta['final_accuracy_per_head'])
           + '.', '',
           f'Measured on the first test lines of the task ({task}; docs/benchmarks.md, '
           '"Medusa heads"):', '',
           ] + card_table(rows, 'medusa')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = 'python scripts/medusa_heads.py --json docs/medusa_heads.json --markdown docs/benchmarks.md'
  code = proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))
  if code == 0 and args.markdown:
    for task in tasks:
      with open(os.path.join(heads_path(task), 'MODEL_CARD.md'), 'w', encoding='utf-8') as f:
        f.write(card(task, [r for r in rows if r['task'] == task], tasks[task]))
  return code


if __name__ == '__main__':
  sys.exit(main())
