"""Compile time and cost of scanned layers against unrolled ones, in one run on one machine.

    python scripts/scan_compile_times.py --json docs/scan_compile.json \\
        --markdown docs/tpu_speed.md   # needs libtpu, no TPU
    python scripts/scan_compile_times.py --cpu-only --json X.json         # the CPU part alone

Two parts, each compiling the same programs, unrolled then scanned
(`T5Config.scan_layers`), interleaved over --rounds rounds (a slow spell of a shared
machine then hits both), keeping each program's fastest compile:
- 'tpu': T5-XXL's verify of K = 9 tokens and its one-token step, and t5_small's step
  (the draft's), compiled for one TPU v4 chip by libtpu (compile-only, bfloat16, B = 1 and
  8, S = 128, L = 128; `specjax.speed.programs`). With each, what one call costs:
  - bytes accessed and flops from XLA's cost analysis. It counts a loop's body once, so
    the scanned figures are those of the scanned model with its loop unrolled
    (`T5Config.scan_unroll` = L, compiled once for its costs): the same body, the same
    slices of the stacked params and caches, every layer counted;
  - TPU's own estimate of the call's time, the sum of the `estimated_cycles` libtpu's
    cost model gives each operation of the compiled program (`estimated_cycles`), the
    scanned loop's body counted L times;
  and the same programs of the model cut to one encoder and one decoder layer (ONE_LAYER,
  unrolled): what compiling costs besides the layers, the floor of the scanned compile;
- 'slice' (--slice-chips, default 4: v4-8): compile times alone of T5-XXL's encoder, step
  and verify, and of one loop iteration of the speculative decode (t5_small's chain of 7,
  the verify, the acceptance; `programs.program_fns`), batch 8, sharded model-parallel
  over the slice's cores;
- 'cpu': the bundled demo pair's whole speculative decode (`speculative_decode` at
  gamma 4, batch 8, the 8 sample sentences' shapes), lowered and compiled on this CPU.
No program runs: only compile times and compile-time costs are measured.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_sections  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TPU_PROGRAMS = (('t5_xxl', 'verify', 9), ('t5_xxl', 'step', 1), ('t5_small', 'step', 1))


# On a slice: the target's encoder, step and verify, and one whole loop iteration (the
# draft's chain of 7, the verify of 8 tokens and the acceptance).
SLICE_PROGRAMS = (('t5_xxl', 'encode', 0), ('t5_xxl', 'step', 1), ('t5_xxl', 'verify', 9),
                  ('t5_xxl+t5_small', 'iteration', 7))
SLICE_BATCH = 8
LAYOUTS = ('unrolled', 'scanned', 'scanned, loop unrolled')
# The same model with one encoder and one decoder layer, unrolled (TPU part): what the
# program costs to compile besides its layers, the floor scanning cannot go below.
ONE_LAYER = 'one layer'
LAYERS = {'t5_xxl': 24, 't5_small': 8}  # decoder layers
_CYCLES = re.compile(r'"estimated_cycles":"(\d+)"')
_COMPUTATION = re.compile(r'^(?:ENTRY )?%([\w.\-]+) .*\{$')
_WHILE_BODY = re.compile(r' while\(.*?body=%([\w.\-]+)')


def _configs(layout: str):
  """(target, draft) configs of a layout."""
  from specjax.models.t5_config import t5_small, t5_xxl  # pylint: disable=import-outside-toplevel
  if layout == 'unrolled':
    return t5_xxl, t5_small
  if layout == ONE_LAYER:
    return tuple(c.replace(num_encoder_layers=1, num_decoder_layers=1) for c in (t5_xxl, t5_small))
  unroll = lambda c: c.num_decoder_layers if layout == LAYOUTS[2] else 1
  return tuple(c.replace(scan_layers=True, scan_unroll=unroll(c)) for c in (t5_xxl, t5_small))


def estimated_cycles(hlo_text: str, layers: int) -> int:
  """TPU's estimate of one call of a compiled program: the `estimated_cycles` of every
  operation (libtpu writes them into each operation's backend config), the heaviest while
  loop's body (the scanned layers) counted `layers` times and the rest once.

  Args:
    hlo_text: the compiled program's text (`compiled.as_text()`).
    layers: L, the scanned layers' count (1: a program without a loop over them).
  """
  computations, name = {}, None
  for line in hlo_text.splitlines():
    start = _COMPUTATION.match(line)
    if start:
      name = start.group(1)
      computations[name] = 0
    elif name is not None:
      computations[name] += sum(int(c) for c in _CYCLES.findall(line))
  bodies = [computations.get(b, 0) for b in _WHILE_BODY.findall(hlo_text)]
  return sum(computations.values()) + (layers - 1) * max(bodies, default=0)


def _compile_fresh(fn, args, donate=()):
  """`programs.compile_program` with JAX's in-memory caches emptied first (a program
  compiled before in this process would otherwise come back from them); the compiled
  program's text is kept in `_compile_fresh.text`."""
  from specjax.speed import programs  # pylint: disable=import-outside-toplevel
  jax.clear_caches()
  start = time.perf_counter()
  compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
  seconds = time.perf_counter() - start
  _compile_fresh.text = compiled.as_text()
  return programs.cost_of(compiled), seconds


