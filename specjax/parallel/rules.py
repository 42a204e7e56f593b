"""T5X logical axis rules and the NamedShardings of params, caches, encodings and state.

Parameters carry T5X logical axis names (`model.param_axes()`); `logical_to_spec` resolves
them with T5X's `standard_logical_axis_rules` (first matching rule whose mesh axis is
still free in the spec wins, as flax's `logical_to_mesh_axes`), and then replicates every
dimension that the chosen mesh axis does not divide, so that a draft whose head count does
not divide the model axis (T5 1.1 small has 6 heads) runs replicated instead of failing.
Caches and encodings are sharded by the axes their model declares (`cache_axes`,
`encoded_axes`: T5's are [B, N, H, T] ('batch', 'heads', 'kv', 'length')), per-row state
batch over 'data'.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

PyTree = Any
Rules = Tuple[Tuple[str, Optional[str]], ...]

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
  # 'kv_heads' (the KV heads of grouped-query attention, params and caches) is not T5X's.
  rules = (('batch', 'data'), ('vocab', 'model'), ('mlp', 'model'), ('heads', 'model'),
           ('kv_heads', 'model'), ('kv', None), ('joined_kv', 'model'))
  rules += (('embed', 'data'),) if parameter_partitioning_dims == 2 else (('embed', None),)
  return rules + _REPLICATED


STANDARD_RULES = standard_logical_axis_rules(1)
PARAMS_2D_RULES = standard_logical_axis_rules(2)



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


def batch_major_shardings(tree: PyTree, mesh: Mesh, rules: Rules = STANDARD_RULES) -> PyTree:
  """NamedSharding per leaf of a pytree whose leaves are [B, ...] (per-row state, queued
  inputs): the first axis is 'batch', the rest replicated; scalars replicated."""
  def one(x):
    axes = ('batch',) + (None,) * (len(x.shape) - 1) if x.shape else ()
    return NamedSharding(mesh, logical_to_spec(axes, x.shape, mesh, rules))
  return jax.tree.map(one, tree)


def axes_shardings(tree: PyTree, axes: PyTree, mesh: Mesh,
                   rules: Rules = STANDARD_RULES) -> PyTree:
  """NamedSharding per leaf from the logical axis names a model declares for it.

  Args:
    tree: arrays or ShapeDtypeStructs (a cache, an encoding).
    axes: the same structure, each leaf a tuple of logical names, one per dimension (the
      model's `cache_axes()` / `encoded_axes()`).
    mesh, rules: as `logical_to_spec`.
  """
  return jax.tree.map(lambda names, x: NamedSharding(mesh, logical_to_spec(
      names, x.shape, mesh, rules)), axes, tree, is_leaf=lambda a: isinstance(a, tuple))


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
