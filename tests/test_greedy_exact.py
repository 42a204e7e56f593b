"""Greedy speculative output equals the target's own greedy output, token for token."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from models_for_tests import Negated, chain_markov, random_markov, tiny_transformer

INPUTS_4 = jnp.array([[3, 4, 0], [5, 0, 0], [7, 8, 9], [12, 6, 0]], jnp.int32)
MAX_LEN = 16


def _pairs(kind):
  if kind == 'markov':
    target, tp = chain_markov(0)
    unrelated, up = random_markov(7)
  else:
    target, tp = tiny_transformer(seed=1, layers=2)
    unrelated, up = tiny_transformer(seed=5, layers=1, eos_bias=0.0)
  return target, tp, {'same': (target, tp), 'unrelated': (unrelated, up),
                      'adversarial': (Negated(target), tp)}


@pytest.mark.parametrize('kind', ['markov', 'transformer'])
@pytest.mark.parametrize('batch', [1, 4])
def test_greedy_speculative_equals_target(kind, batch):
  target, tp, drafts = _pairs(kind)
  inputs = INPUTS_4[:batch]
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  if batch == 4:  # the batch really has rows that stop at different steps
    assert len(set(np.asarray(ref.lengths).tolist())) >= 3
  for name, (draft, dp) in drafts.items():
    for gamma in (1, 3, 7):
      out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=gamma,
                                       max_decode_len=MAX_LEN)
      np.testing.assert_array_equal(out.tokens, ref.tokens, err_msg=f'{name} gamma={gamma}')
      np.testing.assert_array_equal(out.lengths, ref.lengths)
      stats = out.stats
      if name == 'adversarial':
        assert int(jnp.sum(stats.accepted)) == 0
        # nothing accepted: one token per call, so calls == generated tokens
        np.testing.assert_array_equal(stats.target_calls, out.lengths)
      if name == 'same':
        assert stats.acceptance_rate > 0.95
        # each call yields up to gamma + 1 tokens
        assert np.all(np.asarray(stats.target_calls)
                      >= np.ceil(np.asarray(out.lengths) / (gamma + 1)))
        assert np.all(np.asarray(stats.target_calls) < np.asarray(out.lengths) + 1)


def test_output_padded_after_eos_and_lengths_count_eos():
  target, tp = chain_markov(0)
  ref = specjax.autoregressive_decode(target, tp, INPUTS_4, max_decode_len=MAX_LEN)
  tokens, lengths = np.asarray(ref.tokens), np.asarray(ref.lengths)
  for row, n in zip(tokens, lengths):
    if n < MAX_LEN:
      assert row[n - 1] == 1 and np.all(row[n:] == 0)
    assert 1 not in row[:n - 1].tolist()


def test_draft_equal_to_target_accepts_every_markov_token():
  target, tp = chain_markov(0)
  out = specjax.speculative_decode(target, tp, target, tp, INPUTS_4, gamma=3,
                                   max_decode_len=MAX_LEN)
  s = jax.tree.map(np.asarray, out.stats)
  np.testing.assert_array_equal(s.accepted, s.beta_count)  # every verified draft accepted
  assert out.stats.alpha == pytest.approx(1.0) and out.stats.acceptance_rate == 1.0
  np.testing.assert_array_equal(s.drafted, 3 * s.target_calls)
  np.testing.assert_array_equal(s.generated, out.lengths)
  np.testing.assert_array_equal(s.accepted_per_position.sum(1), s.accepted)
  # a full block yields G + 1 tokens; only the last call of a row may yield fewer
  assert np.all(s.generated > 4 * (s.target_calls - 1))
  assert out.stats.tokens_per_call == pytest.approx(s.generated.sum() / s.target_calls.sum())


def test_alpha_ignores_draft_positions_past_eos():
  # The draft agrees with the target everywhere except after EOS, where no output exists.
  target, tp = chain_markov(0)
  after_eos = tp['logits'][1]
  other = (int(jnp.argmax(after_eos)) + 1) % after_eos.shape[0]
  dp = {'logits': tp['logits'].at[1, other].add(100.0)}
  out = specjax.speculative_decode(target, tp, target, dp, INPUTS_4, gamma=4,
                                   max_decode_len=MAX_LEN)
  ref = specjax.autoregressive_decode(target, tp, INPUTS_4, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert out.stats.alpha == pytest.approx(1.0)
  # drafts past EOS were proposed, and neither counted as accepted nor as rejected
  assert out.stats.acceptance_rate == 1.0
  assert int(out.stats.accepted.sum()) < int(out.stats.drafted.sum())


def test_alpha_ignores_draft_positions_past_max_decode_len():
  target, tp = chain_markov(0)
  inputs = jnp.array([[5, 0, 0]], jnp.int32)  # its greedy path 6, 7, ... runs 11 tokens
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=5)
  path = [3] + np.asarray(ref.tokens[0]).tolist()
  assert int(ref.lengths[0]) == 5 and path[-1] not in path[:-1] + [1]  # cut by the length
  # The draft agrees with the target except after the output's last token.
  row = tp['logits'][path[-1]]
  dp = {'logits': tp['logits'].at[path[-1], (int(jnp.argmax(row)) + 1) % row.shape[0]]
        .add(100.0)}
  # gamma 3: the second block's drafts run past the 5th token, where the draft disagrees.
  out = specjax.speculative_decode(target, tp, target, dp, inputs, gamma=3, max_decode_len=5)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert out.stats.alpha == pytest.approx(1.0)
