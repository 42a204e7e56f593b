"""A tiny decoder-only transformer with a fixed-shape KV cache (the seed of GPT-style support).

Pre-norm blocks, learned absolute positions, multi-head causal attention over a cache of
per-layer k, v [B, N, H, T] (heads-major). Any K tokens are scored in one call at per-row
positions, or as the nodes of a token tree (`base.Tree`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from specjax.models import base


@dataclasses.dataclass(frozen=True)
class DecoderOnlyConfig:
  """Sizes of a decoder-only transformer (letters of docs/design.md)."""

  vocab_size: int = 32
  emb_dim: int = 16  # D
  num_heads: int = 2  # N
  head_dim: int = 8  # H
  num_layers: int = 2  # L
  mlp_dim: int = 32  # F
  max_len: int = 128  # longest cache, prompt included
  dtype: str = 'float32'
  eos_id: int = 1
  pad_id: int = 0


def _rms_norm(x, scale):
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)
  return (x32 * scale).astype(x.dtype)


@dataclasses.dataclass(frozen=True)
class DecoderOnlyTransformer:
  """The model contract of `base.py` for a small GPT-style transformer."""

  config: DecoderOnlyConfig

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self) -> int:
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  def cache_axes(self) -> list:
    """Logical axes of `init_cache`'s leaves: [B, N, H, T] each."""
    return [{'k': base.KV_AXES, 'v': base.KV_AXES} for _ in range(self.config.num_layers)]

  def encoded_axes(self) -> dict:
    """No encoding."""
    return {}

  def init(self, rng: jax.Array) -> dict:
    """Random float32 params."""
    c = self.config
    keys = iter(jax.random.split(rng, 3 + 6 * c.num_layers))
    normal = lambda shape, fan_in: jax.random.normal(next(keys), shape) / jnp.sqrt(fan_in)
    layers = []
    for _ in range(c.num_layers):
      layers.append({
          'norm_attn': jnp.ones((c.emb_dim,)), 'norm_mlp': jnp.ones((c.emb_dim,)),
          'query': normal((c.emb_dim, c.num_heads, c.head_dim), c.emb_dim * c.head_dim),
          'key': normal((c.emb_dim, c.num_heads, c.head_dim), c.emb_dim),
          'value': normal((c.emb_dim, c.num_heads, c.head_dim), c.emb_dim),
          'out': normal((c.num_heads, c.head_dim, c.emb_dim), c.num_heads * c.head_dim),
          'wi': normal((c.emb_dim, c.mlp_dim), c.emb_dim),
          'wo': normal((c.mlp_dim, c.emb_dim), c.mlp_dim),
      })
    return {'embedding': normal((c.vocab_size, c.emb_dim), 1.0),
            'position': 0.1 * normal((c.max_len, c.emb_dim), 1.0),
            'final_norm': jnp.ones((c.emb_dim,)),
            'logits': normal((c.emb_dim, c.vocab_size), c.emb_dim),
            'layers': layers}

  def encode(self, params, inputs: jax.Array) -> dict:
    """Decoder-only: the context is the prompt, fed through `decode`."""
    del params, inputs
    return {}

  def decoder_prompt(self, inputs: jax.Array):
    """The right-padded inputs [B, P] and their lengths [B]."""
    return base.decoder_only_prompt(inputs, self.pad_id)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> list:
    """Per layer {'k', 'v'}: zeros [B, N, H, T] (heads-major, as T5's)."""
    c = self.config
    if max_len > c.max_len:
      raise ValueError(f'cache length {max_len} exceeds the model\'s max_len {c.max_len}; '
                       'shorten the prompt or max_decode_len')
    shape = (batch, c.num_heads, c.head_dim, max_len)
    dtype = dtype or c.dtype
    return [{'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}
            for _ in range(c.num_layers)]

  def decode(self, params, encoded, cache, tokens: jax.Array, positions: jax.Array,
             tree: base.Tree | None = None, return_hidden: bool = False):
    """Scores tokens [B, K] and writes their K/V into the cache (`base.Model.decode`).

    Args:
      params: from `init`.
      encoded: `encode`'s (empty) result.
      cache: per layer {'k', 'v'} [B, N, H, T].
      tokens: [B, K] int32.
      positions: [B] int32, each row's first position (ignored with a tree).
      tree: None for a chain, or the token tree's layout (`base.Tree`): each token gets
        the learned embedding of its position base + depth.
      return_hidden: also return the final normed hidden state [B, K, D].

    Returns:
      logits [B, K, V] float32, the new cache, and with return_hidden the hidden state.
    """
    del encoded
    c = self.config
    dtype = jnp.dtype(c.dtype)
    num_tokens = tokens.shape[1]
    max_len = cache[0]['k'].shape[3]
    if tree is None:  # today's chain ops, unchanged
      query_pos = positions[:, None] + jnp.arange(num_tokens)  # [B, K]
      mask, write_start = base.causal_mask(positions, num_tokens, max_len), positions
    else:
      query_pos, _, mask, write_start = base.attention_layout(positions, num_tokens, max_len,
                                                              tree)
    x = jnp.take(params['embedding'], tokens, axis=0)  # [B, K, D]
    x = (x + jnp.take(params['position'], query_pos, axis=0)).astype(dtype)
    mask = mask[:, None]  # [B, 1, K, T]
    new_cache = []
    for layer, layer_cache in zip(params['layers'], cache):
      h = _rms_norm(x, layer['norm_attn'])
      q = jnp.einsum('BKD,DNH->BKNH', h, layer['query'].astype(dtype))
      k = jnp.einsum('BKD,DNH->BKNH', h, layer['key'].astype(dtype)).transpose(0, 2, 3, 1)
      v = jnp.einsum('BKD,DNH->BKNH', h, layer['value'].astype(dtype)).transpose(0, 2, 3, 1)
      keys = base.write_cache(layer_cache['k'], k, write_start)  # [B, N, H, T]
      values = base.write_cache(layer_cache['v'], v, write_start)
      new_cache.append({'k': keys, 'v': values})
      scores = jnp.einsum('BKNH,BNHT->BNKT', q, keys).astype(jnp.float32)
      scores = jnp.where(mask, scores, -1e9)
      weights = jax.nn.softmax(scores, axis=-1).astype(dtype)
      attn = jnp.einsum('BNKT,BNHT->BKNH', weights, values)
      x = x + jnp.einsum('BKNH,NHD->BKD', attn, layer['out'].astype(dtype))
      h = _rms_norm(x, layer['norm_mlp'])
      h = jax.nn.relu(h @ layer['wi'].astype(dtype))
      x = x + h @ layer['wo'].astype(dtype)
    x = _rms_norm(x, params['final_norm'])
    logits = jnp.einsum('BKD,DV->BKV', x.astype(jnp.float32), params['logits'])
    return (logits, new_cache, x) if return_hidden else (logits, new_cache)
