"""Every kind of draft on the bundled decoder-only pair (man-page continuation): tokens per
target call and alpha of the best chain and the best tree of each, at each temperature,
each draft's cost c, and the model cards of the pair's heads.

    python scripts/manlm_pair.py --seeds 1 --json docs/manlm_pair.json --markdown docs/benchmarks.md

The drafts: `manlm_draft` (the draft model, distilled from the target), the bigram table,
copy, layer-skip (the target's first 1, 2 or 3 of its 4 layers), and the bundled EAGLE head
and Medusa heads (specjax/assets/manlm/{eagle,medusa}, trained by `python -m
specjax.train_draft`). Tokens per target call and alpha are hardware-free (programs
compiled at XLA's lowest optimisation level, as scripts/tree_tokens_per_call.py does); c
is timed on this machine with XLA's defaults (`scripts/layer_skip.py`'s `costs`). With
--markdown, the section "## The decoder-only pair" of that file is written (replaced where
it is already there), and each head gets its MODEL_CARD.md.
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import layer_skip  # pylint: disable=wrong-import-position
import medusa_heads  # pylint: disable=wrong-import-position  # sets XLA flags
import proposer_trees  # pylint: disable=wrong-import-position
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position

from specjax.core import decoder  # pylint: disable=wrong-import-position
from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position

SECTION = '## The decoder-only pair'
TASK = 'manlm'
CHAINS = ['chain 1', 'chain 2', 'chain 3', 'chain 4', 'chain 6']
TREES = ['2,1', '2,2,1', '2,2,2,1', '4,2,1', 'dynamic:16:4:4', 'dynamic:16:6:4']
SHAPES = {'manlm_draft': CHAINS + TREES, 'eagle': CHAINS + TREES,
          'medusa': CHAINS[:4] + TREES[:4] + ['4,4,2,1'],
          'layerskip:1': CHAINS[:3] + TREES[:3], 'layerskip:2': CHAINS + TREES[:4],
          'layerskip:3': CHAINS + TREES[:4], 'bigram': CHAINS[:3] + TREES[:4],
          'copy': CHAINS + ['2,1', '2,2,1']}


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION)
  p.add_argument('--rounds', type=int, default=3, help='timing rounds of c (fastest kept)')
  p.set_defaults(tasks=TASK, max_decode_len=32)
  return p.parse_args(argv)


def run_task(task: str, args) -> tuple:
  """The rows of every draft of the pair, and {'c': each one's cost, 'heads': the heads'
  draft.json by kind}."""
  target, tp, draft, dp, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'target'
  proposers = {}
  for spec, shapes in SHAPES.items():
    d, p = (draft, dp) if spec == 'manlm_draft' else drafts.resolve_draft(spec, target, name,
                                                                          None)
    proposers[spec] = (d, p, shapes)
  rows = []
  for spec, proposer in proposers.items():
    rows += proposer_trees.decode_rows(task, target, tp, inputs, {spec: proposer}, args)
    decoder.drop_programs()  # one process keeping them all reaches vm.max_map_count
  heads = {kind: heads_io.load_heads(drafts.TRAINED[kind][name])[0]
           for kind in ('eagle', 'medusa')}
  specs = ['model' if s == 'manlm_draft' else s for s in SHAPES if s != 'copy']
  return rows, {'c': layer_skip.costs(task, specs, args.rounds), 'heads': heads}


def markdown(rows: list, tasks: dict, command: str, num_examples: int, seeds: int) -> str:
  info = tasks[TASK]
  meta = info['heads']
  fmt = lambda a: '-' if a is None else f'{a:.3f}'
  lines = [SECTION, '', f'`{command}`', '',
           'The bundled decoder-only pair (`manlm_target`, 4 Llama layers of width 256, and '
           '`manlm_draft`, 1 layer of width 128, distilled from the target; '
           'specjax/assets/manlm/MODEL_CARD.md) continues man pages from their first 12 '
           f'words: the first {num_examples} test prompts, at most 32 new tokens. Beside '
           'the draft model: the bigram table of the train texts, copy, the target\'s own '
           'first M layers (layer-skip, its own exit), and the EAGLE head (one Llama layer '
           f'over the target\'s last hidden state, trained {meta["eagle"]["steps"]} steps) '
           f'and {meta["medusa"]["num_heads"]} Medusa heads ({meta["medusa"]["steps"]} '
           'steps), both trained by `python -m specjax.train_draft` on the target\'s own '
           'greedy decodes of the train prompts. At T=1 the counters of '
           f'{seeds} sampled decode{"s" if seeds > 1 else ""} of each setting are pooled. '
           'Tokens per target call (hardware-free) and '
           'alpha of the best chain and the best tree; c, one proposal of one token over a '
           'target step of two, timed on this CPU (XLA defaults). Every greedy row was '
           'identical to the target alone (`identical_to_target` in the JSON).', '',
           '| T | draft | c | best chain | tok/call | alpha | best tree | nodes | tok/call | '
           'alpha |', '|---|---|---|---|---|---|---|---|---|---|']
  costs = info['c']
  for _, temperature, kind, chain, tree in proposer_trees.best_by_group(rows):
    lines.append(f'| {temperature:g} | {kind} | {fmt(costs.get(kind))} | {chain["shape"]} | '
                 f'{chain["tokens_per_call"]:.2f} | {fmt(chain["alpha"])} | {tree["shape"]} | '
                 f'{tree["nodes"]} | {tree["tokens_per_call"]:.2f} | {fmt(tree["alpha"])} |')
  return '\n'.join(lines) + '\n'


def card(kind: str, rows: list, info: dict) -> str:
  """The heads' MODEL_CARD.md."""
  meta = info['heads'][kind]
  path = drafts.TRAINED[kind]['manlm_target']
  size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path)
             for f in fs if f != 'MODEL_CARD.md')
  what = ('One Llama decoder layer (self-attention over its own cache, SwiGLU MLP) after a '
          f'linear map of the target\'s final hidden state and the next token\'s embedding '
          f'(2 x {meta["hidden"]} -> {meta["hidden"]}), and a final RMSNorm; the target\'s '
          'own tied output projection turns its state into logits.' if kind == 'eagle' else
          f'{meta.get("num_heads")} heads, each h + SiLU(h W_k + b_k) on the target\'s final '
          f'hidden state (D = {meta["hidden"]}), read through the target\'s own output '
          'projection: head k proposes the token k past the last one.')
  lines = [f'# {"EAGLE head" if kind == "eagle" else "Medusa heads"} for manlm_target', '',
           'Written by `scripts/manlm_pair.py`; do not edit by hand.', '',
           f'{what} Stored bfloat16: {size / 1e6:.2f} MB on disk.', '',
           f'Trained by `python -m specjax.train_draft --kind {kind} --target manlm_target` '
           f'on the target\'s own greedy decodes of {meta["examples"]} train prompts (the '
           'first 12 words of the train texts of `scripts/build_manpage_corpus.py`; never '
           f'the test lines below), {meta["steps"]} steps of {meta["batch_size"]} '
           f'sequences, Adam at {meta["learning_rate"]:g}; loss on its last training batch '
           f'{meta["final_loss"]:.3f}.', '',
           'Measured on the first test prompts of the task (docs/benchmarks.md, "The '
           'decoder-only pair"):', ''] + medusa_heads.card_table(rows, kind)
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/manlm_pair.py --seeds 1 --json docs/manlm_pair.json '
             '--markdown docs/benchmarks.md')
  code = proposer_trees.finish(args, rows, tasks, SECTION,
                              markdown(rows, tasks, command, args.num_examples, args.seeds))
  if code == 0 and args.markdown:
    for kind in ('eagle', 'medusa'):
      path = os.path.join(drafts.TRAINED[kind]['manlm_target'], 'MODEL_CARD.md')
      with open(path, 'w', encoding='utf-8') as f:
        f.write(card(kind, [r for r in rows if r['task'] == TASK], tasks[TASK]))
  return code


if __name__ == '__main__':
  sys.exit(main())
