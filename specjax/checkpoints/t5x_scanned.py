"""T5X's scanned T5 params (`scan_layers=True`) and specjax's, converted both ways.

T5X trains its large T5 models with scanned layers (t5x/examples/scalable_t5, flaxformer's
scanned T5 architecture). Their params differ from the unrolled checkpoints in three ways:
- each stack's layers sit under one module, encoder/encoder and decoder/decoder, every
  leaf with the layer axis at position 1 (T5X's `param_scan_axis`), e.g. a query kernel
  [D, L, N, H] and a norm scale [D, L];
- each layer has its own relative position table (`relpos_bias/rel_embedding` [N, L,
  buckets]): scanned models share none;
- scalable_t5 keeps attention kernels 3-D (query, key, value [D, N, H]; out [N, H, D]),
  flaxformer 2-D ([D, N*H], [N*H, D]), as the unrolled checkpoints do.
`from_t5x` gives specjax's scanned layout (`specjax.models.scan`: encoder/layers and
decoder/layers, the layer axis first, 2-D kernels, a per-layer table:
`T5Config(scan_layers=True, relpos_per_layer=True)`); `to_t5x` gives T5X's back.

Imports no t5x. Shape letters: L layers, D model dim, N heads, H head dim.
"""
from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np

from specjax.models import scan

PyTree = Any
STACKS = ('encoder', 'decoder')  # T5X's scanned module sits at <stack>/<stack>
_HEADS_IN = ('query', 'key', 'value')  # kernels [D, N, H] in scalable_t5
_HEADS_OUT = 'out'  # [N, H, D]


def is_t5x_scanned(params: PyTree) -> bool:
  """Whether a T5X param tree holds scanned layers (encoder/encoder, decoder/decoder)."""
  return all(isinstance(params.get(s, {}).get(s), dict) for s in STACKS)


def _xp(x):
  """numpy for host arrays (a checkpoint being loaded), jax.numpy for the rest (params
  inside a jitted predict)."""
  return np if isinstance(x, np.ndarray) else jnp


def _map(tree, fn, path=()):
  if isinstance(tree, dict):
    return {k: _map(v, fn, path + (k,)) for k, v in tree.items()}
  return fn(path, tree)


def from_t5x(params: PyTree) -> PyTree:
  """T5X's scanned params -> specjax's scanned layout (the same numbers).

  Args:
    params: a T5X target tree with encoder/encoder and decoder/decoder (`is_t5x_scanned`).

  Returns:
    The tree with encoder/layers and decoder/layers: every leaf [L, ...], attention
    kernels [L, D, N*H] and [L, N*H, D], the tables [L, N, buckets].
  """
  out = dict(params)
  for stack in STACKS:
    node = dict(params[stack])
    layers = node.pop(stack)

    def leaf(path, x):
      x = _xp(x).moveaxis(x, 1, 0)  # [L, ...]
      if len(path) >= 2 and path[-1] == 'kernel' and x.ndim == 4:
        if path[-2] in _HEADS_IN:  # [L, D, N, H] -> [L, D, N*H]
          return x.reshape(x.shape[0], x.shape[1], -1)
        if path[-2] == _HEADS_OUT:  # [L, N, H, D] -> [L, N*H, D]
          return x.reshape(x.shape[0], -1, x.shape[-1])
      return x

    node[scan.LAYERS] = _map(layers, leaf)
    out[stack] = node
  return out


def to_t5x(params: PyTree, num_heads: int, three_d: bool = True) -> PyTree:
  """specjax's scanned params (`from_t5x`'s layout) -> T5X's.

  Args:
    params: a tree with encoder/layers and decoder/layers (leaves [L, ...]).
    num_heads: N, to split the attention kernels' N*H.
    three_d: scalable_t5's 3-D attention kernels (True) or flaxformer's 2-D ones.

  Returns:
    The tree with encoder/encoder and decoder/decoder, the layer axis at position 1.
  """
  out = dict(params)
  for stack in STACKS:
    node = dict(params[stack])
    layers = node.pop(scan.LAYERS)

    def leaf(path, x):
      if three_d and len(path) >= 2 and path[-1] == 'kernel' and x.ndim == 3:
        if path[-2] in _HEADS_IN:
          x = x.reshape(x.shape[0], x.shape[1], num_heads, -1)
        elif path[-2] == _HEADS_OUT:
          x = x.reshape(x.shape[0], num_heads, -1, x.shape[-1])
      return _xp(x).moveaxis(x, 0, 1)

    node[stack] = _map(layers, leaf)
    out[stack] = node
  return out
