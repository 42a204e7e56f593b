"""Self-attention over a read-only cache and a call's own new keys, without writing first.

An unrolled layer writes its K new keys and values into its cache and attends over the
written cache. A scanned layer's cache is a slice of the stacked cache: writing into it
makes a copy of the slice in every layer (the stacked cache takes the new entries once,
after the scan, `specjax.models.scan.write_layers`), and TPU then also lays the copy out
again for the attention. Here the layer attends over two blocks instead, the cache as it
was (read in place) and the call's new entries, with one softmax over both: the scores,
probabilities and output are those of attending over the written cache. The K slots the
call writes hold stale entries in the unwritten cache, so they are hidden there and their
mask and bias columns go with the new block.

Shape letters: B batch, K tokens in this call, T cache length, N query heads, H head dim.
"""
from __future__ import annotations

from typing import NamedTuple, Tuple

import jax
import jax.numpy as jnp

from specjax.models import lm_layers


def written_columns(x: jax.Array, write_start: jax.Array, count: int) -> jax.Array:
  """x [B, ..., T] -> [B, ..., K]: each row's columns write_start[b] .. + K - 1 (the slots
  the call writes), K = count."""
  take = lambda row, start: jax.lax.dynamic_slice_in_dim(row, start, count, axis=-1)
  return jax.vmap(take)(x, write_start.astype(jnp.int32))


def without_written(mask: jax.Array, write_start: jax.Array, count: int) -> jax.Array:
  """mask [B, K, T] with each row's slots write_start[b] .. + K - 1 hidden (they hold the
  stale entries of the cache before this call's write)."""
  slots = jnp.arange(mask.shape[-1], dtype=jnp.int32)[None]  # [1, T]
  start = write_start.astype(jnp.int32)[:, None]
  return mask & ~((slots >= start) & (slots < start + count))[:, None, :]


def joint_softmax(old: jax.Array, new: jax.Array) -> Tuple[jax.Array, jax.Array]:
  """One softmax over the last axis of two blocks of scores [..., T] and [..., K]: the
  blocks of softmax(concatenate([old, new], -1)), without the concatenation."""
  top = jnp.maximum(jnp.max(old, axis=-1, keepdims=True), jnp.max(new, axis=-1, keepdims=True))
  old, new = jnp.exp(old - top), jnp.exp(new - top)
  total = jnp.sum(old, axis=-1, keepdims=True) + jnp.sum(new, axis=-1, keepdims=True)
  return old / total, new / total


def _two_blocks(q: jax.Array, blocks, masks, specs: Tuple[str, str], logits_dtype=jnp.float32,
               biases=(None, None)) -> jax.Array:
  """Attention of q over two blocks of keys and values, one softmax over both.

  Args:
    q: the queries, in the first operand's layout of specs[0].
    blocks: ((cache keys, cache values), (new keys, new values)), each in the second
      operand's layout of specs[0] (its last axis the block's slots).
    masks: for each block, where a score counts (broadcast against the scores).
    specs: (the scores' einsum, the output's einsum); the output is float32.
    logits_dtype: the scores' and the softmax's dtype.
    biases: for each block, added to its scores (None: none).
  """
  floor = jnp.finfo(logits_dtype).min
  scores = []
  for (keys, _), mask, bias in zip(blocks, masks, biases):
    s = jnp.einsum(specs[0], q, keys, preferred_element_type=logits_dtype)
    s = s if bias is None else s + bias
    scores.append(jnp.where(mask, s, floor))
  probs = joint_softmax(*scores)
  old, new = (jnp.einsum(specs[1], p.astype(v.dtype), v, preferred_element_type=jnp.float32)
              for p, (_, v) in zip(probs, blocks))
  return old + new


class Blocks(NamedTuple):
  """The masks and biases of the two blocks, split from a call's [B, K, T] ones: the same
  in every layer of a scanned stack, so split once per call (`split`), not in each layer.

  Attributes:
    masks: ([B, 1, K, T] the cache's, its written slots hidden; [B, 1, K, K] the new
      entries').
    biases: ([B, N, K, T], [B, N, K, K]) in the scores' dtype, or (None, None): no bias,
      or each layer's own (T5's `relpos_per_layer`), split in the layer.
  """
  masks: Tuple[jax.Array, jax.Array]
  biases: Tuple[jax.Array | None, jax.Array | None]


