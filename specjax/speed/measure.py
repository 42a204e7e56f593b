"""The measured counterpart of the speed plan: the same programs, timed on a real device.

`python -m specjax.speed` (on a TPU VM: `bash tpu/speed_bench.sh`) runs every program of
`programs.program_fns` on this machine's default device, each timed over several calls
after a warm-up, and writes the same rows and columns as `python -m specjax.plan --speed`:
c, v(K), the loop's share and the speedup predicted from the measured times, with the same
keys (target, draft, B, S, temperature, gamma).

The arguments are random by default (`--init random`): every floating-point value (the
weights, the encoder outputs, the caches) is drawn from N(0, 0.02^2), integers (tokens,
positions, PRNG keys) are zero. A dense program does the same work on any values, but a
GPU's matrix units draw less power, and can run faster, on zeros (`--init zeros`).

Shape letters: B batch, S input length, L max_decode_len.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import sys
import time
from typing import List, Optional, Sequence

import jax
import jax.numpy as jnp

from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS
from specjax.parallel import mesh as mesh_lib
from specjax.speed import config as speed_config
from specjax.speed import paper, programs
from specjax.speed.predict import GAMMAS, PairCosts, Prediction
from specjax.speed.roofline import V4_CHIP, Timed


@dataclasses.dataclass(frozen=True)
class TimedRow:
  """One program timed on a device (the measured twin of `programs.ProgramRow`).

  Attributes:
    model, program, tokens, batch, input_len, max_decode_len, mesh, greedy: as in
      `programs.ProgramRow` (the same key).
    seconds: the fastest of the timed calls.
    device: the device's kind (e.g. 'TPU v4').
  """

  model: str
  program: str
  tokens: int
  batch: int
  input_len: int
  max_decode_len: int
  mesh: tuple
  greedy: bool
  seconds: float
  device: str

  @property
  def key(self) -> tuple:
    return (self.model, self.program, self.tokens, self.batch, self.input_len,
            self.max_decode_len, tuple(self.mesh), self.greedy)

  @property
  def cost(self) -> Timed:
    return Timed(self.seconds)

  def to_json(self) -> dict:
    return dataclasses.asdict(self)


INITS = speed_config.INITS
SCALE = 0.02  # the standard deviation of a random floating-point argument


def fill(tree, init: str, key: jax.Array):
  """Concrete arrays for the abstract leaves of `tree`, placed by their shardings.

  Args:
    tree: ShapeDtypeStructs (or arrays: only their shape, dtype and sharding are read).
    init: 'random' (floating leaves ~ N(0, SCALE^2), a key of their own each, other leaves
      zero) or 'zeros'.
    key: the PRNG key the random leaves are drawn from.

  Returns:
    The same tree of arrays.
  """
  if init not in INITS:
    raise ValueError(f'init {init!r}: pass one of {", ".join(INITS)}')
  leaves, treedef = jax.tree.flatten(tree)
  out = []
  for i, a in enumerate(leaves):
    if init == 'random' and jnp.issubdtype(a.dtype, jnp.floating):
      x = SCALE * jax.random.normal(jax.random.fold_in(key, i), a.shape, a.dtype)
    else:
      x = jnp.zeros(a.shape, a.dtype)
    out.append(jax.device_put(x, a.sharding) if getattr(a, 'sharding', None) else x)
  return jax.tree.unflatten(treedef, out)


def time_program(fn, args, donate, rounds: int, init: str = 'random') -> float:
  """The fastest of `rounds` calls of jit(fn) after a warm-up call that compiles.

  The arguments that are not donated (the weights) are filled once (`fill`); the donated
  ones (the caches and the loop's state) afresh before every call, outside the timing.
  """
  jitted = jax.jit(fn, donate_argnums=donate)
  key = jax.random.PRNGKey(0)
  kept = [None if j in donate else fill(a, init, jax.random.fold_in(key, j))
          for j, a in enumerate(args)]
  best = float('inf')
  for i in range(rounds + 1):
    concrete = [fill(a, init, jax.random.fold_in(key, len(args) * (i + 1) + j))
                if j in donate else kept[j] for j, a in enumerate(args)]
    jax.block_until_ready(concrete)
    start = time.perf_counter()
    jax.block_until_ready(jitted(*concrete))
    if i:  # the first call compiles
      best = min(best, time.perf_counter() - start)
  return best


def time_pair(target: str, draft: str, *, batch: int, input_len: int, max_decode_len: int,
              greedy: bool, rounds: int = 5, dtype: str = 'bfloat16',
              init: str = 'random') -> List[TimedRow]:
  """Times every program of one setting on this machine's first device."""
  mesh = programs.one_device_mesh(jax.devices()[0])
  s = programs.Setting(T5(T5_CONFIGS[target].replace(dtype=dtype)),
                       T5(T5_CONFIGS[draft].replace(dtype=dtype)), batch, input_len,
                       max_decode_len, mesh, greedy, dtype)
  rows = []
  for model, program, tokens, fn, args, donate in programs.program_fns(s, lambda *k: True):
    seconds = time_program(fn, args, donate, rounds, init)
    rows.append(TimedRow(model=model, program=program, tokens=tokens, batch=batch,
                         input_len=input_len, max_decode_len=max_decode_len,
                         mesh=mesh_lib.mesh_shape(mesh), greedy=greedy, seconds=seconds,
                         device=jax.devices()[0].device_kind))
  return rows


def summarize(rows: Sequence[TimedRow], target: str, draft: str, batch: int, input_len: int,
              max_decode_len: int, greedy: bool) -> dict:
  """c, v(K), loop share and the speedups predicted from measured times (plan's columns)."""
  costs = PairCosts.from_rows({r.key: r for r in rows}, target, draft, batch, input_len,
                              max_decode_len, (1, 1), greedy, scan_counted_once=False)
  p = Prediction(costs, V4_CHIP)  # the device is ignored by measured times
  temperature = 0.0 if greedy else 1.0
  alphas = sorted({c.alpha for c in paper.TABLE2 if c.temperature == temperature})
  return dict(target=target, draft=draft, batch=batch, input_len=input_len,
              temperature=temperature, c=p.c, c_iteration=p.c_iteration,
              v=[p.v(k) for k in programs.VERIFY_TOKENS],
              loop_share={g: p.loop_share(g) for g in programs.ITERATION_GAMMAS},
              alone_seconds=p.alone_seconds,
              speedup={str(a): {g: _speedup(p, a, g) for g in GAMMAS} for a in alphas})


def _speedup(p: Prediction, alpha: float, gamma: int) -> Optional[float]:
  """The predicted speedup, or None where noisy times leave no positive verify cost."""
  return p.speedup(alpha, gamma) if p.v_iteration(gamma) > 0 else None


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
  """The flags of `specjax.speed.config.MeasureConfig`, parsed."""
  return speed_config.parser().parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  for name in [args.target] + args.drafts.split(','):
    if name not in T5_CONFIGS:
      print(f'error: unknown model {name!r}; pass one of {", ".join(sorted(T5_CONFIGS))}',
            file=sys.stderr)
      return 2
  out = {'device': jax.devices()[0].device_kind, 'jax': jax.__version__,
         'date': datetime.date.today().isoformat(), 'init': args.init, 'rows': [],
         'summary': []}
  # Greedy first: the verify calls are timed there (they do not depend on the mode).
  modes = sorted({float(t) == 0.0 for t in args.temperatures.split(',')} | {True},
                 reverse=True)
  for batch in (int(b) for b in args.batch_sizes.split(',')):
    for draft in args.drafts.split(','):
      rows = []
      for greedy in modes:
        new = time_pair(args.target, draft, batch=batch, input_len=args.input_len,
                        max_decode_len=args.max_decode_len, greedy=greedy, rounds=args.rounds,
                        init=args.init)
        rows += new
        out['rows'] += [r.to_json() for r in new]
        summary = summarize(rows, args.target, draft, batch, args.input_len,
                            args.max_decode_len, greedy)
        out['summary'].append(summary)
        print(f'{args.target}+{draft} B={batch} T={summary["temperature"]:g}: '
              f'c {summary["c"]:.3f}, v(8) {summary["v"][7]:.2f}, target alone '
              f'{summary["alone_seconds"] * 1e3:.2f} ms/token', flush=True)
        with open(args.json, 'w', encoding='utf-8') as f:
          json.dump(out, f, indent=1)
  return 0
