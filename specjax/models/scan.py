"""Scanned layers: a stack of identical layers as one body under `jax.lax.scan`.

An unrolled model keeps each layer's params under its own key (`layers_0`, `layers_1`,
...) and traces, lowers and compiles the layer once per layer. A scanned model stacks
them under one key, `layers`, every leaf with a leading layer axis [L, ...] (logical
axis 'layers'), and runs one body L times: the program holds one copy of the layer, so
compiling it no longer grows with depth (T5X's `scan_layers`).

A scanned model's cache is stacked too, but stays batch-major as the model contract
wants (`base.Model.init_cache`): each leaf [B, L, ...] (axes 'batch', 'layers', ...), so
the loop's per-row moves (refill, a token tree's accepted path, the mesh's batch axis)
read it as any other cache. Each layer attends over its slice as it is (`layer_slice`)
and its K new entries beside it (`specjax.models.split_attention`: writing them into the
slice copied it in every layer), and gives them out; the stacked cache takes every
layer's entries after the scan (`write_layers`).

The two layouts hold the same numbers: `to_scanned` and `to_unrolled` convert a params
(or param axes) tree either way, so one checkpoint serves both.

Shape letters: L layers, B batch, T cache length, K tokens in this call.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Callable, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any
LAYERS = 'layers'  # the stacked subtree's key and the logical name of its leading axis
_LAYER_KEY = re.compile(r'^layers_(\d+)$')


def _is_axes(x) -> bool:
  return isinstance(x, tuple) and all(isinstance(a, (str, type(None))) for a in x)


def stack(layers: Sequence[PyTree]) -> PyTree:
  """Per-layer trees of one structure -> one tree, each leaf [L, ...] (axes trees: each
  tuple gains 'layers' in front)."""
  if _is_axes(jax.tree.leaves(layers[0], is_leaf=_is_axes)[0]):
    return jax.tree.map(lambda a: (LAYERS,) + a, layers[0], is_leaf=_is_axes)
  stack_leaf = lambda *xs: (np.stack(xs) if all(isinstance(x, np.ndarray) for x in xs)
                            else jnp.stack(xs))
  return jax.tree.map(stack_leaf, *layers)


def unstack(stacked: PyTree) -> list:
  """A tree of [L, ...] leaves -> L per-layer trees (axes trees: 'layers' dropped)."""
  first = jax.tree.leaves(stacked, is_leaf=_is_axes)[0]
  if _is_axes(first):
    return [jax.tree.map(lambda a: a[1:], stacked, is_leaf=_is_axes)]
  count = first.shape[0]
  return [jax.tree.map(lambda x, i=i: x[i], stacked) for i in range(count)]


def layer_keys(node: dict) -> list:
  """The `layers_{i}` keys of a dict, in layer order (i = 0 .. L-1, none missing).

  Raises:
    ValueError: the layers are not numbered 0 .. L-1.
  """
  found = sorted((int(m.group(1)), k) for k in node for m in [_LAYER_KEY.match(k)] if m)
  if [i for i, _ in found] != list(range(len(found))):
    raise ValueError(f'layers numbered {[i for i, _ in found]}: expected 0 .. {len(found) - 1}')
  return [k for _, k in found]


def to_scanned(tree: PyTree, parents: Sequence[Tuple[str, ...]] = ((),)) -> PyTree:
  """An unrolled params (or param axes) tree in the scanned layout: under each path of
  `parents` (() the root; T5: ('encoder',), ('decoder',)), the `layers_{i}` subtrees
  become one `layers` subtree of stacked leaves. A path already scanned is left as is.
  """
  out = dict(tree)
  for path in parents:
    node = _get(out, path)
    keys = layer_keys(node)
    if not keys:
      continue
    new = {k: v for k, v in node.items() if k not in keys}
    new[LAYERS] = stack([node[k] for k in keys])
    out = _set(out, path, new)
  return out


def to_unrolled(tree: PyTree, parents: Sequence[Tuple[str, ...]] = ((),)) -> PyTree:
  """The inverse of `to_scanned`: each `layers` subtree of stacked leaves under `parents`
  becomes `layers_0` .. `layers_{L-1}` (a param axes tree: one layer's axes for each of
  `count` layers is not knowable, so axes trees are refused)."""
  out = dict(tree)
  for path in parents:
    node = _get(out, path)
    if LAYERS not in node:
      continue
    if _is_axes(jax.tree.leaves(node[LAYERS], is_leaf=_is_axes)[0]):
      raise ValueError('to_unrolled converts params, not param axes: ask the unrolled '
                       'model for its param_axes()')
    new = {k: v for k, v in node.items() if k != LAYERS}
    for i, layer in enumerate(unstack(node[LAYERS])):
      new[f'layers_{i}'] = layer
    out = _set(out, path, new)
  return out


def is_scanned(tree: PyTree, parent: Tuple[str, ...] = ()) -> bool:
  """Whether the params under `parent` are in the scanned layout."""
  return LAYERS in _get(tree, parent)


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _set(tree, path, value):
  if not path:
    return value
  out = dict(tree)
  out[path[0]] = _set(tree[path[0]], path[1:], value)
  return out


def _with_scan(model, scanned: bool):
  """`model` with its config's scan_layers set (T5 and the decoder-only models).

  Raises:
    ValueError: the model has no scanned layout (one line).
  """
  config = getattr(model, 'config', None)
  if not hasattr(config, 'scan_layers') or not hasattr(model, 'LAYER_STACKS'):
    raise ValueError(f'{type(model).__name__} has no scanned layout: scanned layers are for '
                     'T5 and the decoder-only models (Llama, GPT-2)')
  return dataclasses.replace(model, config=dataclasses.replace(config, scan_layers=scanned))


def as_scanned(model, params: PyTree) -> Tuple[Any, PyTree]:
  """(model, params) in the scanned layout: the same numbers, the layers stacked."""
  return _with_scan(model, True), to_scanned(params, model.LAYER_STACKS)


def as_unrolled(model, params: PyTree) -> Tuple[Any, PyTree]:
  """(model, params) in the unrolled layout: `layers_{i}` per layer."""
  return _with_scan(model, False), to_unrolled(params, model.LAYER_STACKS)


def run(body: Callable, carry: Any, stacked: PyTree, count: int, unroll: int = 1
        ) -> Tuple[Any, Any]:
  """`carry, y = body(carry, layer_params, i)` for i = 0 .. count-1, as one `lax.scan`.

  Args:
    body: (carry, the layer's params (leaves without the layer axis), i: int32 scalar)
      -> (the new carry, what the layer gives out: a pytree, or None).
    carry: the loop's carry (the activations).
    stacked: the stacked params, leaves [L', ...] with L' >= count (a model cut after its
      first `count` layers, layer-skip's, runs the first ones).
    count: how many layers to run.
    unroll: layers per loop iteration (`jax.lax.scan`'s unroll; the same values).

  Returns:
    (the last carry, the layers' outputs stacked: leaves [count, ...]).
  """
  layers = jnp.arange(count, dtype=jnp.int32)
  if count != jax.tree.leaves(stacked)[0].shape[0]:
    # The first `count` layers, each taken from the whole stack by its index: a stack cut
    # to them first (x[:count]) was copied in every call (on TPU, half of T5-XXL's
    # decoder weights per call of a draft of 12 of its 24 layers).
    def step_by_index(c, i):
      layer = jax.tree.map(lambda x: jax.lax.dynamic_index_in_dim(x, i, 0, False), stacked)
      return body(c, layer, i)
    return jax.lax.scan(step_by_index, carry, layers, unroll=unroll)

  def step(c, xs):
    params, i = xs
    return body(c, params, i)

  return jax.lax.scan(step, carry, (stacked, layers), unroll=unroll)


def layer_slice(stacked: jax.Array, layer: jax.Array) -> jax.Array:
  """A batch-major stacked leaf [B, L, ...] -> layer `layer`'s [B, ...]."""
  return jax.lax.dynamic_index_in_dim(stacked, layer, axis=1, keepdims=False)


def token_major(new: jax.Array) -> jax.Array:
  """A layer's new entries [B, ..., K] as the scan gives them out, [B, K, ...]: stacked
  [L, B, ..., K] with K minor, TPU padded each layer's K = 9 entries to 128 lanes in the
  loop's write (1% of a T5-XXL verify call at batch 8, by its cost model)."""
  return jnp.moveaxis(new, -1, 1)


def write_layers(stacked: jax.Array, new: jax.Array, positions: jax.Array) -> jax.Array:
  """Writes every layer's new entries new [L', B, K, ...] (a scan's outputs, each layer's
  `token_major`, L' <= L) into a stacked cache [B, L, ..., T] at the per-row slots
  positions [B], once per call (positions[b] + K <= T is the caller's job).

  The layers read their slices inside the scan and write their K entries here, after it:
  updates of the stacked array inside the scan, one per layer and row, each cost TPU as
  much as the whole array.
  """
  new = jnp.moveaxis(new.astype(stacked.dtype), (0, 2), (1, -1))  # [B, L', ..., K]
  zeros = (0,) * (stacked.ndim - 2)
  if stacked.shape[0] == 1:
    return jax.lax.dynamic_update_slice(stacked, new, (0,) + zeros + (positions[0],))

  def one_row(row, row_new, pos):
    return jax.lax.dynamic_update_slice(row, row_new, zeros + (pos,))

  return jax.vmap(one_row)(stacked, new, positions)
