"""python -m specjax.plan: per-device memory of T5-XXL speculative decoding on TPU meshes.

Compiles the real sharded decode (target t5_xxl, draft t5_small, gamma 7, bfloat16
activations) for each mesh, batch and decode length against shapes only, on simulated
CPU devices and, with `--tpu`, for compile-only TPU v4 chips (libtpu), and writes the
tables to `--output` (default specjax_reports/scale.md; the committed plan is docs/scale.md,
see `specjax/speed/memory_plan.py`) when the grid is done: the rows go to X.partial.json as
they are planned (`--resume` continues from them), the old files stay whole until then
(`specjax.reports`). The full grid with --tpu takes
about an hour on two CPU cores; `--quick` plans 1 and 4 chips at B 1 and 8, L 128 only.

`--speed` predicts TPU v4 speed instead: the roofline of the same programs' cost
analysis, the paper's Table 2 predicted beside measured (docs/tpu_speed.md, see
`specjax/speed`).

A decoder-only pair (`--target llama3_8b --draft llama3_2_1b`) is planned on a TPU v4-8
slice, on one TPU v5e chip and on a v5e-4, bf16 params, its prompt as the input; its tables
go to their own section of the same file (`plan_sections`), the rows to
scale_TARGET+DRAFT.json beside it.
"""
from __future__ import annotations

import os
import sys

from specjax import interrupt

if __name__ == '__main__':  # before the imports below, which take seconds
  interrupt.exit_at_once(lambda: 'the --output files are as they were; the rows done so far '
                         'are in the .partial.json beside them: add --resume to go on from them')

# The simulated devices must exist before jax starts its CPU backend (lazily, at the first
# device query), so this runs before anything below can touch one.
_DEVICES = 16
os.environ['JAX_PLATFORMS'] = 'cpu'
os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           f' --xla_force_host_platform_device_count={_DEVICES}').strip()

import argparse  # pylint: disable=g-import-not-at-top,wrong-import-position
import datetime
import functools
import importlib.util

import jax

jax.config.update('jax_platforms', 'cpu')  # plan on the host even on a TPU VM

from specjax import plan_config  # pylint: disable=wrong-import-position
from specjax import reports
from specjax import plan_sections
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules
from specjax.speed import memory_plan
from specjax.models.lm_config import LM_CONFIGS
from specjax.models.t5_config import T5_CONFIGS

FULL = dict(meshes=((1, 1), (1, 4), (1, 8), (2, 8)), batches=(1, 8, 32), lengths=(128, 256),
            param_dtypes=('float32', 'bfloat16'))
QUICK = dict(meshes=((1, 1), (1, 4)), batches=(1, 8), lengths=(128,),
             param_dtypes=('float32', 'bfloat16'))

_EXPLAIN = """\
Per-device memory of one speculative decode, planned ahead of time: `jax.jit(...).lower(
ShapeDtypeStruct...).compile().memory_analysis()` of the two sharded programs that
`speculative_decode(..., mesh=)` runs (prefill: encode + fill both caches; loop: the
while loop with the state donated), no weights loaded. Target {target}, draft {draft},
gamma {gamma}, {act} activations and caches, input length {input_len}, sampling
(temperature {temperature}); T5X's standard logical axis rules (batch->data; vocab, mlp,
heads, joined_kv->model; the draft's 6 heads divide none of the model axes here, so its
attention is replicated). A v4-8 slice is 4 chips, v4-16 is 8, v4-32 is 16. GiB:

- params: target + draft params one device holds (float32 by default; `load_model(...,
  param_dtype='bfloat16')`, `--param-dtype bfloat16`, halves it).
- caches: self-attention KV caches + cross-attention K/V of both models, per device.
- prefill / loop arg / out / temp: the two programs' `memory_analysis()` per device:
  arguments (params, inputs; the loop's also the donated state and the encoded inputs),
  outputs (the loop's state output aliases its donated argument) and XLA's scratch.
- peak / device: max over the two programs of argument + output - alias + temp (params
  are arguments of both); peak / chip adds a chip's devices. Above 32 GiB (one TPU v4
  chip's HBM) is flagged **NO**.
- B must divide by the data axis: B=1 is not planned on data=2 meshes.
"""

_CPU = """\
## Simulated CPU devices (one device = one chip)

CPU XLA has no bfloat16 matmul: it converts every bfloat16 operand to float32 and hoists
those converts of loop-invariant weights out of the loop, so its temp holds a float32
copy of the weights that TPU never makes. These rows are an upper bound; the TPU rows
above are the estimate to trust.

"""

_TPU = """\
## TPU v4, compile-only (libtpu, no TPU needed)

The same programs compiled by libtpu for TPU v4 TensorCores (`memory_plan.tpu_v4_mesh`).
Compile-only topologies expose two cores per chip (no megacore), so the mesh counts
cores: 1 chip is 1x2, 4 chips 1x8, 8 chips 1x16, 16 chips 2x16, and a chip holds its
two cores' peaks.

"""


def parse_args(argv=None) -> argparse.Namespace:
  """The plan's flags (`specjax.plan_config`), parsed."""
  return plan_config.parser(__doc__.split('\n')[0]).parse_args(argv)


def _header(args, grid, argv) -> str:
  command = ' '.join(['python -m specjax.plan'] + [a for a in argv if a != '--resume'])
  today = datetime.date.today().isoformat()
  text = (f'# Memory plan: {args.target} + {args.draft} on TPU v4\n\n'
          f'Generated by `{command}` on {today} with jax {jax.__version__} '
          f'({"quick" if args.quick else "full"} grid: '
          f'{", ".join(str(d * m) for d, m in grid["meshes"])} chips; B {grid["batches"]}; '
          f'L {grid["lengths"]}). Do not edit by hand: rerun the command.\n\n')
  return text + _EXPLAIN.format(target=args.target, draft=args.draft, gamma=args.gamma,
                                act=args.dtype, input_len=args.input_len,
                                temperature=args.temperature) + '\n'


