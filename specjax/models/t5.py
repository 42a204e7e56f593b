"""T5 (v1.0 and v1.1) encoder-decoder satisfying the model contract of `base.py`.

Pure jax functions over a nested params dict with T5X's exact names (T5X checkpoints and
`hf_t5` conversions load without renaming). Shape letters: B batch, S encoder length, T
decoder cache length, K tokens in this call, N heads, H head dim, D model dim, V vocab.

Encoded pytree (`encode`):
  {'mask': [B, S] bool (input token != 0),
   'cross': {'layers_{i}': {'k': [B, N, H, S], 'v': [B, N, H, S]}}}  # per decoder layer
Cache pytree (`init_cache`):
  {'layers_{i}': {'k': [B, N, H, T], 'v': [B, N, H, T]}}  # decoder self-attention
With `config.scan_layers` (`specjax.models.scan`), params keep each stack's layers under
encoder/layers and decoder/layers, leaves [L, ...]; the cross K/V and the cache are
{'layers': {'k', 'v': [B, L, N, H, S or T]}}.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Tuple

import jax
import jax.numpy as jnp

from specjax.models import base
from specjax.models import scan
from specjax.models import split_attention
from specjax.models import t5_layers as layers
from specjax.models import t5_params
from specjax.models.t5_config import T5Config

PyTree = Any
# The params that hold a stack of layers (`layers_{i}` unrolled, `layers` scanned).
STACKS = (('encoder',), ('decoder',))
# A scanned cache or cross-attention leaf [B, L, N, H, T]: batch-major, then the layers.
SCANNED_KV_AXES = ('batch', scan.LAYERS) + base.KV_AXES[1:]


@dataclasses.dataclass(frozen=True)
class T5:
  """A T5 model: static and hashable; params are passed to every call.

  Attributes:
    config: the architecture (see `t5_config.T5_CONFIGS` for presets).
  """

  config: T5Config
  LAYER_STACKS = STACKS  # where the params hold layers (`specjax.models.scan`)

  @property
  def vocab_size(self) -> int:
    """V, the width of the logits."""
    return self.config.vocab_size

  @property
  def eos_id(self) -> int:
    """T5's end-of-sequence id."""
    return 1

  @property
  def pad_id(self) -> int:
    """T5's padding id (also the decoder start token)."""
    return 0

  def cache_axes(self) -> PyTree:
    """Logical axes of `init_cache`'s leaves: [B, N, H, T] each ([B, L, N, H, T]
    scanned)."""
    if self.config.scan_layers:
      return {scan.LAYERS: {'k': SCANNED_KV_AXES, 'v': SCANNED_KV_AXES}}
    return {f'layers_{i}': {'k': base.KV_AXES, 'v': base.KV_AXES}
            for i in range(self.config.num_decoder_layers)}

  def encoded_axes(self) -> PyTree:
    """Logical axes of `encode`'s leaves: the mask [B, S], cross K/V [B, N, H, S]."""
    return {'mask': ('batch', 'length'), 'cross': self.cache_axes()}

  @property
  def _dtype(self):
    return jnp.dtype(self.config.dtype)

  @property
  def _logits_dtype(self):
    """The attention scores' and softmax's dtype (`T5Config.t5x_rounding`)."""
    cfg = self.config
    return (self._dtype if cfg.t5x_rounding and not cfg.float32_attention_logits
            else jnp.float32)

  def rms_norm(self, x: jax.Array, scale: jax.Array) -> jax.Array:
    """`layers.rms_norm`, rounded as the config says. x [..., D] -> same."""
    return layers.rms_norm(x, scale, round_before_scale=self.config.t5x_rounding)

  def _rel_table(self, rel_embedding: jax.Array) -> jax.Array:
    """The relative position table [N, buckets], in the activation dtype under
    t5x_rounding (T5X rounds it before the lookup)."""
    return rel_embedding.astype(self._dtype) if self.config.t5x_rounding else rel_embedding

  @property
  def unrolled(self) -> 'T5':
    """This model with its layers unrolled (itself when they are)."""
    return self if not self.config.scan_layers else T5(self.config.replace(scan_layers=False))

  def init(self, rng: jax.Array) -> PyTree:
    """Random float32 params in T5X's tree layout and initializers.

    Args:
      rng: a PRNG key.

    Returns:
      Nested dict of float32 arrays, e.g. params['encoder']['layers_0']['attention']
      ['query']['kernel'] [D, N*H] (scanned: params['encoder']['layers'][...] [L, D,
      N*H], the unrolled model's draw stacked). Use under `jax.eval_shape` to get shapes
      for free.
    """
    if self.config.scan_layers:
      return scan.to_scanned(self.unrolled.init(rng), STACKS)
    return t5_params.init(self.config, rng)

  def param_axes(self) -> PyTree:
    """Same tree as `init`, each leaf a tuple of T5X logical axis names (for sharding;
    scanned leaves lead with 'layers')."""
    axes = t5_params.param_axes(self.unrolled.config)
    return scan.to_scanned(axes, STACKS) if self.config.scan_layers else axes

  def embed(self, params: PyTree, tokens: jax.Array) -> jax.Array:
    """tokens [B, K] -> [B, K, D] activations."""
    return jnp.take(params['token_embedder']['embedding'], tokens, axis=0).astype(self._dtype)

  def encode(self, params: PyTree, inputs: jax.Array,
             dropout: layers.Dropout = layers.NO_DROPOUT) -> PyTree:
    """Runs the encoder once and projects every decoder layer's cross-attention K/V.

    Args:
      params: from `init` or a checkpoint.
      inputs: [B, S] int32 tokens, right-padded with the pad id 0 (padding is masked).
      dropout: training only (see `logits`).

    Returns:
      {'mask': [B, S] bool, 'cross': {'layers_{i}': {'k', 'v': [B, N, H, S]}}}.
    """
    cfg, enc = self.config, params['encoder']
    mask = inputs != self.pad_id  # [B, S]
    key_mask = mask[:, None, :]  # [B, 1, S]: padding keys hidden from every query
    bias = (None if cfg.relpos_per_layer else
            self.encoder_bias(enc['relpos_bias']['rel_embedding'], inputs.shape[1]))
    x = dropout(self.embed(params, inputs))  # [B, S, D]
    if cfg.scan_layers:
      layers.scanned_inference_only(dropout)
      x, _ = scan.run(lambda h, p, i: (self.encoder_layer(p, h, key_mask, bias), None), x,
                      enc[scan.LAYERS], cfg.num_encoder_layers, cfg.scan_unroll)
      x = self.rms_norm(x, enc['encoder_norm']['scale'])  # [B, S, D]
      att = params['decoder'][scan.LAYERS]['encoder_decoder_attention']
      kv = {n: jax.vmap(layers.project_kv, (None, 0, None), 1)(
          x, att[name]['kernel'], cfg.num_heads) for n, name in (('k', 'key'), ('v', 'value'))}
      return {'mask': mask, 'cross': {scan.LAYERS: kv}}  # [B, L, N, H, S]
    layer = (base.traced_once(self, 'encoder_layer') if dropout is layers.NO_DROPOUT
             else functools.partial(self.encoder_layer, dropout=dropout))
    for i in range(cfg.num_encoder_layers):
      x = layer(enc[f'layers_{i}'], x, key_mask, bias)
    x = dropout(self.rms_norm(x, enc['encoder_norm']['scale']))  # [B, S, D]
    cross = {}
    for i in range(cfg.num_decoder_layers):
      att = params['decoder'][f'layers_{i}']['encoder_decoder_attention']
      cross[f'layers_{i}'] = {
          'k': layers.project_kv(x, att['key']['kernel'], cfg.num_heads),
          'v': layers.project_kv(x, att['value']['kernel'], cfg.num_heads)}
    return {'mask': mask, 'cross': cross}

  def encoder_bias(self, rel_embedding: jax.Array, length: int) -> jax.Array:
    """The encoder's bidirectional bias [1, N, S, S] from a table [N, buckets]."""
    cfg = self.config
    return layers.encoder_position_bias(self._rel_table(rel_embedding), length,
                                        cfg.relative_attention_num_buckets,
                                        cfg.relative_attention_max_distance)

  def encoder_layer(self, p: PyTree, x: jax.Array, key_mask: jax.Array,
                    bias: jax.Array | None,
                    dropout: layers.Dropout = layers.NO_DROPOUT) -> jax.Array:
    """One encoder layer (self-attention, MLP; each pre-normed, residual): its params p,
    x [B, S, D] -> [B, S, D]; key_mask [B, 1, S] bool (padding hidden), bias [1, N, S, S]
    the relative position bias (None: the layer's own table's), dropout for training only
    (see `logits`)."""
    cfg = self.config
    if bias is None:
      bias = self.encoder_bias(p['relpos_bias']['rel_embedding'], x.shape[1])
    h = self.rms_norm(x, p['pre_attention_layer_norm']['scale'])
    att = p['attention']
    q, k, v = layers.project_qkv(h, att, cfg.num_heads)  # [B, S, N, H], [B, N, H, S]
    y = layers.dot_product_attention(q, k, v, key_mask, bias, dropout, self._logits_dtype)
    x = x + dropout(layers.merge_heads(y, att['out']['kernel'], cfg.scan_layers))
    h = self.rms_norm(x, p['pre_mlp_layer_norm']['scale'])
    return x + dropout(layers.mlp(h, p['mlp'], cfg.mlp_activations, dropout))

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """The decoder start token 0 for every row: tokens [B, 1] and lengths [B] (all 1)."""
    return base.encoder_decoder_prompt(inputs, start_id=0)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> PyTree:
    """Zero self-attention cache {'layers_{i}': {'k', 'v': [B, N, H, T]}}, heads-major
    (scanned: {'layers': {'k', 'v': [B, L, N, H, T]}}).

    Args:
      batch: B.
      max_len: T, the number of decoder positions the cache holds.
      dtype: cache dtype; defaults to the activation dtype `config.dtype`.
    """
    cfg = self.config
    shape = (batch, cfg.num_heads, cfg.head_dim, max_len)
    dtype = jnp.dtype(dtype or cfg.dtype)
    if cfg.scan_layers:
      shape = shape[:1] + (cfg.num_decoder_layers,) + shape[1:]
      return {scan.LAYERS: {'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}}
    return {f'layers_{i}': {'k': jnp.zeros(shape, dtype), 'v': jnp.zeros(shape, dtype)}
            for i in range(cfg.num_decoder_layers)}

  def decode(self, params: PyTree, encoded: PyTree, cache: PyTree, tokens: jax.Array,
             positions: jax.Array, tree: base.Tree | None = None, return_hidden: bool = False,
             dropout: layers.Dropout = layers.NO_DROPOUT) -> Tuple[jax.Array, ...]:
    """Scores K decoder tokens per row and writes their K/V into the cache.

    One code path for a single step (K = 1), a verify call (K = gamma + 1), a prefill and
    the nodes of a token tree (`base.Model.decode` has the contract).

    Args:
      params: model params.
      encoded: what `encode` returned.
      cache: from `init_cache` or a previous `decode`, [B, N, H, T] per layer.
      tokens: [B, K] int32, the tokens at positions positions[b] .. positions[b]+K-1
        (chain), or the tree's nodes at slots tree.base+tree.offset+k.
      positions: [B] int32 first position per row (ignored with a tree); positions[b] + K
        <= T is the caller's job (`base.write_cache`).
      tree: None for a chain, or the token tree's layout (`base.Tree`): the relative
        bias then measures each token's position base + depth against each key's.
      return_hidden: also return the final hidden state [B, K, D] (after decoder_norm,
        the input of the logits projection).
      dropout: training only (see `logits`).

    Returns:
      logits [B, K, V] float32 (next-token logits after each token), the new cache, and
      with return_hidden the hidden state [B, K, D]. Queries see keys at positions <= their
      own (a tree's: the prefix and the slots `tree.visible` names), others are ignored.
    """
    cfg, dec = self.config, params['decoder']
    num_tokens, max_len = tokens.shape[1], jax.tree.leaves(cache)[0].shape[-1]
    layout = self.self_attention_layout(params, positions, num_tokens, max_len, tree)
    x = dropout(self.embed(params, tokens))  # [B, K, D]
    if cfg.scan_layers:
      layers.scanned_inference_only(dropout)
      x, new_cache = self._scanned_decoder(dec[scan.LAYERS], x, cache, layout, encoded)
      return self._close(params, x, new_cache, return_hidden)
    new_cache = {}
    layer = (base.traced_once(self, 'decoder_layer') if dropout is layers.NO_DROPOUT
             else functools.partial(self.decoder_layer, dropout=dropout))
    for name in (f'layers_{i}' for i in range(cfg.num_decoder_layers)):
      x, new_cache[name] = layer(dec[name], x, cache[name], layout, encoded['cross'][name],
                                 encoded['mask'])
    return self._close(params, x, new_cache, return_hidden, dropout)

  def _close(self, params, x, new_cache, return_hidden, dropout=layers.NO_DROPOUT):
    """The final norm and the logits of the last layer's output x [B, K, D]."""
    y = dropout(self.rms_norm(x, params['decoder']['decoder_norm']['scale']))  # [B, K, D]
    logits = self.project(params, y)
    return (logits, new_cache, y) if return_hidden else (logits, new_cache)

  def _scanned_decoder(self, stacked, x, cache, layout, encoded):
    """The decoder's layers as one scan over stacked params: x [B, K, D], the stacked cache
    and cross K/V [B, L, N, H, T or S] -> (x, the cache with the call's K/V written)."""
    kv = cache[scan.LAYERS]
    layout = layout._replace(blocks=split_attention.split(  # once, not in every layer
        layout.mask, layout.bias, layout.write_start, x.shape[1], self._logits_dtype))

    def body(h, p, i):
      cross = {n: scan.layer_slice(a, i) for n, a in encoded['cross'][scan.LAYERS].items()}
      own = {n: scan.layer_slice(a, i) for n, a in kv.items()}  # [B, N, H, T]
      return self.decoder_layer(p, h, own, layout, cross, encoded['mask'], new_only=True)

    x, new = scan.run(body, x, stacked, self.config.num_decoder_layers, self.config.scan_unroll)
    return x, {scan.LAYERS: {n: scan.write_layers(kv[n], new[n], layout.write_start)
                             for n in kv}}

  def self_attention_layout(self, params: PyTree, positions: jax.Array, num_tokens: int,
                            max_len: int, tree: base.Tree | None = None) -> layers.SelfLayout:
    """Where a decode call's K tokens sit and what they attend to (`decode`'s layout,
    which a draft layer over the decoder's positions, EAGLE's, shares).

    Args:
      params: model params (the decoder's relative position table).
      positions: [B] int32, each row's first position (chain; ignored with a tree).
      num_tokens: K; max_len: T, the cache length.
      tree: None for a chain, or the token tree's layout.
    """
    cfg = self.config
    if tree is None:
      write_start = positions.astype(jnp.int32)
      mask = base.causal_mask(write_start, num_tokens, max_len)  # [B, K, T]
      layout = layers.SelfLayout(write_start=write_start, mask=mask, bias=None)
    else:
      query_pos, key_pos, mask, write_start = base.attention_layout(positions, num_tokens,
                                                                    max_len, tree)
      layout = layers.SelfLayout(write_start, mask, None, query_pos, key_pos)
    if cfg.relpos_per_layer:
      return layout
    return layout._replace(bias=self.self_attention_bias(
        params['decoder']['relpos_bias']['rel_embedding'], layout))

  def self_attention_bias(self, rel_embedding: jax.Array,
                          layout: layers.SelfLayout) -> jax.Array:
    """The decoder's relative position bias [B, N, K, T] of a layout from a table [N,
    buckets]."""
    cfg = self.config
    return layers.layout_position_bias(
        self._rel_table(rel_embedding), layout, cfg.relative_attention_num_buckets,
        cfg.relative_attention_max_distance)

  def decoder_layer(self, p: PyTree, x: jax.Array, cache: PyTree, layout: layers.SelfLayout,
                    cross: PyTree, cross_mask: jax.Array,
                    dropout: layers.Dropout = layers.NO_DROPOUT,
                    new_only: bool = False) -> Tuple[jax.Array, PyTree]:
    """One decoder layer: self-attention (writing its K/V into the cache), cross-attention
    to the encoder's K/V, MLP, each pre-normed and residual.

    Args:
      p: the layer's params (only the cross-attention's query and out kernels are read:
        its K/V come projected in `cross`).
      x: [B, K, D] its input.
      cache: {'k', 'v': [B, N, H, T]}, the layer's self-attention cache.
      layout: from `self_attention_layout`.
      cross: {'k', 'v': [B, N, H, S]}, the encoder output's keys and values.
      cross_mask: [B, S] bool, the real input tokens.
      dropout: training only.
      new_only: attend over the unwritten cache and this call's K/V, and give those out,
        {'k', 'v': [B, K, N, H]} (scanned layers: the stacked cache takes them after the
        scan; `specjax.models.split_attention`).

    Returns:
      The layer's output [B, K, D] and its new cache (or this call's K/V, `new_only`).
    """
    cfg = self.config
    h = self.rms_norm(x, p['pre_self_attention_layer_norm']['scale'])
    att = p['self_attention']
    q, k, v = layers.project_qkv(h, att, cfg.num_heads)  # [B, K, N, H], [B, N, H, K]
    bias = (layout.bias if layout.bias is not None else
            self.self_attention_bias(p['relpos_bias']['rel_embedding'], layout))
    if new_only:
      k, v = k.astype(cache['k'].dtype), v.astype(cache['v'].dtype)
      new_cache = {'k': scan.token_major(k), 'v': scan.token_major(v)}  # [B, K, N, H]
      y = split_attention.t5_self_attention(q, *(a.astype(x.dtype) for a in (
          cache['k'], cache['v'], k, v)), layout.mask, bias, layout.write_start,
                                            self._logits_dtype, layout.blocks)
    else:
      new_cache = {n: base.write_cache(cache[n], a, layout.write_start)  # [B, N, H, T]
                   for n, a in (('k', k), ('v', v))}
      y = layers.dot_product_attention(q, new_cache['k'].astype(x.dtype), new_cache[
          'v'].astype(x.dtype), layout.mask, bias, dropout, self._logits_dtype)
    joined = cfg.scan_layers  # an out kernel sliced from the stacked ones (`merge_heads`)
    x = x + dropout(layers.merge_heads(y, att['out']['kernel'], joined))
    h = self.rms_norm(x, p['pre_cross_attention_layer_norm']['scale'])
    att = p['encoder_decoder_attention']
    q = layers.project_heads(h, att['query']['kernel'], cfg.num_heads)
    y = layers.dot_product_attention(q, cross['k'], cross['v'], cross_mask[:, None, :],
                                     dropout=dropout, logits_dtype=self._logits_dtype)
    x = x + dropout(layers.merge_heads(y, att['out']['kernel'], joined))
    h = self.rms_norm(x, p['pre_mlp_layer_norm']['scale'])
    x = x + dropout(layers.mlp(h, p['mlp'], cfg.mlp_activations, dropout))
    return x, new_cache

  def project(self, params: PyTree, hidden: jax.Array) -> jax.Array:
    """The output projection: final hidden states [B, K, D] (after decoder_norm) -> logits
    [B, K, V] float32 (heads that draft from the target's hidden states reuse it)."""
    cfg = self.config
    if cfg.logits_via_embedding:
      # Tied (v1.0): scale by 1/sqrt(D) as T5X's embedding.attend path and HF do.
      logits = layers.output_logits(hidden, params['token_embedder']['embedding'],
                                    vocab_axis=0)
      return logits / math.sqrt(cfg.emb_dim)
    return layers.output_logits(hidden, params['decoder']['logits_dense']['kernel'],
                                vocab_axis=1)

  def logits(self, params: PyTree, inputs: jax.Array, decoder_input_tokens: jax.Array,
             dropout_rate: float = 0.0, dropout_rng: jax.Array | None = None) -> jax.Array:
    """Teacher-forced logits through the decode path (for training and scoring).

    Args:
      params: model params.
      inputs: [B, S] int32 encoder tokens (0 = padding).
      decoder_input_tokens: [B, T] int32, starting with the start token 0.
      dropout_rate: training only, T5X's placement: on the embeddings, the attention
        weights, each sublayer's output, the MLP's hidden units and the final norms.
      dropout_rng: PRNG key of the masks (needed when dropout_rate > 0).

    Returns:
      [B, T, V] float32: position t predicts decoder token t + 1.
    """
    batch, length = decoder_input_tokens.shape
    dropout = layers.Dropout(dropout_rate, dropout_rng) if dropout_rate else layers.NO_DROPOUT
    cache = self.init_cache(batch, length)
    logits, _ = self.decode(params, self.encode(params, inputs, dropout), cache,
                            decoder_input_tokens, jnp.zeros((batch,), jnp.int32),
                            dropout=dropout)
    return logits
