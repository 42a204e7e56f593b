"""Decoder-only language models on the model contract: the Llama family and GPT-2.

Params are a nested dict with T5X-style names and kernels [in, out] (heads split out:
query [D, N, H], key/value [D, M, H], out [N, H, D]); the cache holds per layer the K/V
heads only, k and v [B, M, H, T] (heads-major, positions last, as T5's). `decode` scores
any K tokens per row at per-row positions: a prompt prefill, a draft step, a verify.
Rotary and learned positions are the cache slot (a token tree's nodes are at base +
depth instead, `base.Tree`): a prompt sits at slots 0..P-1, so a right-padded prompt's
pad slots are overwritten by generated tokens before any query reads them.
`decoder_prompt` also takes left-padded prompts (shifted left first).

Shape letters: B batch, P prompt width, K tokens in this call, T cache length, V vocab,
D model dim, N query heads, M KV heads, H head dim, F mlp dim.
"""
from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Tuple

import jax
import jax.numpy as jnp

from specjax.models import base
from specjax.models import lm_layers as layers
from specjax.models import scan
from specjax.models import split_attention
from specjax.models.lm_config import LMConfig


class SelfLayout(NamedTuple):
  """A decode call's self-attention layout (`CausalLM.self_attention_layout`).

  Attributes:
    query_pos: [B, K] int32, each token's position (rotary angle, learned position).
    mask: [B, K, T] bool, the slots each token attends to.
    write_start: [B] int32, the cache slot of the call's first token.
  """
  query_pos: jax.Array
  mask: jax.Array
  write_start: jax.Array

PyTree = Any
# The cache's logical axes: [B, M, H, T]; 'kv_heads' is sharded over 'model' where M divides.
CACHE_AXES = ('batch', 'kv_heads', 'kv', 'length')
# A scanned cache leaf [B, L, M, H, T]: batch-major, then the layers.
SCANNED_CACHE_AXES = ('batch', scan.LAYERS) + CACHE_AXES[1:]


class _Spec:
  """A param's shape, logical axes and init scale (fan-in normal; 1 for norm scales)."""

  def __init__(self, shape, axes, init='normal'):
    self.shape, self.axes, self.init = tuple(shape), tuple(axes), init


def _linear(shape, axes, bias_shape=None, bias_axes=None) -> dict:
  out = {'kernel': _Spec(shape, axes)}
  if bias_shape is not None:
    out['bias'] = _Spec(bias_shape, bias_axes, 'zeros')
  return out


def _norm(cfg: LMConfig) -> dict:
  out = {'scale': _Spec((cfg.emb_dim,), ('embed',), 'ones')}
  if cfg.family == 'gpt2':
    out['bias'] = _Spec((cfg.emb_dim,), ('embed',), 'zeros')
  return out


def param_specs(cfg: LMConfig) -> PyTree:
  """The param tree of `cfg` with `_Spec` leaves (shape, logical axes, init)."""
  d, n, m, h, f = cfg.emb_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.mlp_dim
  att, mlp_b = cfg.biases['attention'], cfg.biases['mlp']
  specs = {'embed': {'embedding': _Spec((cfg.vocab_size, d), ('vocab', 'embed'))},
           'final_norm': _norm(cfg)}
  if not cfg.rotary:
    specs['position'] = {'embedding': _Spec((cfg.max_len, d), (None, 'embed'))}
  if not cfg.tie_embeddings:
    specs['lm_head'] = _linear((d, cfg.vocab_size), ('embed', 'vocab'))
  for i in range(cfg.num_layers):
    heads = lambda count, name: _linear((d, count, h), ('embed', name, 'kv'),
                                        (count, h) if att else None, (name, 'kv'))
    mlp = {'up': _linear((d, f), ('embed', 'mlp'), (f,) if mlp_b else None, ('mlp',)),
           'down': _linear((f, d), ('mlp', 'embed'), (d,) if mlp_b else None, ('embed',))}
    if cfg.gated:
      mlp['gate'] = _linear((d, f), ('embed', 'mlp'), (f,) if mlp_b else None, ('mlp',))
    specs[f'layers_{i}'] = {
        'attn_norm': _norm(cfg), 'mlp_norm': _norm(cfg), 'mlp': mlp,
        'attention': {'query': heads(n, 'heads'), 'key': heads(m, 'kv_heads'),
                      'value': heads(m, 'kv_heads'),
                      'out': _linear((n, h, d), ('heads', 'kv', 'embed'),
                                     (d,) if att else None, ('embed',))}}
  return specs


