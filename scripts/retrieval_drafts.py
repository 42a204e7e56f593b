"""Tokens per target call and draft cost of the drafts that need no draft model (REST from
the bundled datastores, suffix decoding) and of cascades, beside the draft model, copy, the
bigram table and the EAGLE head, on the bundled tasks' first test lines (EnDe, man pages,
and the decoder-only pair's man-page continuation), greedy and sampled.

    python scripts/retrieval_drafts.py --json docs/retrieval_drafts.json --markdown docs/benchmarks.md

Tokens per target call is hardware-free (decodes compiled at XLA's lowest optimisation
level, as scripts/tree_tokens_per_call.py's sweep does). The draft cost is timed on this
CPU with XLA's optimisations on: the seconds of one proposal of a chain of 4 tokens over
the seconds of one target step (batch 8, the cache's middle, the fastest of --rounds),
reported as c = that / 4, the paper's per-token cost; a greedy row says whether its output
is the target alone's. With --markdown the section "## Drafts with no draft model: REST,
suffix, cascades" of that file is written (replaced where it is already there).
"""
from __future__ import annotations

import functools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proposer_trees  # pylint: disable=wrong-import-position
import tree_tokens_per_call as sweep  # pylint: disable=wrong-import-position  # sets XLA flags
import draft_calls  # pylint: disable=wrong-import-position

import jax  # pylint: disable=wrong-import-position
import jax.numpy as jnp  # pylint: disable=wrong-import-position

from specjax.core import decoder  # pylint: disable=wrong-import-position
from specjax.core.model_proposer import as_proposer  # pylint: disable=wrong-import-position
from specjax.core.proposal import draft_view  # pylint: disable=wrong-import-position
from specjax.core.sampling import SamplingConfig, SamplingParams  # pylint: disable=wrong-import-position
from specjax.core.state import LoopConfig  # pylint: disable=wrong-import-position
from specjax.core.steps import Bound  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position
from specjax.speed import timing  # pylint: disable=wrong-import-position

SECTION = '## Drafts with no draft model: REST, suffix, cascades'
CHAINS = ['chain 2', 'chain 4', 'chain 6']
TRIES = ['dynamic:16:6:4', 'dynamic:32:8:4']
BIG_TRIE = 'dynamic:64:10:4'  # REST's, and REST and suffix's together
GAMMA = 4  # the chain whose proposal is timed


def settings(task: str) -> dict:
  """spec -> the chains and trees decoded; 'model' is the task's draft model."""
  model = sweep.TASKS[task] + 'draft'
  return {'model': CHAINS + ['chain 8', 'dynamic:16:6:4'], 'copy': CHAINS + ['3,1,1,1'],
          'bigram': CHAINS + ['dynamic:16:6:4'], 'eagle': CHAINS + ['dynamic:16:6:4'],
          'rest': CHAINS + TRIES + [BIG_TRIE], 'suffix': CHAINS + TRIES,
          'rest+suffix': CHAINS + TRIES + [BIG_TRIE],
          'lookahead:5,3,4': [proposer_trees.OWN_TREE],
          'lookahead:4,4,4': [proposer_trees.OWN_TREE],
          'lookahead:12,3,8': [proposer_trees.OWN_TREE],
          f'cascade:{model}/bigram': CHAINS, f'cascade:{model}/suffix': CHAINS,
          f'cascade:{model}/bigram/3/4': ['chain 6', 'chain 8'],
          f'cascade:{model}/bigram/3/5': ['chain 8'],
          f'cascade:{model}:2,rest': ['chain 4', 'chain 6']}


def parse_args(argv=None):
  p = proposer_trees.parser(__doc__, SECTION)
  p.set_defaults(tasks='ende,manpages,manlm')
  p.add_argument('--rounds', type=int, default=3, help='timing rounds of the cost')
  return p.parse_args(argv)


_GREEDY = SamplingParams.of(SamplingConfig(), 1)


