"""The model contract that the decode loops need from any model.

A model is a static, hashable description (a frozen dataclass holding a config) plus a
params pytree that is passed to every call as a jit argument, never closed over.

Shape letters: B batch, S encoder length, T decoder cache length, K tokens in this call,
V vocab, P decoder prompt length, M slots of a token tree, D model dim.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Protocol, Tuple

import flax.struct
import jax
import jax.numpy as jnp

PyTree = Any


# The logical axes of a heads-major cache or cross-attention leaf [B, N, H, T] (T5X's names;
# `specjax.parallel.rules` shards batch over 'data' and heads over 'model').
KV_AXES = ('batch', 'heads', 'kv', 'length')


@functools.lru_cache(maxsize=None)
def traced_once(model, method: str) -> Callable:
  """`model.<method>` jitted, one wrapper per (model, method).

  A decode calls the same layer L times with the same shapes. Called through this, a
  layer is traced and lowered once per call site's shapes, not L times; under an outer
  jit, XLA inlines the call, so the compiled program computes exactly what the plain
  loop does. Only for calls with no Python-object arguments (dropout stays outside).
  """
  return jax.jit(getattr(model, method))


@flax.struct.dataclass
class Tree:
  """This call's K tokens as nodes of a token tree laid out in cache slots base .. base+M-1.

  A tree's nodes sit in slots by node index, not by position: siblings share a position
  (their depth), and each token attends only to the tree slots `visible` names. Slots
  beyond base+M-1 are not attended (stale).

  Attributes:
    base: [B] int32, the tree's first slot, which holds its root (the last committed
      token, depth 0). Slots < base hold the committed prefix: every token sees them.
    offset: [B] int32, this call's tokens sit at slots base+offset .. base+offset+K-1
      (0 for a verify call that feeds the whole tree, root first); offset + K <= M and
      base + offset + K <= T are the caller's job.
    depth: [B, M] int32, each tree slot's depth; the token at tree slot m has position
      base + depth[m] (RoPE, T5's relative bias, learned positions), whatever its slot.
    visible: [B, K, M] bool, which tree slots each of this call's tokens sees (its
      ancestors and itself); slots of the tree that are not visible are not attended.
  """

  base: jax.Array
  offset: jax.Array
  depth: jax.Array
  visible: jax.Array


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

  def project(self, params: PyTree, hidden: jax.Array) -> jax.Array:
    """The output projection alone: hidden [B, K, D] (as `decode` returns it) -> logits
    [B, K, V] float32 (heads that draft from the target's hidden states, Medusa, use it).
    Optional."""

  def decode(self, params: PyTree, encoded: PyTree, cache: PyTree, tokens: jax.Array,
             positions: jax.Array, tree: Optional[Tree] = None, return_hidden: bool = False
             ) -> Tuple[jax.Array, ...]:
    """Scores K tokens per row and writes their keys and values into the cache.

    A chain (tree None, the shorthand of every draft step, verify and prefill): token k of
    row b sits at cache slot and position positions[b] + k, and attends to the slots
    <= its own; entries beyond are stale and ignored, so a rollback is only a smaller
    position. A tree (`Tree`): the tokens are tree nodes at slots base+offset ..
    base+offset+K-1, each at position base + its depth, attending to the committed
    prefix (slots < base) and the tree slots it sees. Keys are stored as a chain decode
    of the node's root-to-node path stores them (RoPE keys rotated by the position, not
    the slot), so moving an accepted path's slots to base + depth leaves the cache that
    chain decode would have written.

    Args:
      params: the model's parameters.
      encoded: what `encode` returned.
      cache: the cache from `init_cache` or a previous `decode`.
      tokens: [B, K] int32, this call's tokens.
      positions: [B] int32, the slot and position of each row's first token (chain);
        ignored with a tree (pass tree.base). positions[b] + K <= T is the caller's job.
      tree: None for a chain, or the layout of the tokens in a token tree.
      return_hidden: also return the final decoder hidden state (after the final norm,
        the input of the output projection), as tree drafts (EAGLE) read it.

    Returns:
      (logits, new_cache), or (logits, new_cache, hidden) with return_hidden: logits
      [B, K, V] float32, the next-token logits after each token; hidden [B, K, D].

    Raises:
      NotImplementedError: a model without a tree layout or a hidden state asked for one.
    """


def encoder_decoder_prompt(inputs: jax.Array, start_id: int = 0) -> Tuple[jax.Array, jax.Array]:
  """Decoder prompt of an encoder-decoder model: the start token alone (T5: pad id 0)."""
  batch = inputs.shape[0]
  return (jnp.full((batch, 1), start_id, jnp.int32), jnp.ones((batch,), jnp.int32))


def prefill(model, params, encoded, cache, prompt: jax.Array):
  """Writes a decoder prompt [B, P] at positions 0.. into a model's cache (P > 1 only: the
  last prompt token is fed by the first decode call)."""
  if prompt.shape[1] == 1:
    return cache
  positions = jnp.zeros((prompt.shape[0],), jnp.int32)
  return model.decode(params, encoded, cache, prompt, positions)[1]


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


def attention_layout(positions: jax.Array, num_tokens: int, max_len: int,
                     tree: Optional[Tree] = None
                     ) -> Tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
  """Where a decode call's K tokens sit and what each attends to (`Model.decode`).

  Models may build the chain layout (tree None) themselves, as they did before trees;
  this one is the same.

  Args:
    positions: [B] int32, each row's first slot and position (chain; ignored with a tree).
    num_tokens: K.
    max_len: T, the cache length.
    tree: the tree layout, or None for a chain.

  Returns:
    query_pos [B, K] int32, each token's position; key_pos [B, T] int32, the position of
    the key in each slot (only visible ones matter); mask [B, K, T] bool, which slots each
    token attends to; write_start [B] int32, the slot of the call's first token.
  """
  slots = jnp.arange(max_len, dtype=jnp.int32)[None, :]  # [1, T]
  if tree is None:
    positions = positions.astype(jnp.int32)
    query_pos = positions[:, None] + jnp.arange(num_tokens, dtype=jnp.int32)[None, :]
    key_pos = jnp.broadcast_to(slots, (positions.shape[0], max_len))
    return query_pos, key_pos, causal_mask(positions, num_tokens, max_len), positions
  start = tree.base.astype(jnp.int32)[:, None]  # [B, 1]
  num_slots = tree.depth.shape[1]
  depth = tree.depth.astype(jnp.int32)
  node = slots - start  # [B, T], the tree slot of each cache slot
  in_tree = (node >= 0) & (node < num_slots)
  node = jnp.clip(node, 0, num_slots - 1)
  key_pos = jnp.where(in_tree, start + jnp.take_along_axis(depth, node, axis=1), slots)
  query_node = tree.offset.astype(jnp.int32)[:, None] + jnp.arange(num_tokens)[None, :]
  query_pos = start + jnp.take_along_axis(depth, query_node, axis=1)  # [B, K]
  sees = jnp.take_along_axis(tree.visible, jnp.broadcast_to(
      node[:, None, :], (node.shape[0], num_tokens, max_len)), axis=2)  # [B, K, T]
  mask = (slots < start)[:, None, :] | (in_tree[:, None, :] & sees)
  return query_pos, key_pos, mask, start[:, 0] + tree.offset.astype(jnp.int32)


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
