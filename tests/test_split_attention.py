"""Attention over an unwritten cache and a call's new keys equals attention over the cache
with them written (specjax.models.split_attention, the scanned layers' self-attention)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.models import base
from specjax.models import lm_layers
from specjax.models import split_attention
from specjax.models import t5_layers

B, K, T, N, M, H = 3, 4, 11, 4, 2, 5
WRITE_START = jnp.array([0, 3, 7], jnp.int32)  # the last row writes the cache's last 4 slots


def _arrays(seed, heads):
  keys = jax.random.split(jax.random.PRNGKey(seed), 6)
  q = jax.random.normal(keys[0], (B, K, N, H))
  # The cache holds stale entries everywhere, the slots about to be written included.
  cache_k, cache_v = (jax.random.normal(k, (B, heads, H, T)) for k in keys[1:3])
  new_k, new_v = (jax.random.normal(k, (B, heads, H, K)) for k in keys[3:5])
  bias = jax.random.normal(keys[5], (B, N, K, T))
  return q, cache_k, cache_v, new_k, new_v, bias


def _tree_mask(seed):
  """Each query sees the slots before its row's block and a random subset of the block
  that includes itself (a token tree's ancestors)."""
  rng = np.random.default_rng(seed)
  mask = np.zeros((B, K, T), bool)
  for b, start in enumerate(np.asarray(WRITE_START)):
    mask[b, :, :start] = True
    for i in range(K):
      mask[b, i, start:start + i] = rng.random(i) < 0.5
      mask[b, i, start + i] = True
  return jnp.asarray(mask)


@pytest.mark.parametrize('tree', [False, True])
def test_t5_attention_equals_writing_first(tree):
  q, cache_k, cache_v, new_k, new_v, bias = _arrays(0, N)
  mask = _tree_mask(1) if tree else base.causal_mask(WRITE_START, K, T)
  written = [base.write_cache(c, n, WRITE_START) for c, n in ((cache_k, new_k), (cache_v, new_v))]
  want = t5_layers.dot_product_attention(q, *written, mask, bias)
  got = split_attention.t5_self_attention(q, cache_k, cache_v, new_k, new_v, mask, bias,
                                          WRITE_START)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  shared = split_attention.t5_self_attention(q, cache_k, cache_v, new_k, new_v, mask,
                                             bias[:1], WRITE_START)  # one bias for all rows
  np.testing.assert_allclose(shared, t5_layers.dot_product_attention(q, *written, mask,
                                                                     bias[:1]),
                             rtol=1e-5, atol=1e-6)
  # Negative control: one slot off, the new keys sit where the stale ones were seen.
  off = split_attention.t5_self_attention(q, cache_k, cache_v, new_k, new_v, mask, bias,
                                          jnp.maximum(WRITE_START - 1, 0))
  assert not np.allclose(off, want, atol=1e-3)
  # The blocks split once for every layer (a scanned stack's), bias and all, or the mask
  # alone with the layer's own bias split in the layer.
  for blocks in (split_attention.split(mask, bias, WRITE_START, K),
                 split_attention.split(mask, None, WRITE_START, K)):
    once = split_attention.t5_self_attention(q, cache_k, cache_v, new_k, new_v, None, bias,
                                             WRITE_START, blocks=blocks)
    np.testing.assert_allclose(once, want, rtol=1e-5, atol=1e-6)
  stale = split_attention.split(mask, bias, jnp.maximum(WRITE_START - 1, 0), K)
  assert not np.allclose(split_attention.t5_self_attention(
      q, cache_k, cache_v, new_k, new_v, mask, bias, WRITE_START, blocks=stale), want,
                         atol=1e-3)  # blocks of other slots are what the layer uses


def test_decoder_only_attention_equals_writing_first():
  q, cache_k, cache_v, new_k, new_v, _ = _arrays(2, M)  # grouped: 2 KV heads for 4 queries
  mask = _tree_mask(3)
  written = [base.write_cache(c, n, WRITE_START) for c, n in ((cache_k, new_k), (cache_v, new_v))]
  want = lm_layers.attention(q, *written, mask)
  got = split_attention.lm_self_attention(q, cache_k, cache_v, new_k, new_v, mask,
                                          WRITE_START)
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  stale = lm_layers.attention(q, cache_k, cache_v, mask)  # negative control: never written
  assert not np.allclose(stale, want, atol=1e-3)


def test_joint_softmax_is_the_softmax_of_both_blocks():
  old = jax.random.normal(jax.random.PRNGKey(4), (2, 3, 7)) * 5
  new = jax.random.normal(jax.random.PRNGKey(5), (2, 3, 4)) * 5
  p_old, p_new = split_attention.joint_softmax(old, new)
  want = jax.nn.softmax(jnp.concatenate([old, new], -1), -1)
  np.testing.assert_allclose(jnp.concatenate([p_old, p_new], -1), want, rtol=1e-6)


def test_written_columns_and_the_hidden_slots():
  x = jnp.arange(B * 2 * T).reshape(B, 2, T)
  cols = split_attention.written_columns(x, WRITE_START, K)
  for b, start in enumerate(np.asarray(WRITE_START)):
    np.testing.assert_array_equal(cols[b], x[b, :, start:start + K])
  hidden = split_attention.without_written(jnp.ones((B, K, T), bool), WRITE_START, K)
  assert int(hidden.sum()) == B * K * (T - K)
  assert not bool(hidden[2, :, 7:].any()) and bool(hidden[2, :, :7].all())
