"""`python -m specjax.plan --speed`: the grid of programs compiled, costed and reported.

Compiles, for compile-only TPU v4 (libtpu, no TPU; `--cpu` uses this machine's CPU
instead, as the `--quick` path does where libtpu is absent), every program of
`programs.measure_pair` over the grid below and the token trees of `programs.measure_trees`
(`Grid.trees`), the excess-traffic steps of `traffic`, and
real T5X's decode step where T5X imports; keeps every row in X.partial.json as it is
measured (`--resume` continues an interrupted run) and, when the grid is done, renders the
report (`report.render`) to `--output` (default specjax_reports/tpu_speed.md, see
`specjax.reports`; the committed one is docs/tpu_speed.md) and its rows beside it.
"""
from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import os
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import jax

from specjax import reports
from specjax.core.state import LoopConfig
from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import programs, report, t5x_peer, traffic
from specjax.speed.roofline import V4_CHIP, V4_CORE, Device

# libtpu's default places weights in CMEM (TPU v4's 128 MiB on-chip memory) behind async
# copies; its cost analysis then counts those copies as accesses too and returns a negative
# optimal_seconds. Without CMEM every byte accessed is an HBM byte.
TPU_FLAGS = '--xla_tpu_cmem_memory_space_assignment=false'


@dataclasses.dataclass(frozen=True)
class Setting:
  """One (mesh, B, S) of the grid.

  Attributes:
    chips: 1 (one chip: one compile-only core standing for the chip) or 4 (v4-8: 8 cores).
    batch: B.
    input_len: S.
    modes: sampling modes compiled (True greedy, False temperature sampling).
    drafts: the drafts planned here (None: all of the pair's).
  """

  chips: int
  batch: int
  input_len: int
  modes: Tuple[bool, ...] = (True, False)
  drafts: Optional[Tuple[str, ...]] = None


@dataclasses.dataclass(frozen=True)
class Trees:
  """The token-tree programs of one pair (`programs.measure_trees`: greedy, one chip).

  Attributes:
    target: the target's registry name.
    draft: the draft's.
    batches: the B planned.
    shapes: the static trees, children per depth (one per node count N).
  """

  target: str
  draft: str
  batches: Tuple[int, ...]
  shapes: Tuple[Tuple[int, ...], ...] = programs.TREE_SHAPES


@dataclasses.dataclass(frozen=True)
class Grid:
  """What one run compiles.

  Attributes:
    pairs: (target, (drafts...), (settings...)) registry names and their (mesh, B, S).
    max_decode_len: L.
    traffic: (model, K, B) decode steps of the excess-traffic table.
    peers: (model, B, S) T5X decode steps (one chip).
    tasks: task -> S of its predictions (batch 1, one chip).
    trees: the token-tree programs (at the first task's S).
  """

  pairs: Tuple[Tuple[str, Tuple[str, ...], Tuple[Setting, ...]], ...]
  max_decode_len: int
  traffic: Tuple[Tuple[str, int, int], ...]
  peers: Tuple[Tuple[str, int, int], ...]
  tasks: Tuple[Tuple[str, int], ...]
  trees: Tuple[Trees, ...] = ()

  def settings(self, target: str) -> Tuple[Setting, ...]:
    """The settings planned for a target."""
    return next(s for t, _, s in self.pairs if t == target)


_STEPS = tuple((m, k, 1) for m in ('t5_small', 't5_xxl', 't5_1_0_small', 't5_1_0_11b')
               for k in (1, 8)) + (('t5_xxl', 1, 32), ('t5_xxl', 8, 32))