@functools.partial(jax.jit, static_argnames=('draft', 'batch', 'gamma', 'cache_len'))
def _repeat_proposals(draft, params, encoded, repeats, batch, gamma, cache_len):
  """`repeats` greedy proposals of a chain of `gamma` near the cache's middle."""
  bound = Bound(draft, params, encoded)
  cfg = LoopConfig(gamma=gamma, max_decode_len=1)
  rows = jax.tree.map(lambda a: jnp.broadcast_to(a, (batch,)), _GREEDY)

  def body(i, carry):
    cache, total = carry
    shift = (i % 2).astype(jnp.int32)
    seq = jnp.full((batch, cache_len), 3, jnp.int32) + shift
    pos = jnp.full((batch,), cache_len // 2, jnp.int32) + shift
    d = bound.propose(cache, seq, pos, None, rows, cfg)
    return d.state, total + d.tokens[0, 0].astype(jnp.float32)

  init = (draft.init_cache(batch, cache_len), jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[1]


def proposal_cost(target, tp, draft, dp, inputs, rounds: int) -> float:
  """Seconds of one proposal of GAMMA tokens over one target step (batch of inputs)."""
  draft = as_proposer(draft)
  params, encoded = draft_view(draft, tp, dp, target.encode(tp, inputs),
                               draft.encode(dp, inputs))
  step = min(timing.call_seconds(target, tp, inputs, 1) for _ in range(rounds))
  run = lambda n: _repeat_proposals(draft, params, encoded, n, inputs.shape[0], GAMMA,
                                    timing.CACHE_LEN)
  spent = min(timing.per_repeat_seconds(run, 32, 5) for _ in range(rounds))
  return spent / step


def is_vertical(spec: str) -> bool:
  """Whether `spec` is a vertical cascade ('cascade:DRAFT/CHEAP[/K]')."""
  return spec.startswith('cascade:') and '/' in spec


def count_calls(rows: list, proposers: dict, target, tp, inputs, args) -> None:
  """Adds to each chain row of the draft model and of the vertical cascades its draft
  model's calls per proposal, counted in decodes of the same lines at batch 1 and at
  args.batch_size (`draft_calls.counted_decode`; sampled: pooled over the seeds), as
  row['draft_calls'] {'B=1': .., 'B=8': ..}."""
  for row in rows:
    spec = row['proposer']
    if not (spec == 'model' or is_vertical(spec)) or not row['shape'].startswith('chain '):
      continue
    draft, dp, _ = proposers[spec]
    sampling = SamplingConfig(temperature=row['temperature'])
    row['draft_calls'] = {}
    for batch in sorted({1, args.batch_size}):
      made = [draft_calls.counted_decode(
          target, tp, draft, dp, inputs, gamma=int(row['shape'].split()[1]),
          max_decode_len=args.max_decode_len, sampling=sampling,
          rng=jax.random.PRNGKey(seed), slots=batch) for seed in range(row['seeds'])]
      row['draft_calls'][f'B={batch}'] = (sum(m['calls'] for m in made)
                                          / sum(m['proposals'] for m in made))
    print(f'{row["task"]} {spec} {row["shape"]} T {row["temperature"]:g}: draft calls per '
          f'proposal {row["draft_calls"]}', file=sys.stderr, flush=True)


def run_task(task: str, args) -> tuple:
  target, tp, draft, dp, inputs = sweep.load_task(task, args.num_examples)
  name = sweep.TASKS[task] + 'target'
  load = lambda _: (draft, dp)
  proposers = {}
  for spec, labels in settings(task).items():
    d, p = (draft, dp) if spec == 'model' else drafts.resolve_draft(spec, target, name, load)
    proposers[spec] = (d, p, labels)
  rows = []
  for spec, proposer in proposers.items():  # one at a time, dropping what XLA compiled
    mine = proposer_trees.decode_rows(task, target, tp, inputs, {spec: proposer}, args)
    count_calls(mine, proposers, target, tp, inputs, args)
    rows += mine
    decoder.drop_programs()
    jax.clear_caches()
  jax.config.update('jax_disable_most_optimizations', False)  # timed as a user runs it
  costs = {}
  for spec, (d, p, _) in proposers.items():
    if hasattr(d, 'tree_spec'):  # no chain to time: lookahead verifies its own tree
      continue
    start = time.perf_counter()
    costs[spec] = proposal_cost(target, tp, d, p, inputs[:args.batch_size], args.rounds) / GAMMA
    print(f'{task} {spec}: c {costs[spec]:.3f} ({time.perf_counter() - start:.0f} s)',
          file=sys.stderr, flush=True)
  jax.config.update('jax_disable_most_optimizations', True)
  return rows, {'c': costs}


def markdown(rows: list, tasks: dict, command: str) -> str:
  lines = [SECTION, '', f'`{command}`', '',
           'Tokens per target call (hardware-free) of the best chain (gamma 2, 4, 6; 8 for '
           'the draft model and the capped cascades) and the '
           'best tree of each draft on the first test lines of each task (batch 8, refilled; '
           'sampled rows pooled over two seeds), and c, the draft\'s cost per drafted token '
           'in target steps on this CPU (one proposal of a chain of 4 over 4 target steps, '
           'batch 8; a vertical cascade\'s at its most draft calls: the timed sequence, one '
           'token repeated, has the draft model keep none of the cheap drafts). `rest` '
           'retrieves from the datastore bundled with the task (its train targets; 32 '
           'continuations of the longest match and 32 of a shorter one, weighed below them; '
           'the trees are tries of 16 and 32 nodes, and 64 for `rest` and `rest+suffix`); '
           '`suffix` from '
           'the row\'s own '
           'input and output, `rest+suffix` one trie of both; `lookahead:W,N,G` the '
           'target\'s own Jacobi window and n-gram pool as one tree; `cascade:D/X` is the '
           'draft model D\'s chain drafted by X and '
           'verified by D (vertical), `cascade:D/X/3/C` the same in at most C calls of D '
           '(a row short of the chain after them proposes what it holds), '
           '`cascade:D:2,X` D\'s first 2 drafts then X\'s '
           '(horizontal). Every greedy row was identical to the target alone '
           '(`identical_to_target` in the JSON).', '',
           '| task | T | draft | c | best chain | tok/call | best tree | tok/call |',
           '|---|---|---|---|---|---|---|---|']
  for task, temperature, kind, chain, best_tree in _groups(rows):
    c = tasks.get(task, {}).get('c', {}).get(kind)
    cells = lambda r: ('-', '-') if r is None else (
        r['shape'] if r['shape'] != proposer_trees.OWN_TREE else f'{r["nodes"]} nodes',
        f'{r["tokens_per_call"]:.2f}')
    lines.append(f'| {task} | {temperature:g} | {kind} | '
                 f'{"-" if c is None else format(c, ".3f")} | {" | ".join(cells(chain))} | '
                 f'{" | ".join(cells(best_tree))} |')
  return '\n'.join(lines + calls_table(rows)) + '\n'


def calls_table(rows: list) -> list:
  """The lines of the draft model's calls per proposal (`count_calls`), if counted."""
  counted = [r for r in rows if r.get('draft_calls')]
  if not counted:
    return []
  batches = sorted({b for r in counted for b in r['draft_calls']}, key=lambda b: int(b[2:]))
  lines = ['', 'Calls of the draft model per proposal, counted in the decodes of the same '
           'lines at each batch (`scripts/draft_calls.py`; refilled; sampled: both seeds): '
           'a draft model\'s chain of G makes G; a vertical cascade one of k + 2 = 5 tokens '
           '(the token before the chain\'s last, the last, 3 cheap drafts), then one of '
           'k + 1 = 4 per iteration of its loop, and its loop runs until the batch\'s '
           'slowest row holds G drafts, or C calls were made (`/3/C`). On memory-bound '
           'hardware a call costs about the '
           'same whatever its few tokens (docs/tpu_speed.md prices them).', '',
           '| task | T | draft | chain | ' + ' | '.join(f'calls at {b}' for b in batches)
           + ' |', '|---|---|---|---|' + '---|' * len(batches)]
  for r in counted:
    lines.append(f'| {r["task"]} | {r["temperature"]:g} | {r["proposer"]} | '
                 f'{r["shape"].split()[1]} | '
                 + ' | '.join(f'{r["draft_calls"].get(b, float("nan")):.2f}' for b in batches)
                 + ' |')
  return lines


def _groups(rows: list):
  keys = list(dict.fromkeys((r['task'], r['temperature'], r['proposer']) for r in rows))
  for key in keys:
    mine = [r for r in rows if (r['task'], r['temperature'], r['proposer']) == key]
    chains = [r for r in mine if r['shape'].startswith('chain')]
    trees = [r for r in mine if not r['shape'].startswith('chain')]
    best = lambda group: max(group, key=lambda r: r['tokens_per_call']) if group else None
    yield (*key, best(chains), best(trees))


def main(argv=None) -> int:
  args = parse_args(argv)
  rows, tasks = proposer_trees.collect(args, run_task)
  command = ('python scripts/retrieval_drafts.py --json docs/retrieval_drafts.json '
             '--markdown docs/benchmarks.md')
  return proposer_trees.finish(args, rows, tasks, SECTION, markdown(rows, tasks, command))


if __name__ == '__main__':
  sys.exit(main())
