"""Tokens per target call of chains against static and dynamic token trees, on the bundled
tasks (EnDe: demo_target + demo_draft; man-page summarisation: manpages_target +
manpages_draft), at each temperature, on the same inputs; then the wall clock of the best
chain against the best tree of at most 16 nodes on this machine.

    python scripts/tree_tokens_per_call.py --json docs/trees.json --markdown docs/benchmarks.md

Tokens per target call is hardware-free (it counts calls, not seconds), so the sweep
compiles its programs at XLA's lowest optimisation level (as the tests do: a third less
compile time, the same tokens); the wall-clock phase then runs in a fresh process with
XLA's defaults (`--wall-clock`), timing the target alone, the best chain and the best
16-node tree in interleaved rounds. Every figure comes from
`specjax.core.figures.decode_figures`. With --markdown, the section "## Token trees" of
that file is written (replaced where it is already there).

`--first-child PATH` measures instead the dynamic trees (--dynamic-16, --dynamic-32) at
temperature 1 twice on the same inputs and seeds, in one run: with each expanded node's
first child drawn from the draft's distribution (`tree_draft.grow_dynamic`'s default) and
with every child a top-k point mass (its `sample_first=False`, as before), writes both to
PATH and prints the markdown table of docs/benchmarks.md's token-trees section.

A run cut short goes on with `--keep-done` (the tasks --json holds are kept). Other runs of
the script (longer chains, more seeds) join the section as named checks:
`--render --json docs/trees.json --markdown docs/benchmarks.md --check NAME=OTHER.json`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

FAST_COMPILE = not {'--wall-clock', '--render'} & set(sys.argv)
if FAST_COMPILE:  # before JAX is imported: hardware-free counts only
  os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')
  if '--xla_cpu_use_fusion_emitters' not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                               ' --xla_cpu_use_fusion_emitters=false').strip()

import jax  # pylint: disable=wrong-import-position
import report_sections  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position

import specjax  # pylint: disable=wrong-import-position
from specjax import checkpoints  # pylint: disable=wrong-import-position
from specjax.bench import compiled  # pylint: disable=wrong-import-position
from specjax.bench import decodes  # pylint: disable=wrong-import-position
from specjax.bench import report  # pylint: disable=wrong-import-position
from specjax.bench import rows as bench_rows  # pylint: disable=wrong-import-position
from specjax.bench import trees as bench_trees  # pylint: disable=wrong-import-position
from specjax.checkpoints.registry import BUNDLED, DEFAULT_CHECKPOINTS  # pylint: disable=wrong-import-position
from specjax.core.figures import decode_figures  # pylint: disable=wrong-import-position
from specjax.core.sampling import SamplingConfig  # pylint: disable=wrong-import-position
from specjax.job.inputs import pad_to_bucket, tokenize  # pylint: disable=wrong-import-position

TASKS = {'ende': 'demo_', 'manpages': 'manpages_', 'manlm': 'manlm_'}
STATIC = {8: '4,1;2,1,1,1',
          16: '4,1,1,1;2,2,1,1;3,1,1,1,1;2,1,1,1,1,1,1,1',
          32: '4,1,1,1,1,1,1,1;2,2,1,1,1,1,1,1;2,2,2,1,1'}
DYNAMIC = {8: '6:4;8:2', 16: '6:4;8:2;8:4', 32: '8:4;10:4'}  # DEPTH:TOP per budget
SECTION = '## Token trees'
CHECK_FIELDS = ('tree', 'kind', 'gamma', 'temperature', 'nodes_per_call', 'tokens_per_call',
                'alpha')
GOAL = 1.25  # the project's: best tree of <= 16 nodes over the best chain, tokens per call


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--tasks', default='ende,manpages', help='of ' + ', '.join(TASKS))
  p.add_argument('--num-examples', type=int, default=64, help='first test lines of each task')
  p.add_argument('--batch-size', type=int, default=8, help='rows (slots), refilled')
  p.add_argument('--max-decode-len', type=int, default=48)
  p.add_argument('--temperatures', default='0,1')
  p.add_argument('--seeds', type=int, default=2,
                 help='decodes per setting when sampling (their counters pooled)')
  p.add_argument('--gammas', default='1,2,3,4,5,6,7,8')
  for budget in STATIC:
    p.add_argument(f'--static-{budget}', default=STATIC[budget],
                   help=f'static shapes of at most {budget} nodes, separated by ;')
    p.add_argument(f'--dynamic-{budget}', default=DYNAMIC[budget],
                   help=f'DEPTH:TOP of the dynamic trees of exactly {budget} nodes')
  p.add_argument('--json', help='the results (read back by --wall-clock); required but '
                 'with --first-child')
  p.add_argument('--markdown', help='write its "## Token trees" section into this file')
  p.add_argument('--rounds', type=int, default=3, help='interleaved wall-clock rounds')
  p.add_argument('--no-wall-clock', action='store_true', help='the counts alone')
  p.add_argument('--keep-done', action='store_true',
                 help='keep the tasks --json already holds (a run cut short goes on)')
  p.add_argument('--wall-clock', action='store_true',
                 help='(internal) time the best chain and 16-node tree of --json')
  p.add_argument('--render', action='store_true',
                 help='only write the --markdown section from --json (no decode)')
  p.add_argument('--first-child', metavar='PATH',
                 help='only the dynamic trees at T=1, first children drawn and not, to PATH')
  p.add_argument('--check', action='append', default=[], metavar='NAME=JSON',
                 help='with --render: add the rows of another run of this script (e.g. '
                 'longer chains, more seeds) to --json as a named check, shown in the section')
  return p.parse_args(argv)


def load_task(task: str, num: int):
  """(target, tp, draft, dp, inputs [num, S]) of a bundled task's first test lines."""
  prefix = TASKS[task]
  pair = BUNDLED[prefix]
  target, tp = checkpoints.load_model(prefix + 'target', DEFAULT_CHECKPOINTS[prefix + 'target'])
  draft, dp = checkpoints.load_model(prefix + 'draft', DEFAULT_CHECKPOINTS[prefix + 'draft'])
  with open(pair.test, encoding='utf-8') as f:
    records = [json.loads(line) for line in f if line.strip()][:num]
  texts = [pair.prefix + r['en'] if 'en' in r else r['inputs'] for r in records]
  inputs = tokenize(checkpoints.prompt_vocabulary(pair.vocab, target), texts, 64, True)[0]
  return target, tp, draft, dp, pad_to_bucket(inputs)