def _tpu_meshes(shapes):
  os.environ.setdefault('TPU_ACCELERATOR_TYPE', 'v4-8')  # quiets libtpu's host probing
  os.environ.setdefault('TPU_WORKER_HOSTNAMES', 'localhost')
  return [memory_plan.tpu_v4_mesh(d * m, d) for d, m in shapes]


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  args = parse_args(argv)
  lm = args.target in LM_CONFIGS
  if args.gamma is None:
    args.gamma = plan_sections.LM_GAMMA if lm else 7
  if args.input_len is None:
    args.input_len = plan_sections.LM_PROMPT if lm else 128
  if args.speed:
    from specjax.speed import cli as speed_cli  # pylint: disable=import-outside-toplevel
    return speed_cli.main(args, argv)
  args.output = args.output or reports.default_output('scale.md')
  known = {**T5_CONFIGS, **LM_CONFIGS}
  for name in (args.target, args.draft):
    if name not in known:
      print(f'error: unknown model {name!r}; pass one of {", ".join(sorted(known))}',
            file=sys.stderr)
      return 2
  if lm != (args.draft in LM_CONFIGS):
    print('error: the target and the draft must both be decoder-only or both be T5',
          file=sys.stderr)
    return 2
  if args.tpu and importlib.util.find_spec('libtpu') is None:
    print('error: --tpu needs libtpu; pip install libtpu (no TPU needed)', file=sys.stderr)
    return 2
  grid = QUICK if args.quick else FULL
  if lm:
    grid = plan_sections.LM_QUICK if args.quick else plan_sections.LM_FULL
  if jax.device_count() < _DEVICES:
    print(f'error: {jax.device_count()} devices; run it as its own process (python -m '
          'specjax.plan) so that it can simulate 16', file=sys.stderr)
    return 2
  header = (plan_sections.header(args, grid, argv, jax.__version__) if lm
            else _header(args, grid, argv))
  rows_path = os.path.splitext(args.output)[0] + '.json'
  if lm:
    rows_path = plan_sections.rows_path(args.output, args.target, args.draft)
  refused = reports.unwritable(args.output)
  if refused:
    refused = f'error: --output {args.output}: {refused}'
  else:
    refused = reports.downgrade_error(rows_path, args.output, tpu=args.tpu, quick=args.quick)
  if refused:
    print(refused, file=sys.stderr)
    return 2
  os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
  tables = {'cpu': [], 'tpu': []}
  old = reports.read_rows(rows_path) if args.resume else None
  if old:
    tables = {k: [memory_plan.PlanRow.from_json(r) for r in v] for k, v in old.items()
              if k in tables}

  def rows_json():
    return {k: [r.to_json() for r in v] for k, v in tables.items()}

  def write(backend, row):
    tables[backend].append(row)
    reports.write_json(reports.partial_path(rows_path), rows_json())
    print(f'{backend} {row.chips} chips {row.mesh[0]}x{row.mesh[1]} {row.param_dtype} '
          f'B={row.batch} L={row.max_decode_len}: '
          f'{row.error or f"{row.chip_peak / memory_plan.GIB:.2f} GiB a chip"} '
          f'({row.compile_seconds:.0f} s)', file=sys.stderr, flush=True)

  def render():
    text = header
    intros = ((('tpu', plan_sections.LM_TPU), ('cpu', plan_sections.LM_CPU)) if lm
              else (('tpu', _TPU), ('cpu', _CPU)))
    for key, intro in intros:
      if tables[key]:
        summary = plan_sections.summarize if lm else memory_plan.summarize
        text += (intro + summary(tables[key]) + '\n' +
                 memory_plan.to_markdown(tables[key]) + '\n')
    plan_sections.write(args.output, text.rstrip('\n') + '\n',
                        f'{args.target}+{args.draft}' if lm else None)

  common = dict(target=known[args.target], draft=known[args.draft],
                gamma=args.gamma, input_len=args.input_len, activation_dtype=args.dtype,
                temperature=args.temperature, rules=axis_rules.STANDARD_RULES)
  if lm:  # each mesh its own chip: (mesh, devices per chip, HBM per chip)
    runs = [('cpu', plan_sections.cpu_meshes(grid['meshes']))]
    if args.tpu:
      runs.insert(0, ('tpu', plan_sections.tpu_meshes(grid['meshes'])))
  else:
    runs = [('cpu', [(mesh_lib.make_mesh(shape=s), 1, memory_plan.TPU_V4_HBM)
                     for s in grid['meshes']])]
    if args.tpu:
      runs.insert(0, ('tpu', [(m, 2, memory_plan.TPU_V4_HBM)
                              for m in _tpu_meshes(grid['meshes'])]))
  for backend, meshes in runs:
    for mesh, per_chip, hbm in meshes:
      memory_plan.plan_grid([mesh], grid['batches'], grid['lengths'], grid['param_dtypes'],
                            on_row=functools.partial(write, backend),
                            done=[r.key for r in tables[backend]],
                            devices_per_chip=per_chip, hbm=hbm, **common)
  render()
  reports.write_json(rows_path, rows_json())
  if os.path.exists(reports.partial_path(rows_path)):
    os.unlink(reports.partial_path(rows_path))
  print(f'wrote {args.output} and {rows_path}', file=sys.stderr)
  return 0


if __name__ == '__main__':
  interrupt.finish(main())
