"""Distilled draft models beside the ones they started from: alpha and tokens per target call
of the best chain and the best tree of each, on the bundled tasks' first test lines, at
each temperature.

    python -m specjax.train_draft --kind distill --target demo_target --input TRAIN \
        --workdir runs/distill_ende                   # and manpages_target, likewise
    python -m specjax.train_draft --kind distill --target demo_target --input TRAIN \
        --distill-data draft --distill-temperature 1 --distill-loss tvd \
        --workdir runs/onpolicy_ende                  # on-policy (optional), likewise
    python scripts/distilled_drafts.py \
        --distilled ende=runs/distill_ende/heads,manpages=runs/distill_manpages/heads \
        --on-policy ende=runs/onpolicy_ende/heads,manpages=runs/onpolicy_manpages/heads \
        --json docs/distilled_drafts.json --markdown docs/benchmarks.md

A draft trained on the references alone, as drafts usually are, and that draft distilled
(optional; DistillSpec's comparison):

    python scripts/train_demo.py --task ende --stages draft,export --draft-learns references \
        --workdir runs/references_ende --assets runs/references_ende/assets
    python -m specjax.train_draft --kind distill --target demo_target \
        --draft runs/references_ende/assets/draft --input TRAIN --workdir runs/ref_distill_ende
    python scripts/distilled_drafts.py ... --references ende=runs/references_ende/assets/draft \
        --references-distilled ende=runs/ref_distill_ende/heads

TRAIN is the first 4096 inputs of the task's train split (scripts/build_demo_corpus.py,
scripts/build_manpage_corpus.py write them). The distilled drafts are not bundled: they
are the bundled drafts' architecture with other weights, so their cost c is the bundled
draft's (timed here once, with XLA's defaults). Tokens per target call and alpha are
hardware-free. With --markdown, the section "## Distilled draft models" of that file is
written (replaced where it is already there).
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import medusa_heads  # pylint: disable=wrong-import-position  # sets XLA flags
import layer_skip  # pylint: disable=wrong-import-position
import proposer_trees  # pylint: disable=wrong-import-position
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position

import jax  # pylint: disable=wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position

from specjax.checkpoints import loader  # pylint: disable=wrong-import-position
from specjax.drafting import heads_io  # pylint: disable=wrong-import-position

SECTION = '## Distilled draft models'
SHAPES = ['chain 2', 'chain 3', 'chain 4', 'chain 6', '2,2,1', 'dynamic:16:6:4']


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION, ';'.join(SHAPES))
  p.add_argument('--distilled', default='',
                 help='TASK=PATH,...: each task\'s distilled draft (train_draft --kind '
                      'distill\'s --output)')
  p.add_argument('--on-policy', default='',
                 help='TASK=PATH,...: each task\'s draft distilled on its own sampled '
                      'decodes by the total variation (train_draft --kind distill '
                      '--distill-data draft --distill-temperature 1 --distill-loss tvd), '
                      'its rows beside the others (optional)')
  p.add_argument('--references', default='',
                 help='TASK=PATH,...: each task\'s draft of the bundled draft\'s architecture '
                      'trained on the references alone (scripts/train_demo.py --draft-learns '
                      'references; its exported draft/), as a draft is usually trained '
                      '(optional)')
  p.add_argument('--references-distilled', default='',
                 help='TASK=PATH,...: that draft distilled as --distilled\'s (train_draft '
                      '--kind distill --draft PATH), beside the one it started from (optional)')
  p.add_argument('--references-on-policy', default='',
                 help='TASK=PATH,...: that draft distilled as --on-policy\'s (optional)')
  return p.parse_args(argv)


def _paths(spec: str) -> dict:
  return dict(item.split('=', 1) for item in spec.split(',') if item)


# How long each task's reference draft trained (`--draft-minutes`, `--draft-steps`), the
# bundled draft's budget (its MODEL_CARD.md), and on what the bundled draft trained instead.
REFERENCE_BUDGETS = {
    'ende': ('demo_draft\'s 30 minutes on the 25046 train pairs (demo_draft learned the '
             'target\'s outputs and distributions on those inputs and 56127 unlabelled ones)'),
    'manpages': ('manpages_draft\'s 2500 steps on the 7484 train pairs (manpages_draft '
                 'learned the target\'s outputs and distributions on the same inputs)'),
}

# The drafts beside the bundled one: (flag, row label, the label of the row of the draft it
# was distilled from: '' for the bundled draft, None for a draft not distilled).
DRAFTS = (('distilled', 'distilled', ''), ('on_policy', 'on-policy', ''),
          ('references', 'references', None),
          ('references_distilled', 'references, distilled', 'references'),
          ('references_on_policy', 'references, on-policy', 'references'))


def _load(path: str) -> tuple:
  """(model, float32 params, meta) of a draft (stored bfloat16); meta {} where it is not a
  train_draft output (a draft trained on references)."""
  model, params = loader.load_model(None, path)
  meta = (heads_io.load_heads(path)[0]
          if os.path.exists(os.path.join(path, heads_io.META_FILE)) else {})
  return model, jax.tree.map(lambda a: a.astype(jnp.float32), params), meta


def run_task(task: str, args) -> tuple:
  paths = {label: _paths(getattr(args, flag)) for flag, label, _ in DRAFTS}
  if task not in paths['distilled']:
    raise SystemExit(f'error: no distilled draft for {task}: pass --distilled {task}=PATH')
  for flag, label, start in DRAFTS:
    if start and task in paths[label] and task not in paths[start]:
      raise SystemExit(f'error: --{flag.replace("_", "-")} {task}=PATH needs the draft it '
                       f'started from: pass --{start} {task}=PATH')
  target, tp, draft, dp, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'draft'
  shapes = args.shapes.split(';')
  proposers, metas = {name: (draft, dp, shapes)}, {}
  for label, by_task in paths.items():
    if task in by_task:
      model, params, metas[label] = _load(by_task[task])
      proposers[label] = (model, params, shapes)
  rows = proposer_trees.decode_rows(task, target, tp, inputs, proposers, args)
  c = layer_skip.costs(task, ['model'], args.rounds)[name]
  return rows, {'c': {label: c for label in proposers}, 'drafts': metas}


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'Draft models fine-tuned on the target\'s own greedy decodes by the forward KL '
           'divergence from the target\'s next-token distributions (`python -m '
           'specjax.train_draft --kind distill`, DistillSpec), beside the draft each started '
           'from (the bullets below: how many inputs\' decodes, how many steps, and alpha of '
           'the chain of 4 before and after). Tokens per target call (hardware-free) and '
           'alpha of the best chain and the best tree of each; c is the same for all (one '
           'architecture). Every greedy row was identical to the target alone '
           '(`identical_to_target` in the JSON). Both bundled drafts learned the target\'s '
           'own outputs already (their MODEL_CARD.md: KL from the target plus '
           'cross-entropy on its greedy token, on more inputs than these), so distilling '
           'them again moves alpha by about 0.02 or less either way, about what 64 lines '
           'resolve.', '']
  if _given(tasks, 'on-policy'):
    lines += ['"on-policy" is the same draft fine-tuned instead on its own decodes of the '
              'inputs, sampled at T=1, by the total variation 0.5 sum |p - q| '
              '(`--distill-data draft --distill-temperature 1 --distill-loss tvd`): '
              'DistillSpec\'s choice, and at T=1 the very quantity alpha is one minus.', '']
  if _given(tasks, 'references'):
    lines += ['"references" is a draft of the same architecture trained from scratch on the '
              'train split\'s references alone by cross-entropy, as a draft is usually trained '
              '(`scripts/train_demo.py --stages draft,export --draft-learns references`, '
              'with the bundled draft\'s settings and budget); the rows "references, ..." are '
              'that draft distilled as above.', '']
    for task, info in tasks.items():
      if 'references' not in info['drafts']:
        continue
      bundled = sweep.TASKS[task] + 'draft'
      pairs = [(t, _alpha(rows, task, t, 'references'), _alpha(rows, task, t, bundled))
               for t in sorted({r['temperature'] for r in rows})]
      lines += [f'- {task}: the draft that learned the references trained for '
                f'{REFERENCE_BUDGETS[task]}. Alpha of the chain of 4: ' + '; '.join(
                    f'T={t:g} {ref:.3f} against {bundled}\'s {dist:.3f} ({dist - ref:+.3f})'
                    for t, ref, dist in pairs) + '.']
    lines += ['']
  lines += medusa_heads.table(rows, tasks) + ['']
  temperatures = sorted({r['temperature'] for r in rows})
  for task, info in tasks.items():
    for _, label, start in DRAFTS:
      meta = info['drafts'].get(label)
      if start is None or meta is None:
        continue
      start = start or meta['draft']
      before = lambda t, start=start: _alpha(rows, task, t, start)
      lines.append(f'- {task}, {label}: {start} distilled on the decodes of '
                   f'{meta["examples"]} inputs for {meta["steps"]} steps of '
                   f'{meta["batch_size"]} sequences (Adam at {meta["learning_rate"]:g}); '
                   'alpha of the chain of 4, before and after: ' + '; '.join(
                       f'T={t:g} {before(t):.3f} -> {_alpha(rows, task, t, label):.3f} '
                       f'({_alpha(rows, task, t, label) - before(t):+.3f})'
                       for t in temperatures) + '.')
  return '\n'.join(lines) + '\n'


def _given(tasks: dict, label: str) -> list:
  """The tasks that have a draft of this row label."""
  return [task for task, info in tasks.items() if label in info['drafts']]


def _alpha(rows: list, task: str, temperature: float, proposer: str) -> float:
  return next(r['alpha'] for r in rows if r['task'] == task and r['proposer'] == proposer
              and r['temperature'] == temperature and r['shape'] == 'chain 4')


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ['python scripts/distilled_drafts.py']
  for flag, label, _ in DRAFTS:
    given = _given(tasks, label)
    if given:
      command.append(f'--{flag.replace("_", "-")} ' + ','.join(f'{t}=...' for t in given))
  command = ' '.join(command + ['--json docs/distilled_drafts.json',
                                '--markdown docs/benchmarks.md'])
  return proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))


if __name__ == '__main__':
  sys.exit(main())
