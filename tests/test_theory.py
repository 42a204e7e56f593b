"""The paper's formulas, and tokens per target call measured on a Markov pair of known alpha."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax import theory
from specjax.models.markov import MarkovModel


def test_formulas_match_paper_numbers():
  assert theory.expected_tokens_per_call(0.0, 5) == pytest.approx(1.0)
  assert theory.expected_tokens_per_call(1.0, 5) == pytest.approx(6.0)
  # zero-cost draft, alpha 0.9, gamma 10: 6.86x (PAPER.md)
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
  per_row = (np.asarray(s.accepted) + np.asarray(s.target_calls)) / np.asarray(s.target_calls)
  stderr = per_row.std() / np.sqrt(len(per_row))
  expected = theory.expected_tokens_per_call(alpha, gamma)
  assert abs(s.tokens_per_call - expected) < 5 * stderr + 1e-3
  assert s.alpha == pytest.approx(alpha, rel=1e-4)  # beta is exact and constant here
