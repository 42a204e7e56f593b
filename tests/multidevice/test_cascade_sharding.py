"""Cascades on 8 simulated CPU devices: a vertical cascade (capped, so that rows propose
chains of different lengths) and a horizontal one decode the 16 inputs through 8 refilled
slots on a ('data', 'model') mesh exactly as unsharded, greedy and sampled rows in one
batch, token for token and counter for counter; the greedy rows are the target's own."""
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest

import specjax
from specjax.core.model_proposer import as_proposer
from specjax.parallel import mesh as mesh_lib
from specjax.proposers.bigram import BigramDraft, table_from_counts
from specjax.proposers.cascade import HorizontalCascade, VerticalCascade

MAX_LEN = 12
GAMMA = 4


@pytest.mark.parametrize('kind', ['vertical-capped', 'horizontal'])
def test_a_cascade_on_a_mesh_with_refill_equals_unsharded(pair_and_inputs, kind):
  target, tp, draft, dp, inputs = pair_and_inputs
  vocab = target.vocab_size
  inner = BigramDraft(vocab, 3)
  table = table_from_counts(np.random.default_rng(4).integers(0, 9, (vocab, vocab)), 3)
  if kind == 'horizontal':
    cascade, params = HorizontalCascade(as_proposer(draft), inner, 2), {'first': dp,
                                                                      'rest': table}
  else:  # at most 2 calls of the draft model for a chain of 4, 3 cheap drafts per call
    cascade, params = VerticalCascade(draft, inner, 3, max_calls=2), {'draft': dp,
                                                                    'inner': table}
  rows = [specjax.SamplingConfig(temperature=t) for t in (0.0, 1.0) * 8]
  kw = dict(gamma=GAMMA, max_decode_len=MAX_LEN, rng=jax.random.PRNGKey(5), sampling=rows,
            slots=8)
  ref = specjax.speculative_decode(target, tp, cascade, params, inputs, **kw)
  out = specjax.speculative_decode(target, tp, cascade, params, inputs,
                                   mesh=mesh_lib.make_mesh(shape=(2, 4)), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  for counter in ('target_calls', 'drafted', 'accepted'):
    np.testing.assert_array_equal(getattr(out.stats, counter), getattr(ref.stats, counter))
  assert int(ref.stats.accepted.sum()) > 0
  if kind == 'vertical-capped':  # the cap cut some chains short
    assert np.any(np.asarray(ref.stats.drafted) < GAMMA * np.asarray(ref.stats.target_calls))
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(np.asarray(out.tokens)[::2], np.asarray(alone.tokens)[::2])
