"""Ahead-of-time memory plan of a sharded speculative decode, without any weights.

`plan_decode` builds the real sharded programs (`core.decoder.Decoder.programs`: start,
then the loop with its carry donated), lowers and compiles them against `jax.ShapeDtypeStruct` params,
inputs and state carrying their shardings, and reads XLA's `memory_analysis()` per
device. Params are arguments of both programs (`keep_unused`), so a program's total
argument + output - alias + temp is what one device holds while it runs, and the peak
of a decode is the larger of the two.

The pair is any two configs of the models (`T5Config` for T5, `LMConfig` for the decoder-
only Llama family and GPT-2, whose input is the prompt: S is then the prompt width).

Shape letters: B batch, S encoder length (or prompt width), L max_decode_len, G gamma.
"""
from __future__ import annotations

import dataclasses
import re
import time
from typing import Any, Iterable, List, Sequence, Tuple, Union

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import decoder
from specjax.core.sampling import SamplingMode
from specjax.core.state import LoopConfig
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.models.t5 import T5
from specjax.models.t5_config import T5Config
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules

GIB = 1 << 30
TPU_V4_HBM = 32 * GIB  # one TPU v4 chip
TPU_V5E_HBM = 16 * GIB  # one TPU v5e chip
Config = Union[T5Config, LMConfig]


@dataclasses.dataclass(frozen=True)
class PlanRow:
  """The per-device memory of one (mesh, B, L) decode; every size in bytes.

  Attributes:
    mesh: (data, model).
    batch: B.
    max_decode_len: L.
    param_dtype: dtype of the params as held on device.
    params: target + draft params one device holds.
    caches: self-attention caches + cross-attention K/V (target + draft) one device holds.
    prefill: memory_analysis of the prefill program (argument, output, alias, temp).
    loop: memory_analysis of the loop program (same keys).
    compile_seconds: time to lower and compile both.
    devices_per_chip: 2 for TPU v4 compile-only cores (two per chip), else 1.
    error: why it did not compile (TPU's out-of-HBM message), else ''.
    hbm: bytes of HBM one chip has (32 GiB a TPU v4 chip, 16 GiB a v5e chip).
  """

  mesh: Tuple[int, int]
  batch: int
  max_decode_len: int
  param_dtype: str
  params: int
  caches: int
  prefill: dict
  loop: dict
  compile_seconds: float
  devices_per_chip: int = 1
  error: str = ''
  hbm: int = TPU_V4_HBM

  def to_json(self) -> dict:
    """A JSON-able dict (see `from_json`)."""
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, d: dict) -> 'PlanRow':
    """The row `to_json` wrote."""
    return cls(**dict(d, mesh=tuple(d['mesh'])))

  @property
  def key(self) -> tuple:
    """What identifies a cell of the grid: (mesh, param dtype, B, L)."""
    return (tuple(self.mesh), self.param_dtype, self.batch, self.max_decode_len)

  @property
  def devices(self) -> int:
    return self.mesh[0] * self.mesh[1]

  @property
  def chips(self) -> int:
    return self.devices // self.devices_per_chip

  @property
  def peak(self) -> int:
    """Bytes one device needs: the larger program's argument + output - alias + temp."""
    total = lambda m: m['argument'] + m['output'] - m['alias'] + m['temp']
    if self.error:
      return 0
    return max(total(self.prefill), total(self.loop))

  @property
  def chip_peak(self) -> int:
    """Bytes one chip needs (the peak of each of its devices, added)."""
    return self.peak * self.devices_per_chip

  @property
  def fits(self) -> bool:
    """Whether a chip's peak fits its HBM (`hbm`: 32 GiB for a TPU v4 chip)."""
    return not self.error and self.chip_peak <= self.hbm


def _memory(compiled) -> dict:
  m = compiled.memory_analysis()
  return dict(argument=m.argument_size_in_bytes, output=m.output_size_in_bytes,
              alias=m.alias_size_in_bytes, temp=m.temp_size_in_bytes)


def _cast(tree: Any, dtype: Any) -> Any:
  """ShapeDtypeStructs with floating leaves cast to dtype (sharding kept)."""
  def cast(x):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      return x
    return jax.ShapeDtypeStruct(x.shape, dtype, sharding=x.sharding)
  return jax.tree.map(cast, tree)


def model_of(config: Config, dtype: str):
  """The model of a config with `dtype` activations: a `T5` or a `CausalLM`."""
  config = config.replace(dtype=dtype)
  return CausalLM(config) if isinstance(config, LMConfig) else T5(config)


