"""T5X's prediction contract over specjax's decode (specjax/t5x/decoding.py, no t5x needed):
T5X's sampling conventions, N decodes per example sorted best last, the target's
log-probability as the score, per-example aux."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny, t5_tiny_draft
from specjax.t5x import decoding

GAMMA, MAX_LEN = 3, 9


@pytest.fixture(scope='module')
def pair():
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(3)), draft.init(jax.random.PRNGKey(4))
  tp['decoder']['logits_dense']['kernel'] = tp['decoder']['logits_dense']['kernel'].at[
      :, 1].add(0.7)
  inputs = np.random.default_rng(5).integers(2, 32, (3, 5)).astype(np.int32)
  inputs[2, 3:] = 0
  return target, tp, draft, dp, inputs


def test_t5x_sampling_conventions():
  s = decoding.sampling_from_t5x(temperature=np.array([5e-5, 0.8]), topk=0, topp=0.0,
                                 num_decodes=2)
  np.testing.assert_array_equal(s.temperature, np.float32([0.0, 0.0, 0.8, 0.8]))  # rows e0 e0 e1 e1
  assert s.top_k == 0 and s.top_p == 1.0  # T5X's topp 0 keeps every token
  assert isinstance(s.temperature, np.ndarray)  # concrete: the static mode can read it
  s = decoding.sampling_from_t5x(temperature=1.0, topk=4, topp=0.9)
  assert (float(s.temperature), int(s.top_k), float(s.top_p)) == (1.0, 4, pytest.approx(0.9))


def _stepwise_log_prob(target, tp, inputs, tokens, length):
  """The target's log-probability of one decode, one cached token at a time."""
  enc = target.encode(tp, inputs[None])
  cache = target.init_cache(1, MAX_LEN + 1)
  prev, total = 0, 0.0
  for t in range(length):
    logits, cache = target.decode(tp, enc, cache, jnp.array([[prev]]), jnp.array([t]))
    total += float(jax.nn.log_softmax(logits[0, 0])[tokens[t]])
    prev = int(tokens[t])
  return total


def test_greedy_decodes_are_the_target_and_scored_by_it(pair):
  target, tp, draft, dp, inputs = pair
  p = decoding.predict(target, tp, draft, dp, inputs, max_decode_len=MAX_LEN, gamma=GAMMA,
                       num_decodes=2)
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  assert p.decodes.shape == (3, 2, MAX_LEN) and p.scores.shape == (3, 2)
  for n in range(2):
    np.testing.assert_array_equal(p.decodes[:, n], ref.tokens)
  for b in range(3):
    expected = _stepwise_log_prob(target, tp, inputs[b], ref.tokens[b], int(ref.lengths[b]))
    np.testing.assert_allclose(p.scores[b], expected, atol=1e-4)
  assert p.aux['target_calls'].shape == (3,)
  np.testing.assert_array_equal(p.aux['target_calls'], 2 * np.asarray(
      specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                 max_decode_len=MAX_LEN).stats.target_calls))
  assert np.all((p.aux['alpha'] >= 0) & (p.aux['alpha'] <= 1))
  assert np.all(p.aux['tokens_per_call'] >= 1)


def test_sampled_decodes_sorted_best_last_with_their_own_scores(pair):
  target, tp, draft, dp, inputs = pair
  sampling = decoding.sampling_from_t5x(temperature=1.0, num_decodes=4)
  p = decoding.predict(target, tp, draft, dp, inputs, max_decode_len=MAX_LEN, gamma=GAMMA,
                       num_decodes=4, sampling=sampling, rng=jax.random.PRNGKey(11))
  assert np.all(np.diff(np.asarray(p.scores), axis=1) >= 0)
  assert len({tuple(r) for r in np.asarray(p.decodes[0]).tolist()}) > 1  # independent rows
  tokens = np.asarray(p.decodes).reshape((12, MAX_LEN))
  lengths = np.array([int(np.argmax(r == 1)) + 1 if 1 in r else MAX_LEN for r in tokens])
  rescored = decoding.sequence_log_probs(target, tp, np.repeat(inputs, 4, axis=0), tokens,
                                         lengths)
  np.testing.assert_allclose(np.asarray(rescored).reshape((3, 4)), p.scores, atol=1e-5)


def test_traced_temperature_under_jit_and_split_params(pair):
  target, tp, draft, dp, inputs = pair

  @jax.jit
  def run(params, temperature):
    t, d = decoding.split_params(params, 'draft')
    return decoding.predict(target, t, draft, d, inputs, max_decode_len=MAX_LEN,
                            gamma=GAMMA, sampling=decoding.sampling_from_t5x(temperature))

  out = run({**tp, 'draft': dp}, jnp.float32(0.0))
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(out.decodes[:, 0], ref.tokens)
