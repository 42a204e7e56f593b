"""Speculative decoding with a tiny T5 target and a smaller tiny T5 draft."""
import jax
import jax.numpy as jnp
import numpy as np

import specjax
from specjax.core import sampling
from stats_util import chi_square_pvalue

INPUTS = np.array([[5, 9, 12, 7, 3, 1, 0, 0], [8, 4, 1, 0, 0, 0, 0, 0],
                   [30, 21, 17, 11, 6, 25, 19, 1]], np.int32)  # lengths 6, 3, 8 with EOS


def test_t5_greedy_speculative_equals_target(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair(0.9)
  ref = specjax.autoregressive_decode(target, tp, INPUTS, max_decode_len=12)
  assert len(set(np.asarray(ref.lengths).tolist())) == 3  # three different stop steps
  for gamma in (1, 3, 5):
    for d, p in ((draft, dp), (target, tp)):
      out = specjax.speculative_decode(target, tp, d, p, INPUTS, gamma=gamma,
                                       max_decode_len=12)
      np.testing.assert_array_equal(out.tokens, ref.tokens)
      np.testing.assert_array_equal(out.lengths, ref.lengths)


def _first_two_probs(target, tp, inputs, config):
  """Exact joint probability of the first two output tokens for one input row."""
  vocab = target.vocab_size
  first = sampling.warp_all(
      target.logits(tp, inputs[None], jnp.zeros((1, 1), jnp.int32))[0, 0], config)
  dec = jnp.stack([jnp.zeros(vocab, jnp.int32), jnp.arange(vocab)], axis=1)  # [V, 2]
  logits = target.logits(tp, jnp.repeat(inputs[None], vocab, 0), dec)[:, 1]  # [V, V]
  second = sampling.warp_all(logits, config)
  first, second = np.asarray(first, np.float64), np.asarray(second, np.float64)
  probs = {}
  for a in range(vocab):
    if first[a] == 0:
      continue
    if a == 1:  # EOS: the next slot is padding
      probs[(1, 0)] = first[a]
      continue
    for b in range(vocab):
      if second[a, b] > 0:
        probs[(a, b)] = first[a] * second[a, b]
  return probs


def test_t5_sampling_follows_target_on_first_two_tokens(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair(0.5)
  config = specjax.SamplingConfig(temperature=1.0)
  n = 20_000
  row = jnp.asarray(INPUTS[1])
  out = specjax.speculative_decode(target, tp, draft, dp, jnp.tile(row[None], (n, 1)),
                                   gamma=3, max_decode_len=2, sampling=config,
                                   rng=jax.random.PRNGKey(7))
  expected = _first_two_probs(target, tp, row, config)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert 0.05 < out.stats.acceptance_rate < 0.95
