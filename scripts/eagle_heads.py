"""The EAGLE heads beside the task's draft model: tokens per target call and alpha of the best
chain and the best tree of each, on the bundled tasks' first test lines, at each
temperature, each draft's cost c, and the heads' model cards.

    python scripts/eagle_heads.py --json docs/eagle_heads.json --markdown docs/benchmarks.md

The heads are the bundled ones (`--draft eagle`: specjax/assets/*/eagle, trained by
`python -m specjax.train_draft --kind eagle`). Tokens per target call and alpha are
hardware-free (programs compiled at XLA's lowest optimisation level, as
scripts/tree_tokens_per_call.py does); c is timed on this machine with XLA's defaults
(`scripts/layer_skip.py`'s `costs`: one proposal of one token, the catch-up call of two
positions). With --markdown, the section "## EAGLE heads" of that file is written (replaced
where it is already there), and each task's head gets its MODEL_CARD.md.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import medusa_heads  # pylint: disable=wrong-import-position  # sets XLA flags
import proposer_trees  # pylint: disable=wrong-import-position

SECTION = '## EAGLE heads'
SHAPES = ['chain 2', 'chain 3', 'chain 4', 'chain 6', '2,2,1', '2,2,2,1',
          'dynamic:16:4:4', 'dynamic:16:6:4', 'dynamic:16:8:4']


def parse_args(argv=None):
  return proposer_trees.parser(__doc__, SECTION, ';'.join(SHAPES)).parse_args(argv)


def run_task(task: str, args) -> tuple:
  return medusa_heads.run_task(task, args, 'eagle')


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'The bundled EAGLE heads (`--draft eagle`: one T5 decoder layer that drafts the '
           'target\'s next hidden state from its last one and the next token, read through '
           'the target\'s own projection; trained by `python -m specjax.train_draft --kind '
           'eagle` on the target\'s own greedy decodes of 4096 training inputs; their '
           'MODEL_CARD.md says how) beside the task\'s draft model. Tokens per target call '
           '(hardware-free) and alpha of the best chain and the best tree of each (dynamic '
           'trees of 16 verified nodes among them); c, one proposal of one token over a '
           'target step, timed on this CPU (XLA defaults). Every greedy row was identical '
           'to the target alone (`identical_to_target` in the JSON).', '']
  lines += medusa_heads.table(rows, tasks) + ['']
  for task in tasks:
    greedy = [r for r in rows if r['task'] == task and r['temperature'] == 0.0]
    best = lambda kind, chain: max(
        (r for r in greedy if (r['proposer'] == 'eagle') == (kind == 'eagle')
         and r['shape'].startswith('chain') == chain), key=lambda r: r['tokens_per_call'])
    tree16 = lambda kind: max(
        (r for r in greedy if (r['proposer'] == 'eagle') == (kind == 'eagle')
         and r['nodes'] == 16 and not r['shape'].startswith('chain')),
        key=lambda r: r['tokens_per_call'])
    name = lambda r: f'({r["shape"]}) {r["tokens_per_call"]:.2f}'
    lines.append(f'- {task}, T=0: the head\'s best 16-node tree {name(tree16("eagle"))} '
                 f'tokens per call and its best chain {name(best("eagle", True))}, against '
                 f'the draft model\'s {name(tree16("model"))} and '
                 f'{name(best("model", True))}.')
  tpu = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs',
                     'tpu_eagle_cost.json')
  if os.path.exists(tpu):
    with open(tpu, encoding='utf-8') as f:
      cost = json.load(f)
    gamma = next(int(k.split()[-1]) for k in cost['tokens_per_call'] if k.startswith('t5_'))
    lines += ['', 'Compile-only TPU v4, T5-XXL, one chip (`python scripts/tpu_head_cost.py '
              f'--kind eagle --gamma {gamma} --json docs/tpu_eagle_cost.json`, roofline '
              'times; docs/tpu_speed.md):', '',
              f'| batch | the head\'s chain of {gamma} / T5-XXL step | t5_small step / T5-XXL '
              f'step | predicted x, head (chain {gamma}) | predicted x, t5_small (gamma '
              f'{gamma}) |', '|---|---|---|---|---|']
    for batch in ('B=1', 'B=8'):
      pr = cost[batch]['predicted']
      lines.append(f'| {batch[2:]} | {pr["c_eagle_proposal"]:.4f} | '
                   f'{pr["c_t5_small_step"]:.4f} | {pr["eagle speedup"]:.2f} | '
                   f'{pr[f"t5_small gamma {gamma} speedup"]:.2f} |')
    lines += ['', f'The prediction takes the EnDe demo pair\'s tokens per call (the head\'s '
              f'chain {gamma}: {cost["tokens_per_call"]["eagle"]:.2f}; demo_draft\'s gamma '
              f'{gamma}: {cost["tokens_per_call"][f"t5_small gamma {gamma}"]:.2f}) as '
              f'T5-XXL\'s, and a verify of {gamma + 1} tokens as one step.']
  return '\n'.join(lines) + '\n'


def card(task: str, rows: list, info: dict) -> str:
  """The head's MODEL_CARD.md."""
  meta = info['heads']
  lines = [f'# EAGLE head for {meta["target"]}', '',
           'Written by `scripts/eagle_heads.py`; do not edit by hand.', '',
           'One T5 decoder layer (self-attention over its own cache, cross-attention to the '
           'target\'s encoder keys and values of its last layer, MLP) after a linear map of '
           'the target\'s final hidden state and the next token\'s embedding '
           f'(2 x {meta["hidden"]} -> {meta["hidden"]}), and a final norm; the target\'s '
           'own output projection reads it. It drafts the target\'s next hidden state; '
           'deeper drafts read its own. Stored bfloat16: '
           f'{medusa_heads.stored_mb(task, "eagle"):.2f} MB on disk.', '',
           f'Trained by `python -m specjax.train_draft --kind eagle --target {meta["target"]}` '
           f'from the target\'s last decoder layer, on the target\'s own greedy decodes of the '
           f'first {meta["examples"]} inputs of the task\'s train split '
           f'(`{medusa_heads.CORPUS[task]}` writes it; never the test lines below), '
           f'{meta["steps"]} steps of {meta["batch_size"]} sequences, Adam at '
           f'{meta["learning_rate"]:g}; on its last training batch, loss '
           f'{meta["final_loss"]:.3f} and teacher-forced agreement with the target\'s argmax '
           f'{meta["final_accuracy"]:.3f}.', '',
           f'Measured on the first test lines of the task ({task}; docs/benchmarks.md, '
           '"EAGLE heads"):', ''] + medusa_heads.card_table(rows, 'eagle')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/eagle_heads.py --json docs/eagle_heads.json --markdown '
             'docs/benchmarks.md')
  code = proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))
  if code == 0 and args.markdown:
    for task in tasks:
      path = os.path.join(medusa_heads.heads_path(task, 'eagle'), 'MODEL_CARD.md')
      with open(path, 'w', encoding='utf-8') as f:
        f.write(card(task, [r for r in rows if r['task'] == task], tasks[task]))
  return code


if __name__ == '__main__':
  sys.exit(main())
