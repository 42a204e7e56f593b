"""Layer-skip self-speculation beside the task's draft model: tokens per target call and
alpha of the best chain and the best tree of each, on the bundled tasks' first test lines,
at each temperature, and each draft's cost c (its step over the target's, timed here).

    python scripts/layer_skip.py --json docs/layer_skip.json --markdown docs/benchmarks.md

Tokens per target call and alpha are hardware-free; programs compile at XLA's lowest
optimisation level (as scripts/tree_tokens_per_call.py's sweep does). c is timed on this
machine with XLA's defaults (`specjax.speed.timing.step_costs`, the fastest of --rounds):
layer-skip's step runs M of the target's L decoder layers. Every figure comes from
`specjax.core.figures.decode_figures`; a greedy row says whether its output is the target
alone's. With --markdown, the section "## Layer-skip self-speculation" of that file is
written (replaced where it is already there).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags
import proposer_trees  # pylint: disable=wrong-import-position

from specjax.proposers.layer_skip import LayerSkip, layer_count  # pylint: disable=wrong-import-position

SECTION = '## Layer-skip self-speculation'
SHAPES = ['chain 2', 'chain 3', 'chain 4', 'chain 6', '2,2,1', '4,2,1', 'dynamic:16:4:4']


def parse_args(argv=None):
  return proposer_trees.parser(__doc__, SECTION, ';'.join(SHAPES)).parse_args(argv)


def costs(task: str, specs: list, rounds: int) -> dict:
  """c of each draft spec of the task ('model': the task's draft model; others as
  --draft takes them), timed in a subprocess with XLA's defaults (this process compiles
  at the lowest optimisation level)."""
  env = {k: v for k, v in os.environ.items() if k != 'JAX_DISABLE_MOST_OPTIMIZATIONS'}
  env['XLA_FLAGS'] = ' '.join(f for f in env.get('XLA_FLAGS', '').split()
                              if 'fusion_emitters' not in f)
  code = f'''
import json, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import os
import tree_tokens_per_call as sweep  # sets the test flags: undone before XLA starts
import jax
jax.config.update('jax_disable_most_optimizations', False)
os.environ['XLA_FLAGS'] = {env['XLA_FLAGS']!r}
from specjax.job import drafts
from specjax.speed import timing
target, tp, draft, dp, inputs = sweep.load_task({task!r}, 8)
name = sweep.TASKS[{task!r}] + 'target'
out = {{}}
for spec in {specs!r}:
  d, p = (draft, dp) if spec == 'model' else drafts.resolve_draft(spec, target, name, None)
  key = sweep.TASKS[{task!r}] + 'draft' if spec == 'model' else spec
  out[key] = timing.step_costs(target, tp, d, p, inputs[:8], 1, {rounds})['c']
print(json.dumps(out))
'''
  run = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True,
                       check=False)
  if run.returncode:
    raise RuntimeError(f'timing c failed: {run.stderr[-2000:]}')
  return json.loads(run.stdout.strip().splitlines()[-1])


def run_task(task: str, args) -> tuple:
  target, tp, draft, dp, inputs = sweep.load_task(task, args.num_examples)
  shapes = args.shapes.split(';')
  proposers = {sweep.TASKS[task] + 'draft': (draft, dp, shapes)}
  proposers.update({f'layerskip:{m}': (LayerSkip(target, m), {}, shapes)
                    for m in range(1, layer_count(target))})
  rows = proposer_trees.decode_rows(task, target, tp, inputs, proposers, args)
  specs = ['model'] + [f'layerskip:{m}' for m in range(1, layer_count(target))]
  return rows, {'layers': layer_count(target), 'c': costs(task, specs, args.rounds)}


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'The target\'s own first M decoder layers draft (`--draft layerskip:M`: no draft '
           'model, no params of its own), beside the task\'s draft model. Tokens per target '
           'call (hardware-free) and alpha of the best chain and the best tree of each; c, '
           'the draft\'s step over the target\'s, timed on this CPU (XLA defaults). Every '
           'greedy row was identical to the target alone (`identical_to_target` in the '
           'JSON). No early-exit fine-tune: the cut model reads the target\'s final norm '
           'and output projection as they are.', '',
           'Cost model (docs/algorithm.md, v(K) taken as 1): a chain of G drafts costs '
           '1 + G c target steps per call, so its speedup is at most tok/call / (1 + G c) '
           '("chain x": the best chain by it): the draft model\'s c is what makes it pay; layer-skip\'s c is about '
           'M / L of the target\'s.', '',
           '| task | T | draft | c | best chain | tok/call | alpha | chain x | best tree | '
           'nodes | tok/call | alpha |', '|---|---|---|---|---|---|---|---|---|---|---|---|']
  fmt = lambda a: '-' if a is None else f'{a:.3f}'
  for task, temperature, kind, chain, tree in proposer_trees.best_by_group(rows):
    c = tasks[task]['c'].get(kind)
    chains = [r for r in rows if (r['task'], r['temperature'], r['proposer']) ==
              (task, temperature, kind) and r['shape'].startswith('chain')]
    bound = '-'
    if c is not None:
      x, g = max((r['tokens_per_call'] / (1 + r['nodes'] * c), r['nodes']) for r in chains)
      bound = f'{x:.2f} (G {g})'
    lines.append(f'| {task} | {temperature:g} | {kind} | {fmt(c)} | {chain["shape"]} | '
                 f'{chain["tokens_per_call"]:.2f} | {fmt(chain["alpha"])} | {bound} | '
                 f'{tree["shape"]} | '
                 f'{tree["nodes"]} | {tree["tokens_per_call"]:.2f} | {fmt(tree["alpha"])} |')
  lines += ['', 'Targets\' decoder layers: ' + ', '.join(
      f'{task} {t["layers"]}' for task, t in tasks.items()) + '.']
  greedy = [r for r in rows if r['temperature'] == 0.0 and r['shape'].startswith('chain')]
  for task in tasks:
    best = lambda pick: max((r for r in greedy if r['task'] == task and pick(r['proposer'])),
                            key=lambda r: r['tokens_per_call'])
    skip, model = best(lambda k: k.startswith('layerskip')), best(
        lambda k: not k.startswith('layerskip'))
    lines.append(f'- {task}, T=0: {skip["proposer"]} accepts {skip["tokens_per_call"]:.2f} '
                 f'tokens per call ({skip["shape"]}) against the draft model\'s '
                 f'{model["tokens_per_call"]:.2f}, at c {tasks[task]["c"][skip["proposer"]]:.2f} '
                 f'against {tasks[task]["c"][model["proposer"]]:.3f}.')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = 'python scripts/layer_skip.py --json docs/layer_skip.json --markdown docs/benchmarks.md'
  code = proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))
  return code


if __name__ == '__main__':
  sys.exit(main())
