"""A T5 config read off a T5X-named param tree, and the tree in the layout a config names
(scanned or unrolled layers)."""
from __future__ import annotations

from typing import Any

import jax

from specjax.models import scan
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS, T5Config

PyTree = Any


def named(config: T5Config) -> T5Config:
  """Gives an ad-hoc config the name of the preset it equals, if any."""
  for name, preset in T5_CONFIGS.items():
    if preset == config.replace(name=name, dtype=preset.dtype):
      return config.replace(name=name)
  return config


def config_from_params(params: PyTree) -> T5Config:
  """Infers the architecture from a T5X-named param tree (e.g. a T5X checkpoint's target).

  The activation of a single-`wi` MLP is taken to be ReLU (v1.0) and of `wi_0`/`wi_1` to
  be gated GELU (v1.1), as in every public checkpoint; the relative-position max distance
  is not stored and is taken as 128. Layers stacked under `layers` (specjax's scanned
  layout, `t5x_scanned.from_t5x`) give `scan_layers`, a table in each layer
  `relpos_per_layer`.

  Args:
    params: nested dict of arrays (or anything with `.shape`) with T5X names.

  Returns:
    The T5Config, named after the registry preset it equals when there is one.
  """
  enc, dec = params['encoder'], params['decoder']
  scanned = scan.is_scanned(params, ('encoder',))
  first = (lambda stack: jax.tree.map(lambda x: _Shape(x.shape[1:]), stack[scan.LAYERS])
           if scanned else stack['layers_0'])
  count = (lambda stack: stack[scan.LAYERS]['pre_mlp_layer_norm']['scale'].shape[0]
           if scanned else len(scan.layer_keys(stack)))
  per_layer = 'relpos_bias' not in enc
  heads, buckets = (first(enc) if per_layer else enc)['relpos_bias']['rel_embedding'].shape
  vocab, emb = params['token_embedder']['embedding'].shape
  mlp = first(enc)['mlp']
  gated = 'wi_0' in mlp
  config = T5Config(
      vocab_size=vocab, emb_dim=emb, num_heads=heads,
      num_encoder_layers=count(enc), num_decoder_layers=count(dec),
      head_dim=first(enc)['attention']['query']['kernel'].shape[1] // heads,
      mlp_dim=(mlp['wi_0'] if gated else mlp['wi'])['kernel'].shape[1],
      mlp_activations=('gelu', 'linear') if gated else ('relu',),
      logits_via_embedding='logits_dense' not in dec,
      relative_attention_num_buckets=buckets, relpos_per_layer=per_layer,
      scan_layers=scanned)
  return named(config)


class _Shape:
  """Something with a shape (a stacked leaf's one layer, unread)."""

  def __init__(self, shape):
    self.shape = tuple(shape)


def in_layout(params: PyTree, config: T5Config) -> PyTree:
  """T5 params in the layout `config.scan_layers` names (stacked or per layer)."""
  scanned = scan.is_scanned(params, ('encoder',))
  if config.scan_layers and not scanned:
    return scan.to_scanned(params, T5.LAYER_STACKS)
  if scanned and not config.scan_layers:
    return scan.to_unrolled(params, T5.LAYER_STACKS)
  return params
