"""T5 building blocks as pure functions over slices of the T5X params dict.

Shape letters: B batch, S encoder length, T decoder cache length, K tokens in this call,
N heads, H head dim, D model dim, F mlp dim, V vocab.

Kernels are stored 2-D as in T5X checkpoints ([D, N*H] for query/key/value, [N*H, D] for
out); they are reshaped (free) to expose the heads inside the einsums.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable, Dict, NamedTuple, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PyTree = dict
LAYER_NORM_EPS = 1e-6

# T5X's 'gelu' is flax's default tanh approximation, i.e. HF's `gelu_new`.
ACTIVATIONS: Dict[str, Callable[[jax.Array], jax.Array]] = {
    'relu': jax.nn.relu,
    'gelu': functools.partial(jax.nn.gelu, approximate=True),
    'linear': lambda x: x,
}


def mlp_kernel_names(activations: Sequence[str]) -> list:
  """T5X names the input kernels `wi` for one activation and `wi_0`, `wi_1`, ... for more."""
  if len(activations) == 1:
    return ['wi']
  return [f'wi_{i}' for i in range(len(activations))]


def _fmix32(h: jax.Array) -> jax.Array:
  """MurmurHash3's 32-bit finalizer: every input bit flips each output bit with p ~ 1/2."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def hashed_uniform_bits(key: jax.Array, shape: Tuple[int, ...]) -> jax.Array:
  """[*shape] uint32 pseudo-random bits: two 32-bit seeds drawn from `key`, then a hash of
  each element's index.

  Dropout needs tens of millions of bits per step; threefry per element costs about a
  third of a training step on CPU, this hash a few integer ops per element.
  """
  seeds = jax.random.bits(key, (2,), jnp.uint32)
  index = jax.lax.iota(jnp.uint32, math.prod(shape)).reshape(shape)
  return _fmix32(_fmix32(index * jnp.uint32(0x9E3779B1) + seeds[0]) ^ seeds[1])


class SelfLayout(NamedTuple):
  """A decode call's self-attention layout (`T5.self_attention_layout`).

  Attributes:
    write_start: [B] int32, the cache slot of the call's first token.
    mask: [B, K, T] bool, the slots each token attends to.
    bias: [B, N, K, T], the relative position bias; None where each layer has its own
      table (`T5Config.relpos_per_layer`) and computes it from the positions below.
    query_pos: [B, K] int32, a token tree's query positions (None: a chain's, from
      write_start).
    key_pos: [B, T] int32, a token tree's key positions (None: a chain's, the slots).
    blocks: a scanned stack's `split_attention.Blocks` of mask and bias, split once for
      every layer (None: each layer splits its own).
  """
  write_start: jax.Array
  mask: jax.Array
  bias: jax.Array | None
  query_pos: jax.Array | None = None
  key_pos: jax.Array | None = None
  blocks: Any = None


class Dropout:
  """Inverted dropout for training (T5X's `dropout_rate`); the identity at rate 0.

  One instance serves a whole forward pass: each call folds a call counter into `rng`,
  so every site draws its own mask (`hashed_uniform_bits`). Inference passes none
  (`NO_DROPOUT`).
  """

  def __init__(self, rate: float, rng: Optional[jax.Array]):
    if not 0.0 <= rate < 1.0:
      raise ValueError(f'dropout rate must be in [0, 1), got {rate}')
    self.rate, self.rng, self.calls = rate, rng, 0

  def __call__(self, x: jax.Array) -> jax.Array:
    if not self.rate:
      return x
    self.calls += 1
    bits = hashed_uniform_bits(jax.random.fold_in(self.rng, self.calls), x.shape)
    keep = bits >= jnp.uint32(round(self.rate * 2.0**32))
    return jnp.where(keep, x / (1.0 - self.rate), jnp.zeros_like(x)).astype(x.dtype)


NO_DROPOUT = Dropout(0.0, None)


def scanned_inference_only(dropout: Dropout) -> None:
  """Scanned layers run inference only (one Dropout instance would give every layer of
  the scan the same masks).

  Raises:
    ValueError: dropout was asked for (one line naming the conversion).
  """
  if dropout is not NO_DROPOUT:
    raise ValueError('scanned layers run inference only: train the unrolled model '
                     '(T5(config.replace(scan_layers=False))) and convert its params with '
                     'specjax.models.scan.to_scanned')


