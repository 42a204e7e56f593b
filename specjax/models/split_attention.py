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

from typing import Tuple

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


def t5_self_attention(q: jax.Array, cache_k: jax.Array, cache_v: jax.Array,
                      new_k: jax.Array, new_v: jax.Array, mask: jax.Array,
                      bias: jax.Array | None, write_start: jax.Array,
                      logits_dtype=jnp.float32) -> jax.Array:
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

  Returns:
    [B, N, K, H] in the cache's dtype (as `dot_product_attention` returns it).
  """
  count = new_k.shape[-1]
  floor = jnp.finfo(logits_dtype).min
  old = jnp.einsum('bknh,bnht->bnkt', q, cache_k, preferred_element_type=logits_dtype)
  new = jnp.einsum('bknh,bnhj->bnkj', q, new_k, preferred_element_type=logits_dtype)
  if bias is not None:
    bias = jnp.broadcast_to(bias, old.shape[:1] + bias.shape[1:]).astype(logits_dtype)
    old = old + bias
    new = new + written_columns(bias, write_start, count)
  old = jnp.where(without_written(mask, write_start, count)[:, None], old, floor)
  new = jnp.where(written_columns(mask, write_start, count)[:, None], new, floor)
  p_old, p_new = joint_softmax(old, new)
  out = (jnp.einsum('bnkt,bnht->bnkh', p_old.astype(cache_v.dtype), cache_v,
                    preferred_element_type=jnp.float32)
         + jnp.einsum('bnkj,bnhj->bnkh', p_new.astype(new_v.dtype), new_v,
                      preferred_element_type=jnp.float32))
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
  grouped = lm_layers.group_queries(q, m)  # [B, M, Q, H]
  floor = jnp.finfo(jnp.float32).min
  old = jnp.einsum('BMQH,BMHT->BMQT', grouped, cache_k, preferred_element_type=jnp.float32)
  new = jnp.einsum('BMQH,BMHJ->BMQJ', grouped, new_k, preferred_element_type=jnp.float32)
  old = jnp.where(lm_layers.group_mask(without_written(mask, write_start, count), n // m),
                  old, floor)
  new = jnp.where(lm_layers.group_mask(written_columns(mask, write_start, count), n // m),
                  new, floor)
  p_old, p_new = joint_softmax(old, new)
  out = (jnp.einsum('BMQT,BMHT->BMQH', p_old.astype(cache_v.dtype), cache_v,
                    preferred_element_type=jnp.float32)
         + jnp.einsum('BMQJ,BMHJ->BMQH', p_new.astype(new_v.dtype), new_v,
                      preferred_element_type=jnp.float32))
  return lm_layers.ungroup(out.astype(cache_v.dtype), n)