def split_bias(bias: jax.Array, batch: int, write_start: jax.Array, count: int,
               logits_dtype=jnp.float32) -> Tuple[jax.Array, jax.Array]:
  """A bias [B or 1, N, K, T] -> the blocks' biases ([B, N, K, T], [B, N, K, K])."""
  bias = jnp.broadcast_to(bias, (batch,) + bias.shape[1:]).astype(logits_dtype)
  return bias, written_columns(bias, write_start, count)


def split(mask: jax.Array, bias: jax.Array | None, write_start: jax.Array, count: int,
          logits_dtype=jnp.float32) -> Blocks:
  """The `Blocks` of a call's mask [B, K, T] and bias ([B or 1, N, K, T] or None) for K =
  count new entries written at write_start [B]."""
  masks = (without_written(mask, write_start, count)[:, None],
           written_columns(mask, write_start, count)[:, None])
  biases = (None, None) if bias is None else split_bias(bias, mask.shape[0], write_start,
                                                        count, logits_dtype)
  return Blocks(masks, biases)


def t5_self_attention(q: jax.Array, cache_k: jax.Array, cache_v: jax.Array,
                      new_k: jax.Array, new_v: jax.Array, mask: jax.Array,
                      bias: jax.Array | None, write_start: jax.Array,
                      logits_dtype=jnp.float32, blocks: Blocks | None = None) -> jax.Array:
  """T5's unscaled attention (`t5_layers.dot_product_attention`) over the cache as if the
  call's keys and values had been written into it at write_start.

  Args:
    q: [B, K, N, H] queries.
    cache_k, cache_v: [B, N, H, T] the layer's cache before this call's write.
    new_k, new_v: [B, N, H, K] the call's own keys and values (in the cache's dtype).
    mask: [B, K, T] bool, the slots each token attends to once written.
    bias: optional [B or 1, N, K, T] relative position bias.
    write_start: [B] int32, the slot of each row's first new token.
    logits_dtype: the scores' and the softmax's dtype.
    blocks: `split`'s of mask and bias, made once for every layer (None: split here; a
      bias of the layer's own, with blocks of none, is split here too).

  Returns:
    [B, N, K, H] in the cache's dtype (as `dot_product_attention` returns it).
  """
  count = new_k.shape[-1]
  if blocks is None:
    blocks = split(mask, bias, write_start, count, logits_dtype)
  elif bias is not None and blocks.biases[0] is None:
    blocks = blocks._replace(biases=split_bias(bias, q.shape[0], write_start, count,
                                               logits_dtype))
  out = _two_blocks(q, ((cache_k, cache_v), (new_k, new_v)), blocks.masks,
                   ('bknh,bnht->bnkt', 'bnkt,bnht->bnkh'), logits_dtype, blocks.biases)
  return out.astype(cache_v.dtype)


def lm_self_attention(q: jax.Array, cache_k: jax.Array, cache_v: jax.Array,
                      new_k: jax.Array, new_v: jax.Array, mask: jax.Array,
                      write_start: jax.Array) -> jax.Array:
  """The decoder-only models' grouped-query attention (`lm_layers.attention`) over the
  cache as if the call's keys and values had been written into it at write_start.

  Args:
    q: [B, K, N, H] queries, already position-encoded.
    cache_k, cache_v: [B, M, H, T] the layer's cache before this call's write.
    new_k, new_v: [B, M, H, K] the call's own keys and values.
    mask: [B, K, T] bool, the slots each token attends to once written.
    write_start: [B] int32, the slot of each row's first new token.

  Returns:
    [B, K, N, H] in the values' dtype.
  """
  n, m, count = q.shape[2], cache_k.shape[1], new_k.shape[-1]
  masks = (lm_layers.group_mask(without_written(mask, write_start, count), n // m),
           lm_layers.group_mask(written_columns(mask, write_start, count), n // m))
  out = _two_blocks(lm_layers.group_queries(q, m), ((cache_k, cache_v), (new_k, new_v)),
                   masks, ('BMQH,BMHT->BMQT', 'BMQT,BMHT->BMQH'))  # [B, M, Q, H]
  return lm_layers.ungroup(out.astype(cache_v.dtype), n)
