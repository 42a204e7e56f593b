"""Sampled speculative output follows the target's (warped) distribution exactly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import acceptance, decoding
from specjax.models.markov import MarkovModel
from stats_util import chi_square_pvalue, enumerate_markov

VOCAB, START, N, STEPS = 6, 3, 20_000, 3


def _pair():
  target = MarkovModel(VOCAB)
  tp = target.init(jax.random.PRNGKey(10), scale=1.5)
  dp = target.init(jax.random.PRNGKey(11), scale=3.0)
  return target, tp, dp


def _sample(config, gamma=2, seed=0):
  target, tp, dp = _pair()
  inputs = jnp.full((N, 1), START, jnp.int32)
  out = specjax.speculative_decode(target, tp, target, dp, inputs, gamma=gamma,
                                   max_decode_len=STEPS, sampling=config,
                                   rng=jax.random.PRNGKey(seed))
  expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
  return np.asarray(out.tokens), expected, out


@pytest.mark.parametrize('config', [
    specjax.SamplingConfig(temperature=1.0),
    specjax.SamplingConfig(temperature=0.7, top_k=3),
    specjax.SamplingConfig(temperature=1.0, top_p=0.8),
], ids=['t1', 't0.7-top3', 'top-p0.8'])
def test_first_three_tokens_follow_target(config):
  tokens, expected, out = _sample(config)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  # the draft really was used: it is neither always accepted nor always rejected
  assert 0.05 < out.stats.acceptance_rate < 0.95


def test_autoregressive_sampling_follows_target():
  target, tp, _ = _pair()
  config = specjax.SamplingConfig(temperature=1.0)
  out = specjax.autoregressive_decode(target, tp, jnp.full((N, 1), START, jnp.int32),
                                      max_decode_len=STEPS, sampling=config,
                                      rng=jax.random.PRNGKey(3))
  expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3


def test_broken_rule_with_unwarped_q_is_detected(monkeypatch):
  """The draft samples from the warped q, but the ratio uses the raw softmax: must fail."""
  temperature = 0.7
  exact_accept = acceptance.accept

  def broken_accept(p, q, x, rng, greedy):
    raw = q ** temperature  # softmax(l / T) ** T is proportional to softmax(l)
    return exact_accept(p, raw / jnp.sum(raw, -1, keepdims=True), x, rng, greedy)

  monkeypatch.setattr(decoding.acceptance, 'accept', broken_accept)
  jax.clear_caches()
  try:
    tokens, expected, _ = _sample(specjax.SamplingConfig(temperature=temperature))
  finally:
    jax.clear_caches()
  assert chi_square_pvalue(tokens, expected) < 1e-3
