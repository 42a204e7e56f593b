"""traced_decode: the decode inside an outer jit with traced sampling values equals the
public decode, greedy rows stay the target's greedy decode, and new values do not retrace."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core.sampling import SamplingMode, SamplingParams
from specjax.core.traced import mode_for, traced_decode
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny, t5_tiny_draft

GAMMA, MAX_LEN = 3, 10
RNG = jax.random.PRNGKey(7)
TEMPERATURES = [0.0, 1.0, 0.7, 0.0]


@pytest.fixture(scope='module')
def pair():
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  tp['decoder']['logits_dense']['kernel'] = tp['decoder']['logits_dense']['kernel'].at[
      :, 1].add(0.8)  # rows end at different steps
  inputs = np.random.default_rng(3).integers(2, 32, (4, 6)).astype(np.int32)
  inputs[:, 5:] = 0
  return target, tp, draft, dp, inputs


def _params(temperatures, top_k=0, top_p=1.0):
  n = len(temperatures)
  return SamplingParams(temperature=jnp.asarray(temperatures, jnp.float32),
                        top_k=jnp.full((n,), top_k, jnp.int32),
                        top_p=jnp.full((n,), top_p, jnp.float32))


def test_mode_for_concrete_and_traced_values():
  assert mode_for(SamplingParams(0.0, 5, 0.5)) == SamplingMode()
  assert mode_for(_params([0.0, 1.0])) == SamplingMode(greedy=False, greedy_rows=True)
  assert mode_for(_params([1.0, 1.0], top_k=4)) == SamplingMode(greedy=False, top_k=True)
  seen = []
  jax.jit(lambda t: seen.append(mode_for(SamplingParams(t, 0, 1.0))) or t)(1.0)
  assert seen == [SamplingMode(greedy=False, greedy_rows=True)]


def test_traced_values_inside_jit_equal_the_public_decode(pair):
  target, tp, draft, dp, inputs = pair
  traces = []

  @jax.jit
  def run(tp, dp, inputs, sampling, rng):
    traces.append(1)
    return traced_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                         max_decode_len=MAX_LEN, sampling=sampling, rng=rng)

  out = run(tp, dp, inputs, _params(TEMPERATURES), RNG)
  ref = specjax.speculative_decode(
      target, tp, draft, dp, inputs, gamma=GAMMA, max_decode_len=MAX_LEN, rng=RNG,
      sampling=[specjax.SamplingConfig(t) for t in TEMPERATURES])
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.stats.target_calls, ref.stats.target_calls)
  greedy = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  for row in (0, 3):  # the greedy rows are exactly the target's greedy decode
    np.testing.assert_array_equal(out.tokens[row], greedy.tokens[row])
  run(tp, dp, inputs, _params([0.3, 0.0, 1.5, 2.0], top_k=5, top_p=0.9), RNG)
  assert len(traces) == 1  # new values, same program


def test_scalar_settings_and_the_target_alone(pair):
  target, tp, _, _, inputs = pair
  fn = jax.jit(functools.partial(traced_decode, target, draft=None, draft_params=None,
                                 gamma=GAMMA, max_decode_len=MAX_LEN))
  out = fn(tp, inputs=inputs, sampling=SamplingParams(jnp.float32(0.0), 0, 1.0))
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.stats.target_calls, ref.stats.target_calls)


def test_bad_gamma_is_a_one_line_error(pair):
  target, tp, draft, dp, inputs = pair
  with pytest.raises(ValueError, match='gamma must be an integer >= 1'):
    traced_decode(target, tp, draft, dp, inputs, gamma=0, max_decode_len=MAX_LEN,
                  sampling=SamplingParams(0.0, 0, 1.0))


@pytest.mark.parametrize('rule', [dict(verification='block'),
                                  dict(draft_threshold=0.5, threshold_rule='cumulative'),
                                  dict(lenience=0.5)], ids=['block', 'threshold', 'lenience'])
def test_traced_decode_keeps_the_verification_rule(pair, rule):
  """The route inside an outer jit (T5X's) decodes under the rule it is given: the same
  output and counters as the public decode with that rule, and not those of the token rule
  (so a route that dropped the rule fails here)."""
  target, tp, draft, dp, inputs = pair
  sampling = _params([1.0] * len(inputs))
  run = lambda **r: traced_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                  max_decode_len=MAX_LEN, sampling=sampling, rng=RNG, **r)
  public = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                      max_decode_len=MAX_LEN, rng=RNG,
                                      sampling=[specjax.SamplingConfig(1.0)] * len(inputs),
                                      **rule)
  traced, token = run(**rule), run()
  np.testing.assert_array_equal(traced.tokens, public.tokens)
  np.testing.assert_array_equal(traced.stats.drafted, public.stats.drafted)
  differs = lambda a, b: not (np.array_equal(a.tokens, b.tokens)
                              and np.array_equal(a.stats.drafted, b.stats.drafted)
                              and np.array_equal(a.stats.accepted, b.stats.accepted))
  assert differs(traced, token)


def test_traced_decode_refuses_a_bad_rule(pair):
  target, tp, draft, dp, inputs = pair
  with pytest.raises(ValueError, match='lenience changes the token rule of sampled'):
    traced_decode(target, tp, draft, dp, inputs, gamma=GAMMA, max_decode_len=MAX_LEN,
                  sampling=SamplingParams(0.0, 0, 1.0), lenience=0.5)


def test_traced_decode_with_a_tree_is_the_public_tree_decode(pair):
  """The route inside an outer jit (T5X's) verifies the tree it is given: the public
  tree decode's output and counters (N nodes verified per call), greedy the target's own."""
  target, tp, draft, dp, inputs = pair
  for temperature in (0.0, 1.0):
    sampling = _params([temperature] * len(inputs))
    traced = jax.jit(lambda tp, dp, s: traced_decode(
        target, tp, draft, dp, inputs, gamma=GAMMA, max_decode_len=MAX_LEN, sampling=s,
        mode=mode_for(_params([temperature] * len(inputs))), rng=RNG, tree='2,2'))(tp, dp,
                                                                                   sampling)
    public = specjax.speculative_decode(
        target, tp, draft, dp, inputs, tree='2,2', max_decode_len=MAX_LEN, rng=RNG,
        sampling=[specjax.SamplingConfig(temperature)] * len(inputs))
    np.testing.assert_array_equal(traced.tokens, public.tokens)
    np.testing.assert_array_equal(traced.stats.drafted, public.stats.drafted)
    np.testing.assert_array_equal(traced.stats.drafted, 6 * traced.stats.target_calls)
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(
      traced_decode(target, tp, draft, dp, inputs, gamma=GAMMA, max_decode_len=MAX_LEN,
                    sampling=_params([0.0] * len(inputs)), tree='2,2').tokens, alone.tokens)
