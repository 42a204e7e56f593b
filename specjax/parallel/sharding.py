"""Device mesh, T5X logical axis rules, and the NamedShardings of params, caches and state.

The mesh has two axes, ('data', 'model'), as T5X's PjitPartitioner builds it. Parameters
carry T5X logical axis names (`model.param_axes()`); `logical_to_spec` resolves them with
T5X's `standard_logical_axis_rules` (first matching rule whose mesh axis is still free in
the spec wins, as flax's `logical_to_mesh_axes`), and then replicates every dimension that
the chosen mesh axis does not divide, so that a draft whose head count does not divide
the model axis (T5 1.1 small has 6 heads) runs replicated instead of failing.

Activations follow the model contract: every leaf of `encoded` and of a cache is
batch-major, and 4-D leaves are heads-major [B, N, H, T] (T is S for cross-attention K/V),
so they shard batch over 'data' and heads over 'model'.
"""
from __future__ import annotations

import math
import os
from typing import Any, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

PyTree = Any
Rules = Tuple[Tuple[str, Optional[str]], ...]
MESH_AXES = ('data', 'model')

# Always replicated, appended after the partitioning rules (T5X standard_logical_axis_rules).
_REPLICATED: Rules = (('relpos_buckets', None), ('abspos_buckets', None), ('length', None),
                      ('layers', None), ('stack', None), ('mlp_activations', None))


def standard_logical_axis_rules(parameter_partitioning_dims: int = 1) -> Rules:
  """T5X's standard rules (activation_partitioning_dims=1).

  Args:
    parameter_partitioning_dims: 1 (the T5X default: embed replicated) or 2 (the ZeRO-3
      like variant: params also shard 'embed' over 'data').

  Returns:
    Ordered (logical axis, mesh axis or None) pairs.
  """
  if parameter_partitioning_dims not in (1, 2):
    raise ValueError(f'parameter_partitioning_dims must be 1 or 2, got '
                     f'{parameter_partitioning_dims}')
  rules = (('batch', 'data'), ('vocab', 'model'), ('mlp', 'model'), ('heads', 'model'),
           ('kv', None), ('joined_kv', 'model'))
  rules += (('embed', 'data'),) if parameter_partitioning_dims == 2 else (('embed', None),)
  return rules + _REPLICATED


STANDARD_RULES = standard_logical_axis_rules(1)
PARAMS_2D_RULES = standard_logical_axis_rules(2)


# ----------------------------------------------------------------------------- meshes