_GREEDY = (True,)
FULL = Grid(
    pairs=(('t5_xxl', ('t5_small', 't5_base', 't5_large'),
            (Setting(1, 1, 128), Setting(1, 8, 128, _GREEDY), Setting(1, 32, 128, _GREEDY),
             Setting(4, 1, 128, _GREEDY, ('t5_small',)),
             Setting(4, 8, 128, _GREEDY, ('t5_small',)),
             Setting(4, 32, 128, _GREEDY, ('t5_small',)))),
           ('t5_1_0_11b', ('t5_1_0_small', 't5_1_0_base', 't5_1_0_large'),
            (Setting(1, 1, 128),))),
    max_decode_len=128, traffic=_STEPS,
    peers=(('t5_xxl', 1, 128), ('t5_xxl', 8, 128), ('t5_xxl', 32, 128),
           ('t5_1_0_11b', 1, 128), ('t5_small', 1, 128)),
    tasks=(('ende', 128), ('cnndm', 128)),
    trees=(Trees('t5_xxl', 't5_small', (1, 8)),))
QUICK = Grid(pairs=(('t5_tiny', ('t5_tiny_draft',), (Setting(1, 1, 8),)),),
             max_decode_len=8, traffic=(('t5_tiny', 1, 1), ('t5_tiny', 8, 1)),
             peers=(('t5_tiny', 1, 8),), tasks=(('ende', 8), ('cnndm', 8)),
             trees=(Trees('t5_tiny', 't5_tiny_draft', (1,), ((2, 1, 1, 1),)),))


class Backend:
  """Where programs compile: compile-only TPU v4 cores, or this machine's CPU."""

  def __init__(self, cpu: bool):
    self.cpu = cpu
    self.name = 'cpu' if cpu else 'tpu'
    self._meshes = {}

  def mesh(self, chips: int) -> jax.sharding.Mesh:
    """One chip: a 1 x 1 mesh of one device; 4 chips (v4-8): the 8 cores, model-parallel."""
    if chips not in self._meshes:
      if self.cpu:
        if chips != 1:
          raise ValueError('the CPU backend plans one device only; drop --cpu for v4-8')
        self._meshes[chips] = programs.one_device_mesh(jax.devices('cpu')[0])
      else:
        from specjax.speed import memory_plan  # pylint: disable=import-outside-toplevel
        cores = memory_plan.tpu_v4_mesh(max(chips, 1))
        self._meshes[chips] = (programs.one_device_mesh(cores.devices.flat[0]) if chips == 1
                               else cores)
    return self._meshes[chips]

  @staticmethod
  def device(chips: int) -> Device:
    """The hardware one device of the mesh stands for."""
    return V4_CHIP if chips == 1 else V4_CORE


def prepare_tpu() -> None:
  """Environment libtpu reads when it starts (before the first topology is built)."""
  os.environ.setdefault('TPU_ACCELERATOR_TYPE', 'v4-8')  # quiets libtpu's host probing
  os.environ.setdefault('TPU_WORKER_HOSTNAMES', 'localhost')
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')  # compile-only: no chip to share
  flags = os.environ.get('LIBTPU_INIT_ARGS', '')
  if TPU_FLAGS not in flags:
    os.environ['LIBTPU_INIT_ARGS'] = (flags + ' ' + TPU_FLAGS).strip()


RECOMPILED = 'recompiled'  # the Store's kind of rows compiled again (see Store.recompiled)
# The report's numbered sections, some written on some runs only. A rerun keeps every
# other section of the report (scripts/tpu_head_cost.py writes one), at the end.
OWN = tuple(f'## {n}. ' for n in range(1, 10))


class Store:
  """The rows of a run, written to X.partial.json after each one (resumable); `finish`
  replaces X.json with them."""

  def __init__(self, path: str, resume: bool):
    self.path = path
    self.partial = reports.partial_path(path)
    self.data = {'programs': [], 'traffic': [], 'peers': []}
    old = reports.read_rows(path) if resume else None
    if old:
      self.data.update({k: v for k, v in old.items() if k in self.data or k == RECOMPILED})

  def merge(self, path: str) -> None:
    """Adds the rows of another run's .json (a run of other --targets or --chips)."""
    with open(path, encoding='utf-8') as f:
      other = json.load(f)
    for kind in self.data:
      self.data[kind] += other.get(kind, [])

  def programs(self) -> Dict[tuple, programs.ProgramRow]:
    return programs.rows_by_key(programs.ProgramRow.from_json(r)
                                for r in self.data['programs'] + self.data['peers'])

  def recompiled(self) -> Dict[tuple, programs.ProgramRow]:
    """Programs of the grid compiled again beside rows added later (the chain beside the
    token trees: `scripts/tpu_tree_speed.py --check`), by key; not in `programs`."""
    return programs.rows_by_key(programs.ProgramRow.from_json(r)
                                for r in self.data.get(RECOMPILED, []))

  def traffic(self) -> List[traffic.StepTraffic]:
    return [traffic.StepTraffic.from_json(r) for r in self.data['traffic']]

  def add(self, kind: str, row) -> None:
    self.data.setdefault(kind, []).append(row.to_json())
    reports.write_json(self.partial, self.data)

  def finish(self, summary: dict, run: dict) -> None:
    """Writes the rows with the report's summary and what ran them to X.json, whole, and
    drops the partial file."""
    reports.write_json(self.path, dict(self.data, summary=summary, run=run))
    if os.path.exists(self.partial):
      os.unlink(self.partial)