def settings(args):
  """[(label, kind, budget, tree or None, gamma or None)] of the sweep."""
  out = [(f'chain {g}', 'chain', None, None, int(g)) for g in args.gammas.split(',')]
  for budget in STATIC:
    for tree in bench_trees.parse_trees(getattr(args, f'static_{budget}')):
      if tree.num_nodes > budget:
        raise ValueError(f'{bench_trees.label(tree)} has {tree.num_nodes} nodes, over {budget}')
      out.append((bench_trees.label(tree), 'static', budget, tree, None))
    for spec in filter(None, getattr(args, f'dynamic_{budget}').split(';')):
      tree = bench_trees.parse_one(f'dynamic:{budget}:{spec}')
      out.append((bench_trees.label(tree), 'dynamic', budget, tree, None))
  return out


def pooled(outputs):
  """The stats of several decodes as one decode's rows (counters concatenated)."""
  return jax.tree.map(lambda *a: np.concatenate(a), *[o.stats for o in outputs])


def sweep_task(task: str, args) -> dict:
  target, tp, draft, dp, inputs = load_task(task, args.num_examples)
  kw = dict(max_decode_len=args.max_decode_len, slots=args.batch_size)
  reference = jax.tree.map(np.asarray, specjax.autoregressive_decode(target, tp, inputs, **kw))
  rows = []
  for temperature in (float(t) for t in args.temperatures.split(',')):
    sampling = SamplingConfig(temperature=temperature)
    seeds = range(1 if sampling.greedy else args.seeds)
    for name, kind, budget, tree, gamma in settings(args):
      compiled.free_if_needed()  # a long sweep's compiled code would exhaust the memory maps
      start = time.perf_counter()
      outputs = [jax.tree.map(np.asarray, specjax.speculative_decode(
          target, tp, draft, dp, inputs, gamma=gamma, tree=tree, sampling=sampling,
          rng=jax.random.PRNGKey(seed), **kw)) for seed in seeds]
      stats = pooled(outputs)
      if tree is not None:
        row = bench_trees.figures_row(stats, tree)
      else:
        f = decode_figures(stats)
        row = {'tree': name, 'nodes': gamma, 'depth': gamma,
               'tokens_per_call': float(f.tokens_per_call),
               'nodes_per_call': float(f.drafted_per_call),
               'accepted_per_call': float(f.accepted_per_call), 'alpha': float(f.alpha),
               'reached_depth': [float(x) for x in f.accepted_per_position],
               'target_calls': int(stats.target_calls.sum())}
      row.update(kind=kind, budget=budget, gamma=gamma, temperature=temperature,
                 seeds=len(seeds), tokens=int(sum(o.lengths.sum() for o in outputs)),
                 seconds_with_compile=time.perf_counter() - start)
      if sampling.greedy:
        row['identical_to_target'] = bool(np.array_equal(outputs[0].tokens, reference.tokens))
      rows.append(row)
      alpha = 'n/a' if row['alpha'] is None else f'{row["alpha"]:.3f}'
      print(f'{task:8s} T {temperature:.0f} {kind:7s} {name:18s} N {row["nodes"]:2d} '
            f'tok/call {row["tokens_per_call"]:.3f} nodes/call {row["nodes_per_call"]:.1f} '
            f'alpha {alpha} {row["seconds_with_compile"]:5.1f}s'
            + (f' identical {row["identical_to_target"]}' if sampling.greedy else ''),
            file=sys.stderr, flush=True)
  return {'num_examples': int(len(inputs)), 'input_width': int(inputs.shape[1]),
          'target_tokens_greedy': int(reference.lengths.sum()), 'rows': rows}