def plan_decode(mesh: jax.sharding.Mesh, target: Config, draft: Config, *, gamma: int,
                batch: int, input_len: int, max_decode_len: int,
                activation_dtype: str = 'bfloat16', param_dtype: str = 'float32',
                temperature: float = 1.0, rules: axis_rules.Rules = axis_rules.STANDARD_RULES,
                devices_per_chip: int = 1, hbm: int = TPU_V4_HBM) -> PlanRow:
  """Compiles one sharded speculative decode shape and measures it per device.

  Args:
    mesh: a ('data', 'model') mesh (simulated CPU devices are fine).
    target: the target's config (e.g. t5_xxl, llama3_8b).
    draft: the draft's config (e.g. t5_small, llama3_2_1b), of the target's kind.
    gamma: G.
    batch: B (must divide by the mesh's 'data' axis).
    input_len: S (a decoder-only model's prompt width).
    max_decode_len: L.
    activation_dtype: activations and caches.
    param_dtype: params as held on device (the library loads float32).
    temperature: 0 plans greedy, > 0 plans sampling (a softmax over V more per position).
    rules: logical axis rules.
    devices_per_chip: recorded in the row (2 for `tpu_v4_mesh` cores).
    hbm: a chip's HBM in bytes, recorded in the row (what `fits` compares with).

  Returns:
    The PlanRow.
  """
  target_model = model_of(target, activation_dtype)
  draft_model = model_of(draft, activation_dtype)
  cfg = LoopConfig(gamma=gamma, max_decode_len=max_decode_len,
                   sampling=SamplingMode(greedy=temperature == 0.0))
  start = time.perf_counter()
  programs = decoder.Decoder(target_model, draft_model, cfg, mesh=mesh, rules=rules).programs(
      batch, input_len, jax.random.PRNGKey(0))
  a = programs.abstract
  tp, dp = _cast(a['target_params'], param_dtype), _cast(a['draft_params'], param_dtype)
  start_args = (tp, dp, a['inputs'], a['num_inputs'], a['row_ids'], a['rng'], a['sampling'])
  error, prefill, loop = '', {}, {}
  try:
    prefill = _memory(programs.start.lower(*start_args).compile())
    loop = _memory(programs.loop.lower(tp, dp, a['run']).compile())
  except jax.errors.JaxRuntimeError as e:  # TPU refuses programs larger than its HBM
    if 'RESOURCE_EXHAUSTED' not in str(e):
      raise
    found = re.search(r'temporaries \(([\d.]+G)\) exceeds available HBM \(([\d.]+G)\)', str(e))
    error = (f'out of HBM: {found[1]} of temporaries > a device\'s {found[2]}' if found
             else ' '.join(str(e).split())[:120])
  seconds = time.perf_counter() - start
  shardings_of = lambda tree: jax.tree.map(lambda x: x.sharding, tree)
  params = sum(axis_rules.bytes_per_device(t, shardings_of(t)) for t in (tp, dp))
  run = a['run']
  caches = (run.state.target_cache, run.state.draft_cache, run.target_enc.get('cross', {}),
            run.draft_enc.get('cross', {}))
  cache_bytes = sum(axis_rules.bytes_per_device(t, shardings_of(t)) for t in caches)
  return PlanRow(mesh=mesh_lib.mesh_shape(mesh), batch=batch, max_decode_len=max_decode_len,
                 param_dtype=jnp.dtype(param_dtype).name, params=params, caches=cache_bytes,
                 prefill=prefill, loop=loop, compile_seconds=seconds,
                 devices_per_chip=devices_per_chip, error=error, hbm=hbm)


# Compile-only TPU v4 topologies (libtpu, no TPU needed) by chip count: name, options.
_V4_TOPOLOGIES = {1: ('v4:1x1x1', dict(chips_per_host_bounds=[1, 1, 1])),
                  4: ('v4:2x2x1', {}), 8: ('v4:2x2x2', {}), 16: ('v4:2x2x4', {})}


