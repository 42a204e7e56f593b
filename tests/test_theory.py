"""The paper's formulas, and tokens per target call measured on a Markov pair of known alpha."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import theory
from specjax.models.markov import MarkovModel


def test_formulas_match_paper_numbers():
  assert theory.expected_tokens_per_call(0.0, 5) == pytest.approx(1.0)
  assert theory.expected_tokens_per_call(1.0, 5) == pytest.approx(6.0)
  # zero-cost draft, alpha 0.9, gamma 10: 6.86x (docs/algorithm.md)
  assert theory.speedup(0.9, 10, c=0.0) == pytest.approx(6.86, abs=0.01)
  # the best gamma shrinks as the draft gets dearer (alpha 0.6)
  assert [theory.best_gamma(0.6, c) for c in (0.05, 0.1, 0.2, 0.3)] == [4, 3, 2, 1]
  # gain iff alpha > c (gamma = 1)
  assert theory.speedup(0.3, 1, c=0.2) > 1 > theory.speedup(0.1, 1, c=0.2)
  # v > 1 lowers the speedup and favours shorter blocks
  assert theory.speedup(0.8, 4, 0.05, v=2.0) == pytest.approx(
      theory.expected_tokens_per_call(0.8, 4) / (4 * 0.05 + 2.0))
  assert theory.best_gamma(0.8, 0.05, verify_cost=lambda k: 1 + 0.5 * (k - 1)) < \
      theory.best_gamma(0.8, 0.05)
  assert theory.arithmetic_factor(0.9, 10, 0.0) == pytest.approx(11 / 6.8619, rel=1e-3)


def test_bad_arguments():
  with pytest.raises(ValueError, match='alpha'):
    theory.speedup(1.5, 2, 0.1)
  with pytest.raises(ValueError, match='gamma'):
    theory.expected_tokens_per_call(0.5, 0)


def _iid_pair(vocab=8):
  """Target and draft whose rows are all equal: tokens are i.i.d., beta is one constant."""
  rng = np.random.default_rng(0)
  p_row, q_row = rng.normal(size=vocab), rng.normal(size=vocab)
  p_row[1] = q_row[1] = -np.inf  # no EOS: every row runs the full length
  p = jnp.asarray(np.tile(p_row, (vocab, 1)), jnp.float32)
  q = jnp.asarray(np.tile(q_row, (vocab, 1)), jnp.float32)
  alpha = float(np.minimum(jax.nn.softmax(p_row), jax.nn.softmax(q_row)).sum())
  return MarkovModel(vocab), {'logits': p}, {'logits': q}, alpha


@pytest.mark.parametrize('gamma', [2, 5])
def test_tokens_per_call_matches_formula(gamma):
  model, tp, dp, alpha = _iid_pair()
  out = specjax.speculative_decode(model, tp, model, dp, jnp.full((2000, 1), 3, jnp.int32),
                                   gamma=gamma, max_decode_len=40,
                                   sampling=specjax.SamplingConfig(temperature=1.0),
                                   rng=jax.random.PRNGKey(gamma))
  s = out.stats
  assert np.all(np.asarray(out.lengths) == 40) and not np.asarray(s.nonfinite).any()
  per_row = np.asarray(s.generated) / np.asarray(s.target_calls)
  stderr = per_row.std() / np.sqrt(len(per_row))
  # every output is 40 tokens long and ends inside its last block
  expected = theory.tokens_per_iteration_at_lengths(alpha, gamma, [40])
  assert abs(s.tokens_per_call - expected) < 5 * stderr + 1e-3
  assert expected < theory.expected_tokens_per_call(alpha, gamma)
  assert s.alpha == pytest.approx(alpha, rel=1e-4)  # beta is exact and constant here


def test_expected_iterations_closed_forms():
  # every draft rejected: one token per iteration; all accepted: full blocks of G + 1
  assert [theory.expected_iterations(0.0, 4, n) for n in (0, 1, 7)] == [0.0, 1.0, 7.0]
  assert [theory.expected_iterations(1.0, 4, n) for n in (1, 5, 6, 11)] == [1, 1, 2, 3]
  # gamma 1, two tokens: one iteration if the draft is accepted, else two
  assert theory.expected_iterations(0.3, 1, 2) == pytest.approx(0.3 * 1 + 0.7 * 2)
  # long outputs approach the formula's E; short ones fall below it
  e = theory.expected_tokens_per_call(0.75, 6)
  assert theory.tokens_per_iteration_at_lengths(0.75, 6, [4000]) == pytest.approx(e, rel=2e-3)
  short = theory.tokens_per_iteration_at_lengths(0.75, 6, [12, 9, 15])
  assert 1.0 < short < 0.9 * e
  assert theory.tokens_per_iteration_at_lengths(0.75, 6, []) == pytest.approx(e)


@pytest.mark.parametrize('gamma,length', [(3, 9), (6, 12)])
def test_iterations_match_the_loop_at_fixed_lengths(gamma, length):
  """The loop on outputs of exactly `length` tokens takes N(length) iterations on average."""
  model, tp, dp, alpha = _iid_pair()
  out = specjax.speculative_decode(model, tp, model, dp, jnp.full((3000, 1), 3, jnp.int32),
                                   gamma=gamma, max_decode_len=length,
                                   sampling=specjax.SamplingConfig(temperature=1.0),
                                   rng=jax.random.PRNGKey(10 + gamma))
  assert np.all(np.asarray(out.lengths) == length)
  calls = np.asarray(out.stats.target_calls, np.float64)
  expected = theory.expected_iterations(alpha, gamma, length)
  assert abs(calls.mean() - expected) < 5 * calls.std() / np.sqrt(len(calls)) + 1e-3
  # and the unbounded formula would have been wrong here
  assert length / theory.expected_tokens_per_call(alpha, gamma) < 0.95 * expected