def best(rows, temperature, kind, budget=None):
  """The row of most tokens per call of a kind (and budget) at a temperature."""
  found = [r for r in rows if r['temperature'] == temperature and r['kind'] in kind
           and (budget is None or r['budget'] == budget)]
  return max(found, key=lambda r: r['tokens_per_call']) if found else None


def summary(result: dict) -> dict:
  """{task: {T: {chain, static {budget}, dynamic {budget}, best_16}}} as labels and figures."""
  out = {}
  for task, res in result['tasks'].items():
    for t in sorted({r['temperature'] for r in res['rows']}):
      chain = best(res['rows'], t, ('chain',))
      cell = {'chain': chain, 'static': {}, 'dynamic': {}}
      for budget in STATIC:
        cell['static'][budget] = best(res['rows'], t, ('static',), budget)
        cell['dynamic'][budget] = best(res['rows'], t, ('dynamic',), budget)
      cell['best_16'] = max([r for r in res['rows'] if r['temperature'] == t
                             and r['kind'] != 'chain' and r['nodes'] <= 16],
                            key=lambda r: r['tokens_per_call'])
      out.setdefault(task, {})[str(t)] = cell
  return out


def wall_clock(args) -> None:
  """Times the target alone, the best chain and the best tree of at most 16 nodes of each
  task and temperature in --json, in interleaved rounds, and adds them to the file."""
  path = pathlib.Path(args.json)
  result = json.loads(path.read_text())
  kw = dict(max_decode_len=result['max_decode_len'], slots=result['batch_size'])
  clocks = {}
  for task, cells in summary(result).items():
    target, tp, draft, dp, inputs = load_task(task, result['num_examples'])
    for t, cell in cells.items():
      sampling = SamplingConfig(temperature=float(t))
      chain, tree = cell['chain'], cell['best_16']
      shape = bench_trees.parse_one(tree['tree'])
      fns = {'target': lambda x, s=sampling: specjax.autoregressive_decode(
                 target, tp, x, sampling=s, **kw),
             'chain': lambda x, s=sampling, g=chain['gamma']: specjax.speculative_decode(
                 target, tp, draft, dp, x, gamma=g, sampling=s, **kw),
             'tree': lambda x, s=sampling, tr=shape: specjax.speculative_decode(
                 target, tp, draft, dp, x, tree=tr, sampling=s, **kw)}
      for fn in fns.values():  # compiled before any timing
        jax.block_until_ready(fn(inputs))
      timers = {name: decodes.BatchTimes(fn, [inputs]) for name, fn in fns.items()}
      times = bench_rows.interleaved_rounds(timers, args.rounds)
      per_second = {name: timer.summary()['num_tokens'] / min(times[name])
                    for name, timer in timers.items()}
      clocks.setdefault(task, {})[t] = {
          'chain': chain['tree'], 'tree': tree['tree'],
          **{f'{name}_seconds': min(x) for name, x in times.items()},
          **{f'{name}_tokens_per_second': x for name, x in per_second.items()},
          'chain_speedup': per_second['chain'] / per_second['target'],
          'tree_speedup': per_second['tree'] / per_second['target'],
          'spread': {name: bench_rows.spread(x) for name, x in times.items()}}
      print(f'{task} T {t}: ' + ', '.join(f'{n} {min(x):.2f} s' for n, x in times.items()),
            file=sys.stderr, flush=True)
  result['wall_clock'] = {'machine': report.machine_info(), 'rounds': args.rounds,
                          'xla': 'defaults (full optimisation)', 'runs': clocks}
  path.write_text(dump(result))