def _log(text: str) -> None:
  print(text, file=sys.stderr, flush=True)


def run_grid(grid: Grid, backend: Backend, store: Store,
             targets: Optional[Sequence[str]] = None, chips: Optional[int] = None) -> None:
  """Measures every program of the grid (of `targets` and meshes of `chips` only, where
  given) not yet in the store; the excess-traffic steps and T5X's only when neither is."""
  done = set(store.programs())
  for target, drafts, settings in grid.pairs:
    if targets and target not in targets:
      continue
    for setting in settings:
      if chips and setting.chips != chips:
        continue
      mesh = backend.mesh(setting.chips)
      for draft in setting.drafts or drafts:
        for greedy in setting.modes:
          def on_row(row):
            store.add('programs', row)
            _log(f'{backend.name} {row.mesh[0]}x{row.mesh[1]} B={row.batch} '
                 f'S={row.input_len} {"greedy" if row.greedy else "sampled"} {row.model} '
                 f'{row.program} {row.tokens}: {row.bytes / 1e9:.3f} GB '
                 f'{row.flops / 1e9:.2f} GFLOP ({row.compile_seconds:.0f} s)')
          rows = programs.measure_pair(
              T5_CONFIGS[target], T5_CONFIGS[draft], batch=setting.batch,
              input_len=setting.input_len, max_decode_len=grid.max_decode_len, mesh=mesh,
              greedy=greedy, done=done, on_row=on_row)
          done.update(r.key for r in rows)
          jax.clear_caches()  # compiled XXL programs add up to gigabytes of host memory
  run_trees(grid, backend, store, targets, chips, done)
  if targets or chips:
    return
  cache_len = LoopConfig(gamma=max(programs.ITERATION_GAMMAS),
                                  max_decode_len=grid.max_decode_len).width(1)
  measured = {(t.model, t.tokens, t.batch) for t in store.traffic()}
  for model, tokens, batch in grid.traffic:
    if (model, tokens, batch) in measured:
      continue
    row = traffic.measure_step(T5_CONFIGS[model], tokens=tokens, batch=batch,
                               input_len=grid.tasks[0][1], cache_len=cache_len,
                               device=backend.mesh(1).devices.flat[0])
    store.add('traffic', row)
    _log(f'{backend.name} step {model} K={tokens} B={batch}: {row.accessed / 1e9:.3f} GB '
         f'accessed, {row.needed / 1e9:.3f} GB needed ({row.ratio:.2f}x)')
  if not t5x_peer.available():
    _log('real T5X is not installed: its decode step is left out (bash '
         '../shared/t5x/install.sh, or T5X\'s own instructions)')
    return
  mesh = backend.mesh(1)
  for model, batch, input_len in grid.peers:
    if t5x_peer.peer_key(model, batch, input_len, grid.max_decode_len, (1, 1)) in done:
      continue
    row = t5x_peer.measure_t5x_step(T5_CONFIGS[model], batch=batch, input_len=input_len,
                                    max_decode_len=grid.max_decode_len, mesh=mesh)
    store.add('peers', row)
    _log(f'{backend.name} T5X step {model} B={batch} S={input_len}: {row.bytes / 1e9:.3f} GB '
         f'{row.flops / 1e9:.2f} GFLOP')
    jax.clear_caches()


