"""The model contract that the decode loops need from any model.

A model is a static, hashable description (a frozen dataclass holding a config) plus a
params pytree that is passed to every call as a jit argument, never closed over.

Shape letters: B batch, S encoder length, T decoder cache length, K tokens in this call,
V vocab, P decoder prompt length.
"""
from __future__ import annotations

from typing import Any, Protocol, Tuple

import jax
import jax.numpy as jnp

PyTree = Any


# The logical axes of a heads-major cache or cross-attention leaf [B, N, H, T] (T5X's names;
# `specjax.parallel.rules` shards batch over 'data' and heads over 'model').
KV_AXES = ('batch', 'heads', 'kv', 'length')


class Model(Protocol):
  """What the decode loop calls.

  Attributes:
    vocab_size: V, the size of the logits axis. Target and draft must agree.
    eos_id: the end-of-sequence token: a row is done once it emits it.
    pad_id: the padding id of inputs, and what outputs hold after EOS.
  """

  vocab_size: int
  eos_id: int
  pad_id: int

  def encode(self, params: PyTree, inputs: jax.Array) -> PyTree:
    """Encodes inputs [B, S] int32 once per decode (cross-attention K/V projected here)."""

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """Returns the decoder's prompt [B, P] int32 and its per-row length [B] int32.

    Encoder-decoder models return the decoder start token (P = 1); decoder-only models
    return the right-padded prompt itself.
    """

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> PyTree:
    """A zero-filled, fixed-shape cache for `max_len` (T) decoder positions; every leaf
    is batch-major [B, ...]."""

  def cache_axes(self) -> PyTree:
    """The structure of `init_cache`'s result, each leaf a tuple of logical axis names,
    one per dimension, the first 'batch' (T5's: `KV_AXES`). Sharding rules read these."""

  def encoded_axes(self) -> PyTree:
    """The same for `encode`'s result (T5: the mask ('batch', 'length') and `KV_AXES`)."""

  def decode(self, params: PyTree, encoded: PyTree, cache: PyTree, tokens: jax.Array,
             positions: jax.Array) -> Tuple[jax.Array, PyTree]:
    """Scores K tokens per row and writes them into the cache.

    Args:
      params: the model's parameters.
      encoded: what `encode` returned.
      cache: the cache from `init_cache` or a previous `decode`.
      tokens: [B, K] int32, the tokens at positions `positions[b] .. positions[b]+K-1`.
      positions: [B] int32, the position of each row's first token.

    Returns:
      logits [B, K, V] float32 (the next-token logits after each token) and the new
      cache. Each query attends to keys at positions <= its own; entries beyond are stale
      and must be ignored, so a rollback is only a smaller position.
    """


def encoder_decoder_prompt(inputs: jax.Array, start_id: int = 0) -> Tuple[jax.Array, jax.Array]:
  """Decoder prompt of an encoder-decoder model: the start token alone (T5: pad id 0)."""
  batch = inputs.shape[0]
  return (jnp.full((batch, 1), start_id, jnp.int32), jnp.ones((batch,), jnp.int32))


def decoder_only_prompt(inputs: jax.Array, pad_id: int = 0) -> Tuple[jax.Array, jax.Array]:
  """Prompt of a decoder-only model: the right-padded inputs [B, P] themselves, and each
  row's length [B] >= 1: up to its last id that is not `pad_id` (a pad id inside a prompt
  is a token like any other; only trailing ones are padding)."""
  real = inputs != pad_id  # [B, P]
  last = jnp.max(jnp.where(real, jnp.arange(inputs.shape[1])[None], -1), axis=1)
  return inputs.astype(jnp.int32), jnp.maximum(last + 1, 1).astype(jnp.int32)


def causal_mask(positions: jax.Array, num_tokens: int, max_len: int) -> jax.Array:
  """Mask [B, K, T]: query k of row b (at positions[b] + k) sees keys at positions <= it."""
  query_pos = positions[:, None] + jnp.arange(num_tokens)[None, :]  # [B, K]
  return jnp.arange(max_len)[None, None, :] <= query_pos[:, :, None]


def write_cache(cache: jax.Array, new: jax.Array, positions: jax.Array) -> jax.Array:
  """Writes new [B, ..., K] into cache [B, ..., T] (heads-major: positions last) at per-row
  offsets positions [B]; positions[b] + K <= T is the caller's job."""
  new = new.astype(cache.dtype)
  if cache.shape[0] == 1 and new.shape[-1] == 1:
    # One row, one token (a draft step, or the target alone at batch 1): a select over the
    # whole cache. As a dynamic-update-slice, XLA:CPU cloned the write into each reader of
    # the cache (the attention's matrix-vector products) and copied every cache leaf 4
    # times per step; the select copies it once. Every other shape updates in place.
    at = jnp.arange(cache.shape[-1]) == positions[0]  # [T]
    return jnp.where(at, new, cache)

  if cache.shape[0] == 1:
    # One row, K > 1 tokens: one dynamic-update-slice. Vmapped, it became a scatter whose
    # bounds check read the cache once more (TPU charged ~40% more per write).
    return jax.lax.dynamic_update_slice(cache, new, (0,) * (cache.ndim - 1) + (positions[0],))

  def one_row(row_cache, row_new, pos):
    start = (0,) * (row_cache.ndim - 1) + (pos,)
    return jax.lax.dynamic_update_slice(row_cache, row_new, start)

  return jax.vmap(one_row)(cache, new, positions)