def _rounded(x):
  if isinstance(x, float):
    return round(x, 4)
  if isinstance(x, dict):
    return {k: _rounded(v) for k, v in x.items()}
  if isinstance(x, list):
    return [_rounded(v) for v in x]
  return x


def dump(result: dict, indent: str = '') -> str:
  """JSON of `result`, floats to 4 decimals, a dict of plain values on one line (a row)."""
  def text(x, pad):
    nested = lambda v: isinstance(v, dict) or (isinstance(v, list) and v and
                                               isinstance(v[0], dict))
    if isinstance(x, dict) and any(nested(v) for v in x.values()):
      items = [f'{pad} {json.dumps(k)}: {text(v, pad + " ")}' for k, v in x.items()]
      return '{\n' + ',\n'.join(items) + '\n' + pad + '}'
    if isinstance(x, list) and x and isinstance(x[0], dict):
      return '[\n' + ',\n'.join(f'{pad} {text(v, pad + " ")}' for v in x) + '\n' + pad + ']'
    return json.dumps(x)
  return text(_rounded(result), indent) + '\n'


def _f(x, digits=2):
  return 'n/a' if x is None else f'{x:.{digits}f}'


def markdown(result: dict, command: str) -> str:
  """The "## Token trees" section of docs/benchmarks.md."""
  m = result['machine']
  lines = [SECTION, '',
           f'Generated by `{command}` on {m["date"]} ({m["cpu_count"]} CPU cores, '
           f'{m["platform"]}; jax {m["jax"]}); not by `python -m specjax.bench`, whose '
           f'rerun keeps this section. {result["num_examples"]} first test lines of each '
           f'task, batch {result["batch_size"]} refilled (one stream), max decode length '
           f'{result["max_decode_len"]}; sampled rows pool {result["seeds"]} seeds. Tokens '
           'per target call (output tokens, EOS included, per per-row target call) is '
           f'hardware-free. Chains try gamma {result["gammas"]}; each static budget tries a few shapes of '
           'at most that many nodes (children per depth), each dynamic budget a few '
           '(depth, top) of exactly that many nodes (EAGLE-2, dynamic:N:D:K); '
           '"x chain" is tokens per call over the best chain\'s. Nodes per call: draft '
           'tokens the target verified per call (the chain\'s gamma). Every greedy decode '
           'was checked identical to the target\'s own output.', '',
           f'The goal: the best tree of at most 16 nodes makes >= {GOAL}x the best chain\'s '
           'tokens per target call.', '',
           '| task | T | best chain: tokens per call | best tree <= 16 nodes | tokens per '
           'call | x chain | goal | best tree <= 32 nodes | x chain |',
           '|---|---|---|---|---|---|---|---|---|']
  for task, cells in summary(result).items():
    for t, cell in cells.items():
      chain, tree = cell['chain'], cell['best_16']
      wide = max((r for r in result['tasks'][task]['rows'] if r['temperature'] == float(t)
                  and r['kind'] != 'chain'), key=lambda r: r['tokens_per_call'])
      ratio = tree['tokens_per_call'] / chain['tokens_per_call']
      lines.append(f'| {task} | {float(t):g} | gamma {chain["gamma"]}: '
                   f'{chain["tokens_per_call"]:.3f} | {tree["tree"]} | '
                   f'{tree["tokens_per_call"]:.3f} | {ratio:.2f} | '
                   f'{"met" if ratio >= GOAL else "not met"} | {wide["tree"]} | '
                   f'{wide["tokens_per_call"] / chain["tokens_per_call"]:.2f} |')
  lines.append('')
  for task, cells in summary(result).items():
    res = result['tasks'][task]
    for t, cell in cells.items():
      chain = cell['chain']
      base = chain['tokens_per_call']
      greedy = float(t) == 0.0
      same = [r['identical_to_target'] for r in res['rows']
              if r['temperature'] == 0.0] if greedy else []
      lines += [f'### {task}, T={float(t):g}', '',
                f'{res["num_examples"]} inputs; the target\'s greedy outputs average '
                f'{res["target_tokens_greedy"] / res["num_examples"]:.1f} tokens (EOS '
                'included), so a row ends inside its last call after a few calls.', '',
                '| setting | best | nodes per call | depth | tokens per call | x chain | '
                'alpha |', '|---|---|---|---|---|---|---|',
                f'| chain, gamma {result["gammas"]} | gamma {chain["gamma"]} | {chain["nodes_per_call"]:.0f}'
                f' | {chain["depth"]} | {base:.3f} | 1.00 | {_f(chain["alpha"], 3)} |']
      for kind in ('static', 'dynamic'):
        for budget, row in cell[kind].items():
          tried = sorted({r['tree'] for r in res['rows'] if r['kind'] == kind
                          and r['budget'] == budget})
          lines.append(
              f'| {kind} {"<=" if kind == "static" else "="} {budget} nodes ({len(tried)} '
              f'tried) | {row["tree"]} | {row["nodes_per_call"]:.0f} | {row["depth"]} | '
              f'{row["tokens_per_call"]:.3f} | {row["tokens_per_call"] / base:.2f} | '
              f'{_f(row["alpha"], 3)} |')
      lines += ['', first_depth(chain, cell['best_16'])]
      if greedy:
        lines += ['', f'All {len(same)} greedy decodes identical to the target\'s: '
                  f'{all(same)}.']
      clock = result.get('wall_clock', {}).get('runs', {}).get(task, {}).get(t)
      if clock:
        lines += ['', f'CPU wall clock ({m["cpu_count"]} shared cores, XLA defaults, fastest '
                  f'of {result["wall_clock"]["rounds"]} interleaved rounds; a wide verify '
                  f'costs more here than on an accelerator): target alone '
                  f'{clock["target_seconds"]:.2f} s; best chain (gamma '
                  f'{clock["chain"].split()[-1]}) '
                  f'{clock["chain_seconds"]:.2f} s, {clock["chain_speedup"]:.2f}x; best tree '
                  f'of <= 16 nodes ({clock["tree"]}) {clock["tree_seconds"]:.2f} s, '
                  f'{clock["tree_speedup"]:.2f}x.']
      lines.append('')
  lines += checks(result)
  lines += [f'All the settings tried, each with its figures: `{result["json"]}`.', '']
  return '\n'.join(lines)