def tpu_part(rounds: int, batches) -> list:
  """Rows {model, program, tokens, batch, layout, compile_seconds, bytes, flops, cycles}
  of the TPU programs, the fastest of `rounds` compiles each (the loop-unrolled scan once:
  it is there for its costs)."""
  from specjax.speed import cli, programs  # pylint: disable=import-outside-toplevel
  cli.prepare_tpu()
  mesh = cli.Backend(cpu=False).mesh(1)
  best = {}
  for round_ in range(rounds):
    for batch in batches:
      for layout in LAYOUTS + (ONE_LAYER,):
        if round_ and layout == LAYOUTS[2]:
          continue
        target, draft = _configs(layout)

        def keep(row, layout=layout, batch=batch):
          key = (row.model, row.program, row.tokens, batch, layout)
          layers = LAYERS[row.model] if layout == 'scanned' else 1
          old = best.get(key)
          if old is None or row.compile_seconds < old['compile_seconds']:
            best[key] = dict(model=row.model, program=row.program, tokens=row.tokens,
                             batch=batch, layout=layout, compile_seconds=row.compile_seconds,
                             bytes=row.bytes, flops=row.flops,
                             cycles=estimated_cycles(_compile_fresh.text, layers))
          print(f'tpu {key}: {row.compile_seconds:.1f} s, {row.bytes / 1e6:,.0f} MB',
                file=sys.stderr, flush=True)

        programs.measure_pair(
            target, draft, batch=batch, input_len=128, max_decode_len=128, mesh=mesh,
            greedy=True, only=lambda m, p, k: (m, p, k) in TPU_PROGRAMS, on_row=keep,
            compile_fn=_compile_fresh)
  return list(best.values())


def slice_part(rounds: int, chips: int) -> list:
  """Rows {model, program, tokens, batch, layout, chips, compile_seconds} of T5-XXL's
  programs sharded over the cores of a TPU v4 slice of `chips` chips (model-parallel, as
  T5-XXL is served), batch 8: the fastest of `rounds` compiles each."""
  from specjax.speed import cli, programs  # pylint: disable=import-outside-toplevel
  mesh = cli.Backend(cpu=False).mesh(chips)
  best = {}
  for _ in range(rounds):
    for layout in LAYOUTS[:2]:
      target, draft = _configs(layout)

      def keep(row, layout=layout):
        key = (row.model, row.program, row.tokens, layout)
        if key not in best or row.compile_seconds < best[key]['compile_seconds']:
          best[key] = dict(model=row.model, program=row.program, tokens=row.tokens,
                           batch=SLICE_BATCH, layout=layout, chips=chips,
                           compile_seconds=row.compile_seconds)
        print(f'v4 {chips} chips {key}: {row.compile_seconds:.1f} s', file=sys.stderr,
              flush=True)

      programs.measure_pair(
          target, draft, batch=SLICE_BATCH, input_len=128, max_decode_len=128, mesh=mesh,
          greedy=True, only=lambda m, p, k: (m, p, k) in SLICE_PROGRAMS, on_row=keep,
          compile_fn=_compile_fresh)
  return list(best.values())


def cpu_part(rounds: int) -> list:
  """Rows {program, layout, compile_seconds} of the demo pair's whole decode on this CPU,
  the fastest of `rounds` compiles each."""
  import numpy as np  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS  # pylint: disable=import-outside-toplevel
  from specjax.core import api  # pylint: disable=import-outside-toplevel
  from specjax.core.sampling import SamplingParams  # pylint: disable=import-outside-toplevel
  from specjax.models import scan  # pylint: disable=import-outside-toplevel

  pair = {name: checkpoints.load_model(name, DEFAULT_CHECKPOINTS[name])
          for name in ('demo_target', 'demo_draft')}
  inputs = np.zeros((8, 32), np.int32)
  inputs[:, :12] = 5
  best = {}
  for _ in range(rounds):
    for layout in ('unrolled', 'scanned'):
      models = []
      for name in ('demo_target', 'demo_draft'):
        model, params = pair[name]
        if layout == 'scanned':
          model, params = scan.as_scanned(model, params)
        models += [model, params]
      target, tp, draft, dp = models
      sampling = specjax.SamplingConfig()
      decoder = api.decoder_of(target, draft, gamma=4, max_decode_len=64, sampling=sampling,
                               rows=8)
      args = (tp, dp, jnp.asarray(inputs), jnp.int32(8), jnp.arange(8, dtype=jnp.int32),
              jax.random.PRNGKey(0), SamplingParams.of(sampling, 8))
      jax.clear_caches()
      start = time.perf_counter()
      jax.jit(decoder.whole).lower(*args).compile()
      seconds = time.perf_counter() - start
      key = ('decode', layout)
      best[key] = min(best.get(key, float('inf')), seconds)
      print(f'cpu {key}: {seconds:.1f} s', file=sys.stderr, flush=True)
  return [dict(program=p, layout=l, compile_seconds=s) for (p, l), s in best.items()]