def rms_norm(x: jax.Array, scale: jax.Array, round_before_scale: bool = False) -> jax.Array:
  """T5 LayerNorm: x / rms(x) * scale, no mean and no bias. x [..., D] -> same shape/dtype.

  round_before_scale: round x / rms(x) to x's dtype and multiply by the scale in that
  dtype, as T5X's examples network does (the same values in float32).
  """
  # The statistics run in float32 even for bfloat16 activations, as in T5X and HF.
  x32 = x.astype(jnp.float32)
  var = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)  # [..., 1]
  if round_before_scale:
    return (x32 * jax.lax.rsqrt(var + LAYER_NORM_EPS)).astype(x.dtype) * scale.astype(x.dtype)
  return (x32 * jax.lax.rsqrt(var + LAYER_NORM_EPS) * scale).astype(x.dtype)


def dense(x: jax.Array, kernel: jax.Array) -> jax.Array:
  """x [..., C] times kernel [C, F] -> [..., F] in x's dtype, accumulated in float32.

  The kernel is read as stored, once: it is cast to x's dtype only where the two differ
  (float32 params with bfloat16 activations: a cast XLA fuses into the product), and
  the float32 accumulation is the product's own (`preferred_element_type`), so a decode
  step streams no float32 copy of a bfloat16 weight.
  """
  y = jax.lax.dot_general(x, kernel.astype(x.dtype), (((x.ndim - 1,), (0,)), ((), ())),
                          preferred_element_type=jnp.float32)
  return y.astype(x.dtype)


def output_logits(y: jax.Array, table: jax.Array, vocab_axis: int) -> jax.Array:
  """y [B, K, D] times the output table -> logits [B, K, V] float32.

  Args:
    y: [B, K, D] final decoder activations.
    table: the logits kernel [D, V] (vocab_axis 1) or the tied embedding [V, D] (0).
    vocab_axis: which axis of `table` is V.

  The product runs in the wider of the two dtypes (bfloat16 activations with bfloat16
  params: bfloat16 products, as exact as float32 ones of the same values) and accumulates
  in float32, so the table is streamed as stored instead of as a float32 copy.
  """
  dtype = jnp.promote_types(y.dtype, table.dtype)
  return jax.lax.dot_general(y.astype(dtype), table.astype(dtype),
                             (((2,), (1 - vocab_axis,)), ((), ())),
                             preferred_element_type=jnp.float32)