def first_depth(chain: dict, tree: dict) -> str:
  """A line on the calls that accept at least one draft token, chain against tree."""
  a, b = chain['reached_depth'][0], tree['reached_depth'][0]
  recovered = (b - a) / max(1.0 - a, 1e-9)
  return (f'Calls that accept at least one draft token: {a:.0%} with the best chain, '
          f'{b:.0%} with the best tree of <= 16 nodes ({tree["tree"]}): its other candidates '
          f'below the root recover {recovered:.0%} of the chain\'s first-token misses.')


def checks(result: dict) -> list:
  """The section's tables of the named checks (other runs of this script, --check)."""
  lines = []
  for name, check in result.get('checks', {}).items():
    lines += [f'### Check: {name}', '', f'`{check["command"]}` ({check["seeds"]} seeds when '
              'sampling; added here by `--render --check NAME=JSON`); "x chain <= 8": tokens per call over the best chain of gamma '
              '<= 8 at that task and temperature (this run\'s where it has such chains, else '
              'the sweep\'s above).', '',
              '| task | T | setting | nodes per call | tokens per call | x chain <= 8 |',
              '|---|---|---|---|---|---|']
    for task, rows in check['rows'].items():
      for t in sorted({r['temperature'] for r in rows}):
        here = [r for r in rows if r['temperature'] == t]
        short = [r for r in here if r['kind'] == 'chain' and r['gamma'] <= 8]
        base = max(short or [r for r in result['tasks'][task]['rows'] if r['temperature'] == t
                             and r['kind'] == 'chain'], key=lambda r: r['tokens_per_call'])
        for r in here:
          lines.append(f'| {task} | {t:g} | {r["tree"]} | {r["nodes_per_call"]:.0f} | '
                       f'{r["tokens_per_call"]:.3f} | '
                       f'{r["tokens_per_call"] / base["tokens_per_call"]:.2f} |')
    lines.append('')
  return lines