SECTION = '## Scanned layers: compile time and cost'


def section(data: dict) -> str:
  """The docs section of a run's JSON: compile seconds, bytes and flops, scanned against
  unrolled, per program and batch."""
  tpu = {(r['model'], r['program'], r['tokens'], r['batch'], r['layout']): r
         for r in data.get('tpu', [])}
  cpu = {r['layout']: r['compile_seconds'] for r in data['cpu']}
  lines = [SECTION, '',
           f'`python scripts/scan_compile_times.py --json docs/scan_compile.json --markdown '
           f'docs/tpu_speed.md` ({data["date"]}, jax {data["jax"]}, the fastest of '
           f'{data["rounds"]} interleaved compiles of each program on this 2-core CPU). '
           'Scanned layers (`--scan-layers`, `T5Config.scan_layers`) put one layer body in '
           'the program instead of L copies, with the same output token for token.', '']
  if tpu:
    lines += ['Compile-only on one TPU v4 chip (libtpu), T5-XXL (24 decoder layers) and '
              't5_small (8), bfloat16, S = 128, L = 128, JAX\'s in-memory caches emptied '
              'before each compile. Per call: bytes and flops by XLA\'s cost analysis, which '
              'counts a loop\'s body once, so the scanned figures are those of the scanned '
              'model with its loop unrolled (`scan_unroll` = L: the same body and slices, '
              'every layer counted); and TPU\'s own estimate of the call\'s time, the sum '
              'of the cycles libtpu\'s cost model gives each operation of the compiled '
              'program, the scanned body counted L times.', '',
              '| program | B | compile, unrolled (s) | compile, scanned (s) | x faster | '
              'bytes, unrolled (MB) | bytes, scanned (MB) | bytes ratio | flops ratio | '
              'estimated time ratio |',
              '|---|---|---|---|---|---|---|---|---|---|']
    for model, program, tokens in TPU_PROGRAMS:
      for batch in sorted({k[3] for k in tpu}):
        key = (model, program, tokens, batch)
        if any(key + (layout,) not in tpu for layout in LAYOUTS):
          continue
        u, sc, call = (tpu[key + (layout,)] for layout in LAYOUTS)
        name = f'{model} {program}' + (f' K={tokens}' if program == 'verify' else '')
        lines.append(
            f'| {name} | {batch} | {u["compile_seconds"]:.1f} | {sc["compile_seconds"]:.1f} | '
            f'{u["compile_seconds"] / sc["compile_seconds"]:.1f} | {u["bytes"] / 1e6:,.0f} | '
            f'{call["bytes"] / 1e6:,.0f} | {call["bytes"] / u["bytes"]:.3f} | '
            f'{call["flops"] / u["flops"]:.3f} | {sc["cycles"] / u["cycles"]:.3f} |')
    lines.append('')
    lines += floor_lines(tpu)
  sliced = {(r['model'], r['program'], r['tokens'], r['layout']): r
            for r in data.get('slice', [])}
  if sliced:
    chips = data['slice'][0]['chips']
    lines += [f'Compile-only on a TPU v4 slice of {chips} chips ({2 * chips} cores, '
              f'model-parallel: T5-XXL\'s params and caches sharded over heads and MLP, as '
              f'T5-XXL is served), batch {SLICE_BATCH}: T5-XXL\'s encoder, step and verify, '
              'and one loop iteration of the speculative decode (t5_small\'s chain of 7, '
              'the verify of 8 tokens, the acceptance), t5_small scanned with T5-XXL. The '
              'partitioner works on every operation of the program, so a program of one '
              'layer body gains more here than on one chip.', '',
              '| program | compile, unrolled (s) | compile, scanned (s) | x faster |',
              '|---|---|---|---|']
    for model, program, tokens in SLICE_PROGRAMS:
      key = (model, program, tokens)
      if any(key + (layout,) not in sliced for layout in LAYOUTS[:2]):
        continue
      u, sc = (sliced[key + (layout,)]['compile_seconds'] for layout in LAYOUTS[:2])
      name = f'{model} {program}' + {'verify': f' K={tokens}',
                                     'iteration': f' gamma {tokens}'}.get(program, '')
      lines.append(f'| {name} | {u:.1f} | {sc:.1f} | {u / sc:.1f} |')
    lines.append('')
  if cpu:
    lines.append(f'On this CPU the bundled demo pair (4 and 2 layers deep) compiles its whole '
                 f'speculative decode (gamma 4, batch 8) in {cpu["unrolled"]:.1f} s unrolled '
                 f'and {cpu["scanned"]:.1f} s scanned: with so few layers most of the '
                 f'program is the loop around them.')
  return '\n'.join(lines) + '\n'