def project_heads(x: jax.Array, kernel: jax.Array, num_heads: int) -> jax.Array:
  """x [B, K, D] times a [D, N*H] kernel -> [B, K, N, H] in x's dtype."""
  b, k, _ = x.shape
  # One [B*K, D] x [D, N*H] product, the heads split off its output behind a barrier: when
  # the product's output was [.., N, H] (or fed a reshape to it), TPU's layout assignment
  # relayouted the kernel on every decode step of K > 1 tokens, tripling its reads.
  y = jax.lax.optimization_barrier(dense(x, kernel))  # [B, K, N*H]
  return y.reshape(b, k, num_heads, kernel.shape[1] // num_heads)


def project_kv(x: jax.Array, kernel: jax.Array, num_heads: int) -> jax.Array:
  """x [B, T, D] times a [D, N*H] key or value kernel -> [B, N, H, T] (heads-major).

  Keys and values are stored heads-major, with T minor, as the attention products read
  them: XLA:CPU then relayouts no cache and no cross-attention K/V per decode step.
  """
  return jax.lax.platform_dependent(
      x, kernel, cpu=functools.partial(project_kv_t_major, num_heads=num_heads),
      default=functools.partial(project_kv_t_minor, num_heads=num_heads))


def project_kv_t_major(x: jax.Array, kernel: jax.Array, num_heads: int) -> jax.Array:
  """XLA:CPU: projected as [B, T, N, H] and then transposed (producing [B, N, H, T] in the
  product itself made it relayout the kernel or read it many times per call)."""
  return jnp.transpose(project_heads(x, kernel, num_heads), (0, 2, 3, 1))


def project_kv_t_minor(x: jax.Array, kernel: jax.Array, num_heads: int) -> jax.Array:
  """TPU: one [N*H, D] x [D, B*T] product, already T-minor, so the new keys and values
  enter the cache without the relayout copy the transposed [B, T, N, H] needed."""
  b, t, d = x.shape
  y = jax.lax.dot_general(kernel.astype(x.dtype), x.reshape(b * t, d), (((0,), (1,)), ((), ())),
                          preferred_element_type=jnp.float32).astype(x.dtype)  # [N*H, B*T]
  y = y.reshape(num_heads, kernel.shape[1] // num_heads, b, t)  # [N, H, B, T]
  return jnp.transpose(y, (2, 0, 1, 3))


def project_qkv(x: jax.Array, att: dict, num_heads: int):
  """Self-attention's projections of x [B, K, D] by att's query, key and value kernels:
  q [B, K, N, H] and k, v [B, N, H, K] (heads-major, as `project_kv`)."""
  q = project_heads(x, att['query']['kernel'], num_heads)
  k, v = (project_kv(x, att[n]['kernel'], num_heads) for n in ('key', 'value'))
  return q, k, v


def merge_heads(x: jax.Array, kernel: jax.Array, joined: bool = False) -> jax.Array:
  """x [B, N, K, H] (as `dot_product_attention` returns it) times the [N*H, D] out kernel
  -> [B, K, D].

  joined: contract x as [B, K, N*H] with the kernel as it is stored. By default the heads
  and head dim are contracted in place with the kernel viewed as [N, H, D] (free for a
  kernel that is a parameter; taking [B, K, N*H] made TPU relayout every attention output
  twice per call). A scanned layer's kernel is a slice of the stacked one: viewed as [N,
  H, D], TPU copied the slice in every layer (a 4096 x 4096 kernel: 67 MB read and
  written per layer and attention), while the joined contraction reads it in place.
  """
  b, n, k, h = x.shape
  if joined:
    y = jnp.einsum('bnkh->bknh', x).reshape(b, k, n * h)
    return jax.lax.dot_general(y, kernel.astype(x.dtype), (((2,), (0,)), ((), ())),
                               preferred_element_type=jnp.float32).astype(x.dtype)
  y = jax.lax.dot_general(x, kernel.reshape(n, h, -1).astype(x.dtype),
                          (((1, 3), (0, 1)), ((), ())), preferred_element_type=jnp.float32)
  return y.astype(x.dtype)


def dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array,
                          bias: jax.Array | None = None, dropout: Dropout = NO_DROPOUT,
                          logits_dtype=jnp.float32) -> jax.Array:
  """Unscaled softmax attention (T5 folds 1/sqrt(H) into the query init).

  Args:
    q: [B, K, N, H] queries.
    k: [B, N, H, T] keys, heads-major (T is S for cross attention; see `project_kv`).
    v: [B, N, H, T] values, heads-major.
    mask: [B, K, T] or [B, 1, T] bool, True where the query may see the key.
    bias: optional [B or 1, N, K, T] relative position bias (added in logits_dtype).
    dropout: applied to the attention weights (training only).
    logits_dtype: the dtype of the scores, the bias sum and the softmax: float32 (the
      default, so that bfloat16 activations keep exact-ish ranking), or the activation
      dtype, as T5X's examples network computes them without float32_attention_logits.

  Returns:
    [B, N, K, H] in v's dtype (heads-major, as `merge_heads` takes it).
  """
  scores = jnp.einsum('bknh,bnht->bnkt', q, k, preferred_element_type=logits_dtype)
  if bias is not None:
    scores = scores + bias.astype(logits_dtype)
  # Masked scores are replaced (not added to): the dtype's most negative finite value
  # (float32's min rounds to -inf in bfloat16, and a row of -inf softmaxes to NaN).
  scores = jnp.where(mask[:, None, :, :], scores,
                     jnp.finfo(logits_dtype).min)  # [B, N, K, T]
  probs = dropout(jax.nn.softmax(scores, axis=-1).astype(v.dtype))
  return jnp.einsum('bnkt,bnht->bnkh', probs, v)


def mlp(x: jax.Array, params: PyTree, activations: Sequence[str],
        dropout: Dropout = NO_DROPOUT) -> jax.Array:
  """T5 MLP: the product of act_i(x @ wi_i), dropout, then wo. x [B, K, D] -> [B, K, D]."""
  hidden = None
  for name, act in zip(mlp_kernel_names(activations), activations):
    h = ACTIVATIONS[act](dense(x, params[name]['kernel']))
    hidden = h if hidden is None else hidden * h  # [B, K, F]
  hidden = dropout(hidden)
  return dense(hidden, params['wo']['kernel'])


@functools.lru_cache(maxsize=None)
def _bucket_table(bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
  """Bucket of |distance| for distances 0..max_distance (beyond that: the last one)."""
  if bidirectional:
    num_buckets //= 2
  max_exact = num_buckets // 2
  n = np.arange(max_distance + 1)
  # float32 numpy reproduces Mesh TF / HF's float32 log exactly, including at the
  # boundaries (16, 32, 64, ...) where the log ratio is an integer.
  with np.errstate(divide='ignore'):
    large = (np.log(n.astype(np.float32) / np.float32(max_exact))
             / np.float32(math.log(max_distance / max_exact))
             * np.float32(num_buckets - max_exact))
  large = max_exact + np.where(n < max_exact, 0, large).astype(np.int64)
  return np.where(n < max_exact, n, np.minimum(large, num_buckets - 1)).astype(np.int32)


def relative_position_bucket(relative_position, bidirectional: bool, num_buckets: int,
                             max_distance: int):
  """T5's bucket of relative_position = key_pos - query_pos (numpy or jax int array).

  Bidirectional (encoder): half the buckets for keys after the query. Unidirectional
  (decoder): keys after the query fall in bucket 0 (they are masked anyway).
  """
  xp = jnp if isinstance(relative_position, jax.Array) else np
  table = xp.asarray(_bucket_table(bidirectional, num_buckets, max_distance))
  if bidirectional:
    offset = xp.where(relative_position > 0, num_buckets // 2, 0)
    distance = xp.abs(relative_position)
  else:
    offset = 0
    distance = xp.maximum(-relative_position, 0)
  distance = xp.minimum(distance, max_distance)
  return (offset + xp.take(table, distance)).astype(xp.int32)


def encoder_position_bias(rel_embedding: jax.Array, length: int, num_buckets: int,
                          max_distance: int) -> jax.Array:
  """Bidirectional bias [1, N, S, S] float32 from rel_embedding [N, buckets]."""
  pos = np.arange(length)
  buckets = relative_position_bucket(pos[None, :] - pos[:, None], True, num_buckets,
                                     max_distance)  # [S, S], static
  return jnp.take(rel_embedding, jnp.asarray(buckets), axis=1)[None].astype(jnp.float32)


def _bucket_starts(bidirectional: bool, num_buckets: int, max_distance: int) -> np.ndarray:
  """The smallest |distance| of each bucket 1.. of one direction (`_bucket_table` rises by
  steps from bucket 0, so a distance's bucket is the number of starts at or below it)."""
  table = _bucket_table(bidirectional, num_buckets, max_distance)
  top = num_buckets // 2 if bidirectional else num_buckets
  return np.array([np.argmax(table >= j) if table[-1] >= j else max_distance + 1
                   for j in range(1, top)], np.int32)


def decoder_position_bias(rel_embedding: jax.Array, positions: jax.Array, num_tokens: int,
                          max_len: int, num_buckets: int, max_distance: int) -> jax.Array:
  """Causal bias [B, N, K, T] for queries at positions[b] + k vs keys 0..T-1, in
  rel_embedding's dtype (the float32 scores take it exactly).

  Computed without gathers (the buckets by comparisons with each bucket's first distance,
  the bias by a one-hot product): a gather per step made TPU's decode step read about as
  much for the bias as for a layer's weights. Equal to `relative_position_bucket`'s
  buckets looked up in rel_embedding: each entry is one table entry times 1, exact in
  float32 and so in the table's own dtype, which halves what every layer reads of it
  when the table is bfloat16.
  """
  query_pos = positions[:, None] + jnp.arange(num_tokens)[None, :]  # [B, K]
  distance = query_pos[:, :, None] - jnp.arange(max_len)[None, None, :]  # [B, K, T]
  return _causal_bias(rel_embedding, distance, num_buckets, max_distance)


def tree_position_bias(rel_embedding: jax.Array, query_pos: jax.Array, key_pos: jax.Array,
                       num_buckets: int, max_distance: int) -> jax.Array:
  """`decoder_position_bias` for queries at query_pos [B, K] and keys at key_pos [B, T]
  (a token tree's: siblings share a position, slots are not positions) -> [B, N, K, T]."""
  distance = query_pos[:, :, None] - key_pos[:, None, :]  # [B, K, T]
  return _causal_bias(rel_embedding, distance, num_buckets, max_distance)


def _causal_bias(rel_embedding: jax.Array, distance: jax.Array, num_buckets: int,
                 max_distance: int) -> jax.Array:
  """The unidirectional bias [B, N, K, T] of distance [B, K, T] = query - key position
  (see `decoder_position_bias`)."""
  starts = jnp.asarray(_bucket_starts(False, num_buckets, max_distance))  # [buckets - 1]
  buckets = jnp.sum(distance[..., None] >= starts, axis=-1)  # [B, K, T]; keys ahead: 0
  one_hot = jax.nn.one_hot(buckets, num_buckets, dtype=jnp.float32)  # [B, K, T, buckets]
  bias = jnp.einsum('nj,bktj->bnkt', rel_embedding.astype(jnp.float32), one_hot,
                    precision=jax.lax.Precision.HIGHEST)  # [B, N, K, T]
  return bias.astype(rel_embedding.dtype)


def layout_position_bias(rel_embedding: jax.Array, layout: SelfLayout, num_buckets: int,
                         max_distance: int) -> jax.Array:
  """The decoder's relative position bias [B, N, K, T] of a call's layout: a chain's
  (`decoder_position_bias`) or a token tree's (`tree_position_bias`)."""
  if layout.query_pos is None:
    num_tokens, max_len = layout.mask.shape[1:]
    return decoder_position_bias(rel_embedding, layout.write_start, num_tokens, max_len,
                                 num_buckets, max_distance)
  return tree_position_bias(rel_embedding, layout.query_pos, layout.key_pos, num_buckets,
                            max_distance)