def run_trees(grid: Grid, backend: Backend, store: Store,
              targets: Optional[Sequence[str]] = None, chips: Optional[int] = None,
              done: Optional[set] = None) -> None:
  """Measures the token-tree programs of the grid (one chip, greedy) not yet in the store
  (of `targets` only, and none where `chips` is not 1)."""
  if chips and chips != 1:
    return
  done = set(store.programs()) if done is None else done
  mesh = backend.mesh(1)
  s = grid.tasks[0][1]
  for trees in grid.trees:
    if targets and trees.target not in targets:
      continue
    for batch in trees.batches:
      def on_row(row):
        store.add('programs', row)
        _log(f'{backend.name} 1x1 B={row.batch} S={row.input_len} greedy {row.model} '
             f'{row.program} N={row.tokens}: {row.bytes / 1e9:.3f} GB '
             f'{row.flops / 1e9:.2f} GFLOP ({row.compile_seconds:.0f} s)')
      rows = programs.measure_trees(
          T5_CONFIGS[trees.target], T5_CONFIGS[trees.draft], batch=batch, input_len=s,
          max_decode_len=grid.max_decode_len, mesh=mesh, shapes=trees.shapes, done=done,
          on_row=on_row)
      done.update(r.key for r in rows)
      jax.clear_caches()


def _versions(backend: Backend) -> str:
  text = f'jax {jax.__version__}'
  if not backend.cpu:
    from importlib import metadata  # pylint: disable=import-outside-toplevel
    text += f', libtpu {metadata.version("libtpu")}'
  return text


def main(args, argv: Sequence[str]) -> int:
  """Runs `--speed` with the parsed plan arguments (see `specjax.plan.parse_args`)."""
  has_libtpu = importlib.util.find_spec('libtpu') is not None
  cpu = args.cpu or (args.quick and not has_libtpu)
  if not cpu and not has_libtpu:
    print('error: --speed compiles for TPU v4 with libtpu; pip install libtpu (no TPU '
          'needed), or add --quick --cpu', file=sys.stderr)
    return 2
  if not cpu:
    prepare_tpu()
  grid = QUICK if args.quick else FULL
  output = args.output or reports.default_output('tpu_speed.md')
  rows_path = os.path.splitext(output)[0] + '.json'
  refused = reports.unwritable(output)
  if refused:
    refused = f'error: --output {output}: {refused}'
  else:
    refused = reports.downgrade_error(rows_path, output, tpu=not cpu, quick=args.quick)
  if refused:
    print(refused, file=sys.stderr)
    return 2
  os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
  store = Store(rows_path, args.resume)
  for path in args.merge.split(',') if args.merge else ():
    store.merge(path)
  backend = Backend(cpu)
  start = time.perf_counter()
  if not args.render:
    run_grid(grid, backend, store, args.targets.split(',') if args.targets else None,
             args.chips)
  before = []
  if args.before and os.path.exists(args.before):
    with open(args.before, encoding='utf-8') as f:
      before = [traffic.StepTraffic.from_json(r) for r in json.load(f)['traffic']]
  skip = {'--resume', '--render', '--merge'}
  kept = [a for i, a in enumerate(argv)
          if a not in skip and not (i and argv[i - 1] == '--merge')]
  command = ' '.join(['python -m specjax.plan'] + kept)
  context = report.Context(
      command=command, date=datetime.date.today().isoformat(), versions=_versions(backend),
      backend=backend.name, quick=args.quick, grid=grid,
      seconds=sum(r['compile_seconds'] for kind in ('programs', 'traffic', 'peers')
                  for r in store.data[kind]),
      before_path=args.before if before else '')
  text, summary = report.render(context, store.programs(), store.traffic(), before,
                                store.recompiled())
  reports.write_text(output, text + reports.other_sections(output, text, OWN))
  store.finish(summary, {'tpu': not cpu, 'quick': bool(args.quick)})
  _log(f'wrote {output} and {rows_path} ({time.perf_counter() - start:.0f} s)')
  return 0