def write_section(path: str, text: str) -> None:
  """Puts `text` in place of the file's SECTION (default "## Token trees"), or at its end."""
  report_sections.write_section(path, SECTION, text)


def first_child(args) -> dict:
  """Tokens per call of each dynamic tree at T=1 with drawn first children and with
  point masses only (`--first-child`), on the same inputs and seeds."""
  import functools  # pylint: disable=import-outside-toplevel
  from specjax.core import decoder, tree_draft  # pylint: disable=import-outside-toplevel
  trees = [t for _, kind, _, t, _ in settings(args) if kind == 'dynamic']
  sampling = SamplingConfig(temperature=1.0)
  grow = tree_draft.grow_dynamic
  build = decoder.build
  out = {'command': 'python ' + shlex.join(sys.argv), 'num_examples': args.num_examples,
         'batch_size': args.batch_size, 'max_decode_len': args.max_decode_len,
         'seeds': args.seeds, 'temperature': 1.0, 'tasks': {}}
  for task in args.tasks.split(','):
    target, tp, draft, dp, inputs = load_task(task, args.num_examples)
    kw = dict(max_decode_len=args.max_decode_len, slots=args.batch_size)
    rows = []
    for tree in trees:
      for drawn in (False, True):
        compiled.free_if_needed()
        decoder.build = build.__wrapped__  # programs traced anew with this growth
        tree_draft.grow_dynamic = functools.partial(grow, sample_first=drawn)
        try:
          outputs = [jax.tree.map(np.asarray, specjax.speculative_decode(
              target, tp, draft, dp, inputs, tree=tree, sampling=sampling,
              rng=jax.random.PRNGKey(seed), **kw)) for seed in range(args.seeds)]
        finally:
          tree_draft.grow_dynamic, decoder.build = grow, build
        row = bench_trees.figures_row(pooled(outputs), tree)
        row.update(first_child='drawn' if drawn else 'top-k', temperature=1.0,
                   seeds=args.seeds)
        rows.append(row)
        print(f'{task:8s} {row["tree"]:18s} {row["first_child"]:6s} tok/call '
              f'{row["tokens_per_call"]:.3f} alpha {row["alpha"]}', file=sys.stderr,
              flush=True)
    out['tasks'][task] = rows
  return out