def tpu_v4_mesh(chips: int, data: int = 1) -> jax.sharding.Mesh:
  """A ('data', 'model') mesh of compile-only TPU v4 TensorCores (two per chip).

  Needs libtpu (`pip install libtpu`) but no TPU: the programs compile for the real chip
  and `memory_analysis()` is TPU's own. The cores run without megacore, so a chip's
  memory is its two cores' added.

  Args:
    chips: 1, 4 (v4-8), 8 (v4-16) or 16 (v4-32).
    data: the 'data' axis size; 'model' takes the other cores.
  """
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  if chips not in _V4_TOPOLOGIES:
    raise ValueError(f'no TPU v4 topology for {chips} chips; pass one of '
                     f'{sorted(_V4_TOPOLOGIES)}')
  name, options = _V4_TOPOLOGIES[chips]
  cores = topologies.get_topology_desc(name, 'tpu', **options).devices
  return jax.sharding.Mesh(np.array(cores).reshape(data, len(cores) // data),
                           mesh_lib.MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


# Compile-only TPU v5e topologies by chip count (one TensorCore a chip).
_V5E_TOPOLOGIES = {1: 'v5e:1x1', 4: 'v5e:2x2', 8: 'v5e:2x4'}


def tpu_v5e_mesh(chips: int = 1, data: int = 1) -> jax.sharding.Mesh:
  """A ('data', 'model') mesh of compile-only TPU v5e chips (libtpu, no TPU needed).

  Args:
    chips: 1, 4 (v5e-4) or 8 (v5e-8); each chip is one device with 16 GiB of HBM.
    data: the 'data' axis size; 'model' takes the other chips.
  """
  from jax.experimental import topologies  # pylint: disable=import-outside-toplevel
  if chips not in _V5E_TOPOLOGIES:
    raise ValueError(f'no TPU v5e topology for {chips} chips; pass one of '
                     f'{sorted(_V5E_TOPOLOGIES)}')
  chips_desc = topologies.get_topology_desc(_V5E_TOPOLOGIES[chips], 'tpu').devices
  return jax.sharding.Mesh(np.array(chips_desc).reshape(data, len(chips_desc) // data),
                           mesh_lib.MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * 2)


def plan_grid(meshes: Iterable[jax.sharding.Mesh], batches: Sequence[int],
              lengths: Sequence[int], param_dtypes: Sequence[str], on_row=None,
              done: Iterable[tuple] = (), **kwargs) -> List[PlanRow]:
  """`plan_decode` over meshes x param dtypes x batches x lengths (skips B % data != 0).

  Args:
    meshes: ('data', 'model') meshes (`mesh.make_mesh` or `tpu_v4_mesh`).
    batches: B values.
    lengths: L values.
    param_dtypes: e.g. ('float32', 'bfloat16').
    on_row: called with each PlanRow as soon as it is measured.
    done: `PlanRow.key`s to skip (cells measured by an earlier, interrupted run).
    **kwargs: the rest of `plan_decode`'s arguments (target, draft, gamma, input_len...).

  Returns:
    The rows, in that order.
  """
  rows, done = [], set(done)
  for mesh in meshes:
    for param_dtype in param_dtypes:
      for batch in batches:
        if batch % mesh.shape['data']:
          continue
        for length in lengths:
          if (mesh_lib.mesh_shape(mesh), jnp.dtype(param_dtype).name, batch, length) in done:
            continue
          row = plan_decode(mesh, batch=batch, max_decode_len=length,
                            param_dtype=param_dtype, **kwargs)
          rows.append(row)
          if on_row:
            on_row(row)
          jax.clear_caches()  # compiled XXL programs add up to gigabytes of host memory
  return rows


def _gib(n: int) -> str:
  return f'{n / GIB:.2f}'


def to_markdown(rows: Sequence[PlanRow]) -> str:
  """One table row per PlanRow (GiB per device, and per chip); **NO** above a chip's HBM."""
  hbm = sorted({r.hbm for r in rows})
  fits = f'fits {" / ".join(f"{h // GIB}" for h in hbm)} GiB'
  lines = [
      '| chips | mesh (data x model) | param dtype | B | L | params | caches | prefill '
      f'arg / out / temp | loop arg / out / temp | peak / device | peak / chip | {fits} |',
      '|---:|:---:|:---:|---:|---:|---:|---:|:---:|:---:|---:|---:|:---:|']
  for r in rows:
    cells = [f'{r.chips}', f'{r.mesh[0]}x{r.mesh[1]}', r.param_dtype, f'{r.batch}',
             f'{r.max_decode_len}', _gib(r.params), _gib(r.caches)]
    if r.error:
      cells += [r.error.replace('|', '/'), '', '', '', '**NO**']
    else:
      program = lambda m: ' / '.join(_gib(m[k]) for k in ('argument', 'output', 'temp'))
      cells += [program(r.prefill), program(r.loop), _gib(r.peak), _gib(r.chip_peak),
                'yes' if r.fits else '**NO**']
    lines.append('| ' + ' | '.join(cells) + ' |')
  return '\n'.join(lines) + '\n'


def summarize(rows: Sequence[PlanRow]) -> str:
  """One markdown bullet per (chips, param dtype): the (B, L) cells that fit a chip's HBM."""
  groups = {}
  for r in rows:
    groups.setdefault((r.chips, r.param_dtype), []).append(r)
  lines = []
  for (chips, dtype), group in groups.items():
    fit = [f'B={r.batch} L={r.max_decode_len}' for r in group if r.fits]
    verdict = ', '.join(fit) if len(fit) < len(group) else 'every planned B and L'
    lines.append(f'- {chips} chip{"s" if chips > 1 else ""}, {dtype} params: fits '
                 f'{verdict or "nothing"}')
  return '\n'.join(lines) + '\n'
