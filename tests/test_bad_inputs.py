"""Bad inputs to the API: refused before anything runs, or counted, never silent garbage."""
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from models_for_tests import chain_markov, tiny_transformer


def test_nonfinite_logits_are_counted_for_their_row_only():
  """After token 4 the target's logits are NaN: the row that passes 4 is flagged, the row
  that never meets it is not; a NaN in the draft alone is flagged too."""
  target, tp = chain_markov(0)
  ref = specjax.autoregressive_decode(target, tp, jnp.array([[3], [9]]), max_decode_len=12)
  assert 4 in np.asarray(ref.tokens[0]) and 4 not in np.asarray(ref.tokens[1])
  nan_tp = {'logits': tp['logits'].at[4].set(jnp.nan)}
  inputs = jnp.array([[3], [9]], jnp.int32)
  for out in (specjax.speculative_decode(target, nan_tp, target, tp, inputs, gamma=2,
                                         max_decode_len=12),
              specjax.autoregressive_decode(target, nan_tp, inputs, max_decode_len=12)):
    nonfinite = np.asarray(out.stats.nonfinite)
    assert nonfinite[0] > 0 and nonfinite[1] == 0
  clean = specjax.speculative_decode(target, tp, target, nan_tp, inputs, gamma=2,
                                     max_decode_len=12)  # NaN draft, finite target
  assert np.asarray(clean.stats.nonfinite)[0] > 0 and np.asarray(clean.stats.nonfinite)[1] == 0
  np.testing.assert_array_equal(clean.tokens[1], ref.tokens[1])
  healthy = specjax.speculative_decode(target, tp, target, tp, inputs, gamma=2,
                                       max_decode_len=12)
  assert not np.asarray(healthy.stats.nonfinite).any()


@pytest.mark.parametrize('bad, match', [
    (16, r'input row 1 holds id 16 at position 0, outside the model\'s vocabulary \[0, 16\)'),
    (-3, r'input row 1 holds id -3 at position 0'),
])
def test_ids_outside_the_vocabulary_are_refused(bad, match):
  target, tp = chain_markov(0)
  inputs = np.array([[3, 4], [bad, 5]], np.int32)
  for call in (lambda: specjax.speculative_decode(target, tp, target, tp, inputs, gamma=2,
                                                  max_decode_len=4),
               lambda: specjax.autoregressive_decode(target, tp, inputs, max_decode_len=4)):
    with pytest.raises(ValueError, match=match) as err:
      call()
    assert '\n' not in str(err.value)


def test_a_row_of_padding_alone_is_refused_unless_it_is_not_decoded():
  target, tp = chain_markov(0)
  inputs = np.array([[3, 4], [0, 0], [5, 0]], np.int32)
  with pytest.raises(ValueError, match=r'input row 1 holds only padding \(id 0\)') as err:
    specjax.speculative_decode(target, tp, target, tp, inputs, gamma=2, max_decode_len=4)
  assert '\n' not in str(err.value)
  out = specjax.speculative_decode(target, tp, target, tp, inputs, gamma=2, max_decode_len=4,
                                   num_inputs=1)  # only the first row is decoded
  assert int(out.lengths[0]) > 0 and not np.asarray(out.lengths[1:]).any()


def test_a_pad_id_inside_a_decoder_only_prompt_is_a_token():
  """Prompt lengths end at the last non-pad id: [4, 0, 6] padded to [4, 0, 6, 0, 0]
  decodes as [4, 0, 6] itself (counting non-pad ids would have cut it to [4, 0])."""
  target, tp = tiny_transformer()
  draft, dp = tiny_transformer(seed=4, layers=1)
  padded = specjax.speculative_decode(target, tp, draft, dp, jnp.array([[4, 0, 6, 0, 0]]),
                                      gamma=2, max_decode_len=8)
  exact = specjax.autoregressive_decode(target, tp, jnp.array([[4, 0, 6]]), max_decode_len=8)
  cut = specjax.autoregressive_decode(target, tp, jnp.array([[4, 0]]), max_decode_len=8)
  np.testing.assert_array_equal(padded.tokens, exact.tokens)
  assert not np.array_equal(exact.tokens, cut.tokens)