def make_mesh(num_partitions: Optional[int] = None, shape: Optional[Tuple[int, int]] = None,
              devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A ('data', 'model') mesh with Auto axis types (T5X-style sharding propagation).

  Args:
    num_partitions: the 'model' axis size; 'data' takes the remaining devices.
    shape: (data, model) explicitly instead; data * model may be fewer than the devices.
    devices: the devices to use (default: all, `jax.devices()`).

  Returns:
    A `jax.sharding.Mesh` with axes ('data', 'model').

  Raises:
    ValueError: neither or both of num_partitions / shape, or sizes that do not fit the
      device count (one line naming the fix).
  """
  devices = list(jax.devices() if devices is None else devices)
  count = len(devices)
  if (num_partitions is None) == (shape is None):
    raise ValueError('pass exactly one of num_partitions (--num-partitions N) or a mesh '
                     'shape (--mesh data=D,model=M)')
  if num_partitions is not None:
    if num_partitions < 1 or count % num_partitions:
      raise ValueError(f'--num-partitions {num_partitions} does not divide the {count} '
                       f'devices; pass a divisor of {count}')
    shape = (count // num_partitions, num_partitions)
  data, model = shape
  if data < 1 or model < 1 or data * model > count:
    raise ValueError(f'mesh data={data},model={model} needs {data * model} devices but '
                     f'{count} are available; pass a mesh whose sizes multiply to <= {count}')
  return jax.make_mesh((data, model), MESH_AXES, axis_types=(AxisType.Auto,) * 2,
                       devices=devices)


def parse_mesh_spec(spec: str) -> Tuple[int, int]:
  """'data=2,model=4' -> (2, 4); a missing axis is 1 ('model=8' -> (1, 8))."""
  sizes = {'data': 1, 'model': 1}
  for part in filter(None, (p.strip() for p in spec.split(','))):
    name, _, value = part.partition('=')
    name = name.strip()
    if name not in sizes or not value.strip().isdigit() or int(value) < 1:
      raise ValueError(f'bad mesh {spec!r}; write it as --mesh data=D,model=M with '
                       'positive integers')
    sizes[name] = int(value)
  return sizes['data'], sizes['model']


def mesh_from_spec(spec: str, devices: Optional[Sequence[Any]] = None) -> Mesh:
  """A mesh from 'data=D,model=M' (see `parse_mesh_spec` and `make_mesh`)."""
  return make_mesh(shape=parse_mesh_spec(spec), devices=devices)


def mesh_shape(mesh: Mesh) -> Tuple[int, int]:
  """(data, model) sizes of a ('data', 'model') mesh."""
  return mesh.shape['data'], mesh.shape['model']


def should_init_distributed(multihost: bool = False,
                            env: Optional[Mapping[str, str]] = None) -> bool:
  """Whether this process is one of several hosts (a TPU pod slice or `--multihost`).

  Args:
    multihost: the CLI's --multihost flag.
    env: environment to read (default os.environ): SPECJAX_MULTIHOST=1, or a TPU VM's
      TPU_WORKER_HOSTNAMES listing more than one host.
  """
  env = os.environ if env is None else env
  if multihost or env.get('SPECJAX_MULTIHOST', '').lower() in ('1', 'true', 'yes'):
    return True
  hosts = [h for h in env.get('TPU_WORKER_HOSTNAMES', '').split(',') if h.strip()]
  return len(hosts) > 1


def init_distributed(multihost: bool = False, env: Optional[Mapping[str, str]] = None
                     ) -> bool:
  """Calls `jax.distributed.initialize()` when `should_init_distributed` says so.

  Call it first, before anything touches a jax device. On Cloud TPU the coordinator and
  process ids come from the TPU metadata, so no arguments are needed.

  Returns:
    True if it initialized the distributed runtime.
  """
  if not should_init_distributed(multihost, env):
    return False
  jax.distributed.initialize()
  return True


# ----------------------------------------------------------------------------- rules


def logical_to_spec(axes: Sequence[Optional[str]], shape: Sequence[int], mesh: Mesh,
                    rules: Rules = STANDARD_RULES,
                    units: Optional[Mapping[str, int]] = None) -> P:
  """Logical axis names of one array -> its PartitionSpec on `mesh`.

  Args:
    axes: one logical name (or None) per dimension, e.g. ('embed', 'joined_kv').
    shape: the array's shape.
    mesh: the mesh (its axis sizes decide divisibility).
    rules: ordered (logical, mesh axis or None) pairs; the first rule for a name whose
      mesh axis is not used yet by another dimension wins; unknown names are replicated.
    units: optional indivisible block per logical name, e.g. {'joined_kv': head_dim}:
      the dimension is sharded only if shape // unit (the head count) divides.

  Returns:
    The PartitionSpec, None on every replicated dimension.
  """
  if len(axes) != len(shape):
    raise ValueError(f'{len(axes)} logical axes {tuple(axes)} for a {len(shape)}-D array')
  units = units or {}
  chosen = [None] * len(axes)
  used = set()
  for dim, name in enumerate(axes):
    for logical, mesh_axis in rules:
      if logical != name or mesh_axis in used:
        continue
      size = mesh.shape[mesh_axis] if mesh_axis is not None else 1
      blocks = shape[dim] // units.get(name, 1)
      if mesh_axis is not None and size > 1 and blocks % size == 0:
        chosen[dim] = mesh_axis
        used.add(mesh_axis)
      break  # the first applicable rule decides, even when it replicates
  return P(*chosen)


def _model_units(model) -> dict:
  config = getattr(model, 'config', None)
  head_dim = getattr(config, 'head_dim', None)
  return {'joined_kv': head_dim} if head_dim else {}


def abstract_params(model) -> PyTree:
  """The params as `jax.ShapeDtypeStruct`s, from `jax.eval_shape(model.init)` (no weights)."""
  return jax.eval_shape(model.init, jax.random.PRNGKey(0))


def param_specs(model, mesh: Mesh, rules: Rules = STANDARD_RULES) -> PyTree:
  """PartitionSpec per param from `model.param_axes()` (all replicated if it has none).

  'joined_kv' ([D, N*H] attention kernels) is sharded in whole heads only, so a model
  whose head count the 'model' axis does not divide keeps its attention replicated.
  """
  shapes = abstract_params(model)
  if not hasattr(model, 'param_axes'):
    return jax.tree.map(lambda _: P(), shapes)
  units = _model_units(model)
  return jax.tree.map(lambda axes, x: logical_to_spec(axes, x.shape, mesh, rules, units),
                      model.param_axes(), shapes, is_leaf=lambda a: isinstance(a, tuple))


def param_shardings(model, mesh: Mesh, rules: Rules = STANDARD_RULES) -> PyTree:
  """NamedSharding per param: pass it to `load_model(..., shardings=)`."""
  return jax.tree.map(lambda spec: NamedSharding(mesh, spec),
                      param_specs(model, mesh, rules), is_leaf=lambda s: isinstance(s, P))


def activation_spec(shape: Sequence[int], mesh: Mesh, rules: Rules = STANDARD_RULES) -> P:
  """Batch-major activations: [B, ...] -> batch over data; [B, N, H, T] also heads."""
  if not shape:
    return P()
  axes = ('batch', 'heads', 'kv', 'length') if len(shape) == 4 else (
      ('batch',) + (None,) * (len(shape) - 1))
  return logical_to_spec(axes, shape, mesh, rules)


def activation_shardings(tree: PyTree, mesh: Mesh, rules: Rules = STANDARD_RULES) -> PyTree:
  """NamedSharding per leaf of a batch-major pytree (caches, encoded, per-row state)."""
  return jax.tree.map(lambda x: NamedSharding(mesh, activation_spec(x.shape, mesh, rules)),
                      tree)


def replicated(mesh: Mesh) -> NamedSharding:
  """Every device holds the whole array."""
  return NamedSharding(mesh, P())


def check_batch(batch: int, mesh: Mesh) -> None:
  """Refuses a batch that the 'data' axis does not divide (one line naming the fix)."""
  data = mesh.shape['data']
  if batch % data:
    raise ValueError(f'batch {batch} is not divisible by the mesh\'s data axis ({data}); '
                     f'pass --batch-size a multiple of {data} (or pad the batch)')


def bytes_per_device(tree: PyTree, shardings: PyTree) -> int:
  """Bytes one device holds of `tree` (arrays or ShapeDtypeStructs) under `shardings`."""
  total = 0
  for x, s in zip(jax.tree.leaves(tree), jax.tree.leaves(
      shardings, is_leaf=lambda s: isinstance(s, jax.sharding.Sharding))):
    total += math.prod(s.shard_shape(x.shape)) * np.dtype(x.dtype).itemsize
  return total