def floor_lines(tpu: dict) -> list:
  """The section's lines on the compile floor: each program of one layer (ONE_LAYER)
  beside the unrolled and scanned ones; none where the run has no one-layer rows.

  Args:
    tpu: {(model, program, tokens, batch, layout): row} of the TPU part.
  """
  rows = []
  for model, program, tokens in TPU_PROGRAMS:
    for batch in sorted({k[3] for k in tpu}):
      key = (model, program, tokens, batch)
      if all(key + (layout,) in tpu for layout in (*LAYOUTS[:2], ONE_LAYER)):
        rows.append((model, program, tokens, batch) + tuple(
            tpu[key + (layout,)]['compile_seconds'] for layout in (*LAYOUTS[:2], ONE_LAYER)))
  if not rows:
    return []
  xxl = [r for r in rows if r[0] == 't5_xxl']
  ceiling = [u / one for *_, u, _, one in xxl]
  above = [sc / one for *_, sc, one in xxl]
  lines = [f'The compile floor: the same programs of the model cut to one encoder and one '
           f'decoder layer (unrolled), in the same rounds. T5-XXL of one layer compiles only '
           f'{min(ceiling):.1f}-{max(ceiling):.1f}x faster than its 24 layers unrolled: the '
           'rest of the program (embeddings, logits, the compiler\'s fixed passes) costs '
           f'{1 / max(ceiling):.0%}-{1 / min(ceiling):.0%} of the unrolled compile, and no '
           'layout of the layers can gain more than that on one chip. The scanned program '
           f'compiles in {min(above):.2f}-{max(above):.2f}x the one-layer time: its layers '
           'cost about what one layer costs.', '',
           '| program | B | compile, unrolled (s) | compile, one layer (s) | compile, scanned '
           '(s) | unrolled / one layer | scanned / one layer |', '|---|---|---|---|---|---|---|']
  for model, program, tokens, batch, u, sc, one in rows:
    name = f'{model} {program}' + (f' K={tokens}' if program == 'verify' else '')
    lines.append(f'| {name} | {batch} | {u:.1f} | {one:.1f} | {sc:.1f} | {u / one:.1f} | '
                 f'{sc / one:.2f} |')
  return lines + ['']


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--json', required=True, help='write the rows here')
  parser.add_argument('--rounds', type=int, default=2, help='compiles of each program')
  parser.add_argument('--batches', default='1,8', help='TPU batch sizes')
  parser.add_argument('--cpu-only', action='store_true', help='skip the TPU part')
  parser.add_argument('--slice-chips', type=int, default=4,
                      help='also compile on a TPU v4 slice of this many chips (0: not)')
  parser.add_argument('--markdown', help='put the section in this report (docs/tpu_speed.md)')
  return parser.parse_args(argv)


def main(argv=None) -> int:
  args = parse_args(argv)
  if not args.cpu_only:  # libtpu reads its flags once, when JAX first starts its backends
    from specjax.speed import cli  # pylint: disable=import-outside-toplevel
    cli.prepare_tpu()
  out = {'date': time.strftime('%Y-%m-%d'), 'jax': jax.__version__, 'rounds': args.rounds,
         'cpu': cpu_part(args.rounds)}
  if not args.cpu_only:
    out['tpu'] = tpu_part(args.rounds, [int(b) for b in args.batches.split(',')])
    if args.slice_chips:
      out['slice'] = slice_part(args.rounds, args.slice_chips)
  with open(args.json + '.tmp', 'w') as f:
    json.dump(out, f, indent=1)
  os.replace(args.json + '.tmp', args.json)
  if args.markdown:
    report_sections.write_section(args.markdown, SECTION, section(out))
  return 0


if __name__ == '__main__':
  sys.exit(main())