def _is_spec(x) -> bool:
  return isinstance(x, _Spec)


def prompt_from_padded(inputs: jax.Array, pad_id: int) -> Tuple[jax.Array, jax.Array]:
  """Left- or right-padded prompts [B, P] -> right-padded prompts [B, P] and lengths [B].

  A row's prompt runs from its first to its last non-pad token (leading pads are shifted
  out; a pad id inside a prompt is kept). An all-pad row has length 1.
  """
  width = inputs.shape[1]
  real = inputs != pad_id  # [B, P]
  index = jnp.arange(width)[None, :]
  first = jnp.min(jnp.where(real, index, width), axis=1)  # [B]
  last = jnp.max(jnp.where(real, index, -1), axis=1)  # [B]
  lengths = jnp.maximum(last + 1 - jnp.minimum(first, width), 1).astype(jnp.int32)
  shift = jnp.where(first < width, first, 0)[:, None]
  shifted = jnp.take_along_axis(inputs, jnp.clip(index + shift, 0, width - 1), axis=1)
  prompt = jnp.where(index < lengths[:, None], shifted, pad_id)
  return prompt.astype(jnp.int32), lengths


@dataclasses.dataclass(frozen=True)
class CausalLM:
  """A Llama-family or GPT-2 decoder on the contract of `specjax.models.base.Model`."""

  config: LMConfig
  LAYER_STACKS = ((),)  # the layers sit at the params' root (`specjax.models.scan`)

  @property
  def vocab_size(self) -> int:
    return self.config.vocab_size

  @property
  def eos_id(self) -> int:
    return self.config.eos_id

  @property
  def pad_id(self) -> int:
    return self.config.pad_id

  @property
  def unrolled(self) -> 'CausalLM':
    """This model with its layers unrolled (itself when they are)."""
    c = self.config
    return self if not c.scan_layers else CausalLM(dataclasses.replace(c, scan_layers=False))

  def init(self, rng: jax.Array) -> PyTree:
    """Random float32 params: fan-in scaled normals, unit norm scales, zero biases
    (scanned: the unrolled model's draw, stacked under `layers`)."""
    if self.config.scan_layers:
      return scan.to_scanned(self.unrolled.init(rng))
    specs = param_specs(self.config)
    leaves, treedef = jax.tree.flatten(specs, is_leaf=_is_spec)
    keys = jax.random.split(rng, len(leaves))

    def one(spec, key):
      if spec.init == 'ones':
        return jnp.ones(spec.shape, jnp.float32)
      if spec.init == 'zeros':
        return jnp.zeros(spec.shape, jnp.float32)
      fan_in = spec.shape[0] if spec.axes[0] != 'heads' else spec.shape[0] * spec.shape[1]
      scale = 1.0 if spec.axes[0] in ('vocab', None) else fan_in ** -0.5
      return scale * jax.random.normal(key, spec.shape, jnp.float32)

    return jax.tree.unflatten(treedef, [one(s, k) for s, k in zip(leaves, keys)])

  def param_axes(self) -> PyTree:
    """Same tree as `init`, each leaf a tuple of logical axis names (for sharding)."""
    axes = jax.tree.map(lambda s: s.axes, param_specs(self.unrolled.config), is_leaf=_is_spec)
    return scan.to_scanned(axes) if self.config.scan_layers else axes

  def cache_axes(self) -> PyTree:
    """Logical axes of `init_cache`'s leaves: [B, M, H, T] each (scanned: one dict of
    [B, L, M, H, T] leaves)."""
    if self.config.scan_layers:
      return {scan.LAYERS: {'k': SCANNED_CACHE_AXES, 'v': SCANNED_CACHE_AXES}}
    return [{'k': CACHE_AXES, 'v': CACHE_AXES} for _ in range(self.config.num_layers)]

  def encoded_axes(self) -> dict:
    """No encoding: the context is the prompt, prefilled through `decode`."""
    return {}

  def encode(self, params: PyTree, inputs: jax.Array) -> dict:
    """Decoder-only: nothing to encode."""
    del params, inputs
    return {}

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """The prompts of inputs [B, P] (left- or right-padded with pad_id), right-padded:
    [B, P] int32, and their lengths [B] int32."""
    return prompt_from_padded(inputs, self.pad_id)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> PyTree:
    """Per layer {'k', 'v'}: zeros [B, M, H, T] (scanned: {'layers': {'k', 'v': [B, L, M,
    H, T]}}).

    Raises:
      ValueError: T exceeds a learned position table (GPT-2's n_positions).
    """
    c = self.config
    if not c.rotary and max_len > c.max_len:
      raise ValueError(f'cache length {max_len} exceeds the model\'s {c.max_len} positions; '
                       'shorten the prompts (--max-input-len) or --max-decode-len')
    shape = (batch, c.num_kv_heads, c.head_dim, max_len)
    dtype = dtype or c.dtype
    if c.scan_layers:
      shape = shape[:1] + (c.num_layers,) + shape[1:]
      return {scan.LAYERS: {'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}}
    return [{'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}
            for _ in range(c.num_layers)]

  def decode(self, params: PyTree, encoded: PyTree, cache: list, tokens: jax.Array,
             positions: jax.Array, tree: base.Tree | None = None, return_hidden: bool = False
             ) -> Tuple[jax.Array, ...]:
    """Scores tokens [B, K] at positions[b] + 0..K-1 (or a token tree's nodes) and writes
    their K/V into the cache (`base.Model.decode` has the contract).

    Args:
      params: from `init` or a checkpoint.
      encoded: `encode`'s (empty) result.
      cache: per layer {'k', 'v'} [B, M, H, T].
      tokens: [B, K] int32.
      positions: [B] int32, each row's first position (ignored with a tree).
      tree: None for a chain, or the token tree's layout (`base.Tree`): each token is
        rotated (or given the learned embedding) of its position base + depth, and its
        key is cached so rotated, at its slot base + offset + k.
      return_hidden: also return the final hidden state [B, K, D] float32 (after the
        final norm, the input of the output projection).

    Returns:
      logits [B, K, V] float32, the new cache, and with return_hidden the hidden state.
    """
    del encoded
    layout = self.self_attention_layout(params, positions, tokens.shape[1],
                                        jax.tree.leaves(cache)[0].shape[-1], tree)
    x = self.embed(params, tokens, layout.query_pos)  # [B, K, D]
    if self.config.scan_layers:
      kv = cache[scan.LAYERS]
      body = lambda h, p, i: self.decoder_layer(
          p, h, {n: scan.layer_slice(a, i) for n, a in kv.items()}, layout, new_only=True)
      x, new = scan.run(body, x, params[scan.LAYERS], self.config.num_layers,
                        self.config.scan_unroll)  # new: [L, B, K, M, H]
      stacked = {n: scan.write_layers(kv[n], new[n], layout.write_start) for n in kv}
      new_cache = {scan.LAYERS: stacked}
    else:
      new_cache = []
      layer = base.traced_once(self, 'decoder_layer')
      for i, layer_cache in enumerate(cache):
        x, layer_cache = layer(params[f'layers_{i}'], x, layer_cache, layout)
        new_cache.append(layer_cache)
    x = self.final_norm(params['final_norm'], x).astype(jnp.float32)  # as T5's logits
    logits = self.project(params, x)
    return (logits, new_cache, x) if return_hidden else (logits, new_cache)

  def self_attention_layout(self, params: PyTree, positions: jax.Array, num_tokens: int,
                            max_len: int, tree: base.Tree | None = None) -> SelfLayout:
    """Where a decode call's K tokens sit and what they attend to (`decode`'s layout,
    which a draft layer over the same positions, EAGLE's, shares).

    Args:
      params: model params (unused: the layout has no params; T5's reads its bias table).
      positions: [B] int32, each row's first position (chain; ignored with a tree).
      num_tokens: K; max_len: T, the cache length.
      tree: None for a chain, or the token tree's layout.
    """
    del params
    if tree is None:  # today's chain ops, unchanged
      query_pos = positions[:, None] + jnp.arange(num_tokens)[None, :]  # [B, K]
      return SelfLayout(query_pos, base.causal_mask(positions, num_tokens, max_len),
                        positions)
    query_pos, _, mask, write_start = base.attention_layout(positions, num_tokens, max_len,
                                                            tree)  # mask [B, K, T]
    return SelfLayout(query_pos, mask, write_start)

  def embed(self, params: PyTree, tokens: jax.Array, query_pos: jax.Array) -> jax.Array:
    """tokens [B, K] at positions query_pos [B, K] -> [B, K, D] activations (the learned
    position embedding added where the model has one)."""
    dtype = jnp.dtype(self.config.dtype)
    x = jnp.take(params['embed']['embedding'], tokens, axis=0).astype(dtype)
    if not self.config.rotary:
      x = x + jnp.take(params['position']['embedding'], query_pos, axis=0).astype(dtype)
    return x

  def decoder_layer(self, p: PyTree, x: jax.Array, cache: PyTree, layout: SelfLayout,
                    new_only: bool = False) -> Tuple[jax.Array, PyTree]:
    """One layer: self-attention (writing its K/V into the cache) and MLP, each pre-normed
    and residual.

    Args:
      p: the layer's params.
      x: [B, K, D] its input.
      cache: {'k', 'v': [B, M, H, T]}, the layer's cache.
      layout: from `self_attention_layout`.
      new_only: attend over the unwritten cache and this call's K/V, and give those out,
        {'k', 'v': [B, K, M, H]} (scanned layers: the stacked cache takes them after the
        scan; `specjax.models.split_attention`).

    Returns:
      (x [B, K, D], the cache with the K tokens' K/V written, or this call's K/V).
    """
    c = self.config
    dtype = jnp.dtype(c.dtype)
    att = p['attention']
    h = layers.norm(x, p['attn_norm'], c)
    q = layers.dense(h, att['query'], 'BKD,DNH->BKNH')  # [B, K, N, H]
    k = layers.dense(h, att['key'], 'BKD,DMH->BKMH')  # [B, K, M, H]
    v = layers.dense(h, att['value'], 'BKD,DMH->BKMH')
    if c.rotary:
      inv_freq = layers.rope_frequencies(c)
      q = layers.apply_rope(q, layout.query_pos, inv_freq)
      k = layers.apply_rope(k, layout.query_pos, inv_freq)
    k, v = k.transpose(0, 2, 3, 1), v.transpose(0, 2, 3, 1)  # [B, M, H, K]
    if new_only:  # the cache read in place, the new K/V beside it (`split_attention`)
      k, v = k.astype(cache['k'].dtype), v.astype(cache['v'].dtype)
      new_cache = {'k': scan.token_major(k), 'v': scan.token_major(v)}  # [B, K, M, H]
      y = split_attention.lm_self_attention(q, *(a.astype(dtype) for a in (
          cache['k'], cache['v'], k, v)), layout.mask, layout.write_start)
    else:
      new_cache = {n: base.write_cache(cache[n], a, layout.write_start)  # [B, M, H, T]
                   for n, a in (('k', k), ('v', v))}
      y = layers.attention(q, new_cache['k'].astype(dtype), new_cache['v'].astype(dtype),
                           layout.mask)
    x = x + layers.dense(y, att['out'], 'BKNH,NHD->BKD')
    x = x + layers.mlp(layers.norm(x, p['mlp_norm'], c), p['mlp'], c)
    return x, new_cache

  def final_norm(self, p: PyTree, x: jax.Array) -> jax.Array:
    """The family's final norm with params p ({'scale'} or {'scale', 'bias'}): x [..., D]
    -> same."""
    return layers.norm(x, p, self.config)

  def project(self, params: PyTree, hidden: jax.Array) -> jax.Array:
    """The output projection: final hidden states [B, K, D] float32 (after the final norm)
    -> logits [B, K, V] float32 (heads that draft from the target's hidden states reuse
    it)."""
    if self.config.tie_embeddings:
      logits = jnp.einsum('BKD,VD->BKV', hidden, params['embed']['embedding'])
    else:
      logits = jnp.einsum('BKD,DV->BKV', hidden, params['lm_head']['kernel'])
    return logits.astype(jnp.float32)

  def logits(self, params: PyTree, tokens: jax.Array) -> jax.Array:
    """Teacher-forced next-token logits [B, P, V] float32 of tokens [B, P] (from 0)."""
    batch, width = tokens.shape
    cache = self.init_cache(batch, width)
    return self.decode(params, {}, cache, tokens, jnp.zeros((batch,), jnp.int32))[0]
