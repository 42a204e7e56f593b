"""The layers of the decoder-only language models: norms, rotary positions, grouped-query
attention over a fixed-shape cache, and the MLPs.

Shape letters: B batch, K tokens in this call, T cache length, D model dim, N query heads,
M KV heads, R = N / M query heads per KV head, H head dim, F mlp dim.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.lm_config import LMConfig

_ACTIVATIONS = {
    'silu': jax.nn.silu,
    'gelu_new': lambda x: jax.nn.gelu(x, approximate=True),
    'gelu': lambda x: jax.nn.gelu(x, approximate=False),
    'relu': jax.nn.relu,
}


def rms_norm(x: jax.Array, scale: jax.Array, eps: float) -> jax.Array:
  """RMSNorm of x [..., D] in float32, cast back to x's dtype before the scale (as
  Hugging Face's Llama)."""
  x32 = x.astype(jnp.float32)
  x32 = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
  return scale.astype(x.dtype) * x32.astype(x.dtype)


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array, eps: float) -> jax.Array:
  """LayerNorm of x [..., D], statistics in float32."""
  x32 = x.astype(jnp.float32)
  mean = jnp.mean(x32, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x32 - mean), axis=-1, keepdims=True)
  y = (x32 - mean) * jax.lax.rsqrt(var + eps)
  return (y * scale.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def norm(x: jax.Array, params: dict, cfg: LMConfig) -> jax.Array:
  """The family's norm: params {'scale'} (RMSNorm) or {'scale', 'bias'} (LayerNorm)."""
  if 'bias' in params:
    return layer_norm(x, params['scale'], params['bias'], cfg.norm_eps)
  return rms_norm(x, params['scale'], cfg.norm_eps)


def rope_frequencies(cfg: LMConfig) -> np.ndarray:
  """The rotary inverse frequencies [H/2] float32, scaled as `cfg.rope_type` says.

  'linear' divides every frequency by the factor; 'llama3' divides the low frequencies
  (wavelength above original_max_len / low_freq_factor), keeps the high ones (below
  original_max_len / high_freq_factor) and blends those between (Llama 3.1's scheme).
  """
  dim = cfg.head_dim
  inv = (1.0 / (cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32)
                                   / dim))).astype(np.float32)
  if cfg.rope_type == 'linear':
    return (inv / cfg.rope_factor).astype(np.float32)
  if cfg.rope_type == 'llama3':
    old, low, high = cfg.rope_original_max_len, cfg.rope_low_freq_factor, cfg.rope_high_freq_factor
    wavelen = 2 * math.pi / inv
    scaled = np.where(wavelen > old / low, inv / cfg.rope_factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / cfg.rope_factor + smooth * scaled
    medium = ~(wavelen < old / high) & ~(wavelen > old / low)
    return np.where(medium, blended, scaled).astype(np.float32)
  return inv


def apply_rope(x: jax.Array, positions: jax.Array, inv_freq: np.ndarray) -> jax.Array:
  """Rotates x [B, K, N, H] by its positions [B, K] (the half-split layout of Hugging
  Face's Llama: pairs (i, i + H/2))."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)  # [B, K, H/2]
  angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [B, K, 1, H]
  cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
  half = x.shape[-1] // 2
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x * cos + rotated * sin


def dense(x: jax.Array, params: dict, spec: str) -> jax.Array:
  """einsum(spec, x, kernel) (+ bias), in x's dtype."""
  y = jnp.einsum(spec, x, params['kernel'].astype(x.dtype))
  return y + params['bias'].astype(x.dtype) if 'bias' in params else y


def group_queries(q: jax.Array, kv_heads: int) -> jax.Array:
  """Queries [B, K, N, H], scaled by 1/sqrt(H), grouped by the KV head M they read and
  flattened with the tokens, Q = (N / M) * K: [B, M, Q, H]."""
  b, k, n, h = q.shape
  q = q * jnp.asarray(1.0 / math.sqrt(h), q.dtype)
  return q.reshape(b, k, kv_heads, n // kv_heads, h).transpose(0, 2, 3, 1, 4).reshape(
      b, kv_heads, n // kv_heads * k, h)


def group_mask(mask: jax.Array, group: int) -> jax.Array:
  """A mask [B, K, T] as the grouped queries' [B, 1, Q, T], Q = group * K."""
  b, k, t = mask.shape
  return jnp.broadcast_to(mask[:, None, None], (b, 1, group, k, t)).reshape(b, 1, group * k, t)


def ungroup(out: jax.Array, num_heads: int) -> jax.Array:
  """Grouped outputs [B, M, Q, H] -> [B, K, N, H] (`group_queries` undone)."""
  b, m, q, h = out.shape
  k = q * m // num_heads
  return out.reshape(b, m, num_heads // m, k, h).transpose(0, 3, 1, 2, 4).reshape(
      b, k, num_heads, h)


def attention(q: jax.Array, keys: jax.Array, values: jax.Array, mask: jax.Array) -> jax.Array:
  """Grouped-query attention of q [B, K, N, H] over a cache keys, values [B, M, H, T].

  Args:
    q: the queries, already position-encoded.
    keys, values: the cache after this call's writes; M divides N and query head n reads
      KV head n // (N / M).
    mask: [B, K, T] bool, which keys each query sees.

  Returns:
    [B, K, N, H] in q's dtype; scores and softmax in float32.
  """
  n, m = q.shape[2], keys.shape[1]
  grouped = group_queries(q, m)  # [B, M, Q, H]
  scores = jnp.einsum('BMQH,BMHT->BMQT', grouped, keys,
                      preferred_element_type=jnp.float32)  # [B, M, Q, T]
  scores = jnp.where(group_mask(mask, n // m), scores, jnp.finfo(jnp.float32).min)
  weights = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
  return ungroup(jnp.einsum('BMQT,BMHT->BMQH', weights, values), n)  # [B, K, N, H]


def mlp(x: jax.Array, params: dict, cfg: LMConfig) -> jax.Array:
  """x [B, K, D] -> [B, K, D]: down(act(gate(x)) * up(x)) (llama) or down(act(up(x)))."""
  act = _ACTIVATIONS[cfg.activation]
  h = act(dense(x, params['up'] if not cfg.gated else params['gate'], 'BKD,DF->BKF'))
  if cfg.gated:
    h = h * dense(x, params['up'], 'BKD,DF->BKF')  # [B, K, F]
  return dense(h, params['down'], 'BKF,FD->BKD')
