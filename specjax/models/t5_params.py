"""T5's parameter tree: every param's shape, T5X logical axes and initializer.

The tree has T5X's exact names (docs/t5x_contracts.md), so T5X checkpoints and Hugging
Face conversions load without renaming. Shape letters: D model dim, N heads, H head dim,
F mlp dim, V vocab.
"""
from __future__ import annotations

import collections
from typing import Any, Callable, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from specjax.models import t5_layers as layers
from specjax.models.t5_config import T5Config

PyTree = Any
_init = jax.nn.initializers


class ParamSpec(NamedTuple):
  """One parameter: its shape, T5X logical axis names and initializer."""
  shape: Tuple[int, ...]
  axes: Tuple[str, ...]
  init: Callable


def is_spec(x) -> bool:
  """Whether x is a `ParamSpec` (a leaf of `param_specs`)."""
  return isinstance(x, ParamSpec)


def param_specs(cfg: T5Config) -> PyTree:
  """The whole T5X parameter tree as ParamSpec leaves (docs/t5x_contracts.md)."""
  d, nh, f, v = cfg.emb_dim, cfg.num_heads * cfg.head_dim, cfg.mlp_dim, cfg.vocab_size
  fan_in_normal = _init.variance_scaling(1.0, 'fan_in', 'normal')
  # T5X divides the query init by sqrt(head_dim) instead of scaling scores at runtime.
  query_init = _init.variance_scaling(1.0 / cfg.head_dim, 'fan_in', 'normal')
  mlp_init = _init.variance_scaling(1.0, 'fan_in', 'truncated_normal')
  ones = ParamSpec((d,), ('embed',), _init.ones)

  def attention():
    return {'query': {'kernel': ParamSpec((d, nh), ('embed', 'joined_kv'), query_init)},
            'key': {'kernel': ParamSpec((d, nh), ('embed', 'joined_kv'), fan_in_normal)},
            'value': {'kernel': ParamSpec((d, nh), ('embed', 'joined_kv'), fan_in_normal)},
            'out': {'kernel': ParamSpec((nh, d), ('joined_kv', 'embed'), fan_in_normal)}}

  def mlp():
    p = {name: {'kernel': ParamSpec((d, f), ('embed', 'mlp'), mlp_init)}
         for name in layers.mlp_kernel_names(cfg.mlp_activations)}
    p['wo'] = {'kernel': ParamSpec((f, d), ('mlp', 'embed'), mlp_init)}
    return p

  # Fan-in over the buckets, as flax's default embedding init gives T5X.
  relpos_init = _init.variance_scaling(1.0, 'fan_in', 'normal', in_axis=-1, out_axis=-2)

  def relpos():
    return {'rel_embedding': ParamSpec(
        (cfg.num_heads, cfg.relative_attention_num_buckets), ('heads', 'relpos_buckets'),
        relpos_init)}

  own = lambda: {'relpos_bias': relpos()} if cfg.relpos_per_layer else {}
  shared = {} if cfg.relpos_per_layer else {'relpos_bias': relpos()}
  encoder = {**shared, 'encoder_norm': {'scale': ones}}
  for i in range(cfg.num_encoder_layers):
    encoder[f'layers_{i}'] = {
        'pre_attention_layer_norm': {'scale': ones}, 'attention': attention(),
        'pre_mlp_layer_norm': {'scale': ones}, 'mlp': mlp(), **own()}
  decoder = {**shared, 'decoder_norm': {'scale': ones}}
  for i in range(cfg.num_decoder_layers):
    decoder[f'layers_{i}'] = {
        'pre_self_attention_layer_norm': {'scale': ones}, 'self_attention': attention(),
        'pre_cross_attention_layer_norm': {'scale': ones},
        'encoder_decoder_attention': attention(),
        'pre_mlp_layer_norm': {'scale': ones}, 'mlp': mlp(), **own()}
  if not cfg.logits_via_embedding:
    decoder['logits_dense'] = {'kernel': ParamSpec((d, v), ('embed', 'vocab'), mlp_init)}
  return {'token_embedder': {'embedding': ParamSpec((v, d), ('vocab', 'embed'),
                                                     _init.normal(1.0))},
          'encoder': encoder, 'decoder': decoder}


def init(cfg: T5Config, rng: jax.Array) -> PyTree:
  """Random float32 params of the unrolled tree of `cfg`, by T5X's initializers."""
  specs, treedef = jax.tree.flatten(param_specs(cfg), is_leaf=is_spec)
  keys = jax.random.split(rng, len(specs))
  # One vmapped draw per distinct (shape, initializer) instead of one per leaf: XLA's
  # compile time grows with the number of RNG calls (about 0.3 s each on CPU), and
  # grouping makes that number independent of depth.
  groups = collections.defaultdict(list)
  for i, spec in enumerate(specs):
    groups[(spec.shape, spec.init)].append(i)
  leaves = [None] * len(specs)
  for (shape, init_fn), idx in groups.items():
    draw = jax.vmap(lambda key, init_fn=init_fn, shape=shape: init_fn(key, shape, jnp.float32))
    values = draw(keys[jnp.asarray(idx)])  # [n, *shape]
    for j, i in enumerate(idx):
      leaves[i] = values[j]
  return jax.tree.unflatten(treedef, leaves)


def param_axes(cfg: T5Config) -> PyTree:
  """The unrolled tree of `cfg`, each leaf a tuple of T5X logical axis names."""
  return jax.tree.map(lambda s: s.axes, param_specs(cfg), is_leaf=is_spec)
