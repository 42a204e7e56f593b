"""One compilation per shape and static config, no host round trip, one-line errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import api
from specjax.models.markov import MarkovModel
from models_for_tests import chain_markov, random_markov, tiny_transformer


def test_one_trace_per_shape_across_inputs_and_rngs():
  target, tp = tiny_transformer()
  draft, dp = tiny_transformer(seed=4, layers=1)
  config = specjax.SamplingConfig(temperature=1.0)
  decoder = lambda gamma: api.decoder_of(target, draft, gamma=gamma, max_decode_len=10,
                                         sampling=config, rows=2)
  before = decoder(3).traces
  outs = []
  for seed, inputs in enumerate(([[3, 4, 0], [5, 0, 0]], [[9, 9, 9], [2, 7, 0]])):
    outs.append(specjax.speculative_decode(target, tp, draft, dp, jnp.array(inputs), gamma=3,
                                           max_decode_len=10, sampling=config,
                                           rng=jax.random.PRNGKey(seed)))
  assert decoder(3).traces == before + 1
  # different inputs really gave different acceptance patterns and outputs
  assert not np.array_equal(outs[0].tokens, outs[1].tokens)
  # a new static config (gamma) compiles once more, and only once
  before = decoder(2).traces
  for _ in range(2):
    specjax.speculative_decode(target, tp, draft, dp, jnp.array([[1, 2, 3], [4, 5, 6]]),
                               gamma=2, max_decode_len=10, sampling=config)
  assert decoder(2).traces == before + 1


def test_whole_decode_is_one_program_without_host_callbacks():
  target, tp = chain_markov(0)
  draft, dp = random_markov(3)
  inputs = jax.device_put(jnp.array([[3]], jnp.int32))
  rng = jax.random.PRNGKey(0)
  decoder = api.decoder_of(target, draft, gamma=3, max_decode_len=8,
                           sampling=specjax.SamplingConfig(), rows=1)
  params = specjax.SamplingParams.of(specjax.SamplingConfig(), 1)
  jaxpr = jax.make_jaxpr(decoder.whole)(tp, dp, inputs, jnp.int32(1),
                                         jnp.zeros((1,), jnp.int32), rng, params)
  text = str(jaxpr)
  assert text.count('while[') == 1
  for primitive in ('callback', 'io_callback', 'debug_callback', 'infeed', 'outfeed'):
    assert primitive not in text
  specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=3, max_decode_len=8, rng=rng)
  with jax.transfer_guard('disallow'):  # compiled: the call moves nothing to or from the host
    out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=3, max_decode_len=8,
                                     rng=rng)
    jax.block_until_ready(out)


@pytest.mark.parametrize('kwargs, match', [
    (dict(gamma=0), 'gamma must be an integer >= 1'),
    (dict(max_decode_len=0), 'max_decode_len must be an integer >= 1'),
    (dict(sampling=specjax.SamplingConfig(temperature=1.0, top_p=0.0)), r'top_p must be in \(0, 1\]'),
    (dict(sampling=specjax.SamplingConfig(temperature=1.0, top_p=1.5)), r'top_p must be in \(0, 1\]'),
    (dict(sampling=specjax.SamplingConfig(temperature=-1.0)), 'temperature must be finite and >= 0'),
    (dict(sampling=specjax.SamplingConfig(temperature=1.0, top_k=17)), r'top_k must be in \[0, vocab size 16\]'),
])
def test_bad_arguments_raise_one_line(kwargs, match):
  target, tp = chain_markov(0)
  args = dict(gamma=2, max_decode_len=4)
  args.update(kwargs)
  with pytest.raises(ValueError, match=match) as err:
    specjax.speculative_decode(target, tp, target, tp, jnp.array([[3]]), **args)
  assert '\n' not in str(err.value)


def test_vocab_mismatch_is_refused():
  target, tp = chain_markov(0)
  small = MarkovModel(8)
  with pytest.raises(ValueError, match=r'vocab sizes differ \(16 vs 8\)') as err:
    specjax.speculative_decode(target, tp, small, small.init(jax.random.PRNGKey(0)),
                               jnp.array([[3]]), gamma=2, max_decode_len=4)
  assert '\n' not in str(err.value)