def first_child_table(result: dict) -> str:
  """The markdown table of `first_child`'s rows: tokens per call, point masses against
  drawn first children."""
  lines = ['| task | dynamic tree | tokens per call: top-k children | drawn first child | x |',
           '|---|---|---|---|---|']
  for task, rows in result['tasks'].items():
    by = {(r['tree'], r['first_child']): r for r in rows}
    for name in dict.fromkeys(r['tree'] for r in rows):
      old, new = by[(name, 'top-k')], by[(name, 'drawn')]
      lines.append(f'| {task} | {name} | {old["tokens_per_call"]:.2f} | '
                   f'{new["tokens_per_call"]:.2f} | '
                   f'{new["tokens_per_call"] / old["tokens_per_call"]:.3f} |')
  return '\n'.join(lines)


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.first_child:
    result = first_child(args)
    pathlib.Path(args.first_child).write_text(dump(result))
    print(first_child_table(result))
    return 0
  if not args.json:
    raise SystemExit('error: --json is required (but with --first-child)')
  if args.wall_clock:
    wall_clock(args)
    return 0
  if args.render:
    result = json.loads(pathlib.Path(args.json).read_text())
    for spec in args.check:
      name, _, other = spec.rpartition('=')
      run = json.loads(pathlib.Path(other).read_text())
      result.setdefault('checks', {})[name] = {
          'command': run['command'].replace(other, '...'), 'seeds': run['seeds'],
          'rows': {task: [{k: r[k] for k in CHECK_FIELDS} for r in res['rows']]
                   for task, res in run['tasks'].items()}}
    if args.check:
      pathlib.Path(args.json).write_text(dump(result))
    write_section(args.markdown, markdown(result, result['command']))
    return 0
  settings(args)  # bad shapes fail before anything runs
  result = {'command': 'python ' + shlex.join([sys.argv[0]] + (argv or sys.argv[1:])),
            'machine': report.machine_info(), 'num_examples': args.num_examples,
            'batch_size': args.batch_size, 'max_decode_len': args.max_decode_len,
            'seeds': args.seeds, 'gammas': args.gammas, 'json': args.json, 'xla': 'lowest optimisation (counts only)', 'tasks': {}}
  done = pathlib.Path(args.json)
  if args.keep_done and done.exists():
    before = json.loads(done.read_text())
    result.update(command=before['command'], tasks=before['tasks'],
                  sweep_seconds=before.get('sweep_seconds', 0.0))
  started = time.perf_counter() - result.get('sweep_seconds', 0.0)
  for task in args.tasks.split(','):
    if task in result['tasks']:
      continue
    result['tasks'][task] = sweep_task(task, args)
    result['sweep_seconds'] = time.perf_counter() - started
    pathlib.Path(args.json).write_text(dump(result))
  if not args.no_wall_clock:
    env = {k: v for k, v in os.environ.items()
           if k not in ('JAX_DISABLE_MOST_OPTIMIZATIONS', 'XLA_FLAGS')}
    subprocess.run([sys.executable, __file__, '--wall-clock', '--json', args.json,
                    '--rounds', str(args.rounds)], env=env, check=True)
    result = json.loads(pathlib.Path(args.json).read_text())
  if args.markdown:
    write_section(args.markdown, markdown(result, result['command']))
  return 0


if __name__ == '__main__':
  sys.exit(main())
