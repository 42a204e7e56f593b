"""Sampled speculative output follows the target's (warped) distribution exactly."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import acceptance, api, sampling
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


def test_broken_rule_with_unwarped_q_is_detected(monkeypatch, fresh_programs):
  """The draft samples from the warped q, but the ratio uses the raw softmax: must fail."""
  temperature = 0.7
  exact_accept = acceptance.accept

  def broken_accept(p, q, x, keys, *rest):
    raw = q ** temperature  # softmax(l / T) ** T is proportional to softmax(l)
    return exact_accept(p, raw / jnp.sum(raw, -1, keepdims=True), x, keys, *rest)

  monkeypatch.setattr(acceptance, 'accept', broken_accept)
  tokens, expected, _ = _sample(specjax.SamplingConfig(temperature=temperature))
  assert chi_square_pvalue(tokens, expected) < 1e-3


def test_rows_of_one_batch_sample_with_their_own_settings_without_recompiling():
  """Greedy rows, T=0.7 + top-k rows and T=1 + top-p rows in ONE batch: the greedy rows are
  the target's greedy decode, each sampled group follows its own warped target; new values
  (temperatures, k, p) run on the same compiled program."""
  target, tp, dp = _pair()
  n = 12_000
  greedy_ref = specjax.autoregressive_decode(target, tp, jnp.full((1, 1), START, jnp.int32),
                                             max_decode_len=STEPS)
  inputs = jnp.full((3 * n, 1), START, jnp.int32)

  def run(settings, seed):
    rows = [s for s in settings for _ in range(n)]
    out = specjax.speculative_decode(target, tp, target, dp, inputs, gamma=2,
                                     max_decode_len=STEPS, sampling=rows,
                                     rng=jax.random.PRNGKey(seed))
    tokens = np.asarray(out.tokens)
    np.testing.assert_array_equal(tokens[:n], np.tile(greedy_ref.tokens, (n, 1)))
    for i, config in enumerate(settings[1:], 1):
      expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
      assert chi_square_pvalue(tokens[i * n:(i + 1) * n], expected) > 1e-3, config
    return out

  first = [specjax.SamplingConfig(0.0), specjax.SamplingConfig(0.7, top_k=3),
           specjax.SamplingConfig(1.0, top_p=0.8)]
  decoder = api.decoder_of(target, target, gamma=2, max_decode_len=STEPS,
                           sampling=[s for s in first for _ in range(n)], rows=3 * n)
  before = decoder.traces
  run(first, seed=1)
  assert decoder.traces == before + 1
  run([specjax.SamplingConfig(0.0), specjax.SamplingConfig(0.4, top_k=2),
       specjax.SamplingConfig(1.3, top_p=0.6)], seed=2)
  assert decoder.traces == before + 1  # new values, same program


@pytest.mark.compute
def test_first_token_over_four_thousand_follows_the_target_under_top_p():
  """V = 4096, top-p 0.9: the first token's histogram against the warped target, the tail
  of small expected counts pooled into one bin."""
  vocab, n = 4096, 8_000
  model = MarkovModel(vocab)
  tp, dp = (model.init(jax.random.PRNGKey(seed), scale=2.5) for seed in (20, 21))
  dp = {'logits': 0.7 * tp['logits'] + 0.3 * dp['logits']}  # a draft that roughly agrees
  config = specjax.SamplingConfig(temperature=1.0, top_p=0.9)
  out = specjax.speculative_decode(model, tp, model, dp, jnp.full((n, 1), START, jnp.int32),
                                   gamma=1, max_decode_len=1, sampling=config,
                                   rng=jax.random.PRNGKey(9))
  p = np.asarray(sampling.warp_all(tp['logits'][START][None], config)[0], np.float64)
  expected = {(int(t),): float(p[t]) for t in np.flatnonzero(p > 0)}
  assert len(expected) > 100  # a wide nucleus
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert 0.05 < out.stats.acceptance_rate < 0.95
