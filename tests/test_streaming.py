"""Streaming: B slots over N inputs, a finished row taking the next input at once."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.models.markov import MarkovModel
from stats_util import chi_square_pvalue, enumerate_markov


def _inputs(n=10, width=8, seed=6):
  rng = np.random.default_rng(seed)
  rows = np.zeros((n, width), np.int32)
  for i in range(n):
    length = rng.integers(2, width + 1)
    rows[i, :length - 1] = rng.integers(3, 32, length - 1)
    rows[i, length - 1] = 1
  return rows


def test_greedy_stream_equals_each_inputs_own_decode(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair(0.9)
  inputs = _inputs()
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=12)
  assert len(set(np.asarray(ref.lengths).tolist())) >= 5  # rows finish apart
  fixed = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=3,
                                     max_decode_len=12)
  for slots in (1, 3, 4):
    out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=slots, gamma=3,
                                  max_decode_len=12)
    iterations = out.iterations
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    # each row's own counters are those of its decode in a fixed batch
    for name in ('target_calls', 'accepted', 'drafted', 'beta_count'):
      np.testing.assert_array_equal(getattr(out.stats, name), getattr(fixed.stats, name))
    # fixed batches of `slots` rows run until their busiest row is done; slots do not wait
    calls = np.asarray(fixed.stats.target_calls)
    batched = sum(calls[i:i + slots].max() for i in range(0, len(calls), slots))
    assert int(specjax.speculative_decode(target, tp, draft, dp, inputs[:slots], gamma=3,
                                          max_decode_len=12).iterations) == calls[:slots].max()
    assert int(iterations) <= batched
    if slots == 3:
      assert int(iterations) < batched
  alone = specjax.autoregressive_decode(target, tp, inputs, slots=4, max_decode_len=12)
  np.testing.assert_array_equal(alone.tokens, ref.tokens)
  np.testing.assert_array_equal(alone.stats.target_calls, ref.lengths)


def test_only_the_first_num_inputs_are_decoded(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair(0.9)
  inputs = _inputs()
  ref = specjax.autoregressive_decode(target, tp, inputs[:5], max_decode_len=12)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=3, gamma=2,
                                   max_decode_len=12, num_inputs=5)
  np.testing.assert_array_equal(out.tokens[:5], ref.tokens)
  assert not np.asarray(out.tokens[5:]).any() and not np.asarray(out.lengths[5:]).any()
  assert not np.asarray(out.stats.target_calls[5:]).any()


def test_bad_arguments(tiny_t5_pair):
  target, tp, draft, dp = tiny_t5_pair(0.9)
  with pytest.raises(ValueError, match='slots'):
    specjax.speculative_decode(target, tp, draft, dp, _inputs(), slots=0, gamma=2,
                            max_decode_len=4)
  with pytest.raises(ValueError, match='gamma'):
    specjax.speculative_decode(target, tp, draft, dp, _inputs(), slots=2, gamma=0,
                            max_decode_len=4)


def test_sampled_stream_follows_the_target():
  """Chi-square of the first three tokens against exactly enumerated probabilities."""
  vocab, start, n, steps = 6, 3, 12_000, 3
  model = MarkovModel(vocab)
  tp = model.init(jax.random.PRNGKey(10), scale=1.5)
  dp = model.init(jax.random.PRNGKey(11), scale=3.0)
  config = specjax.SamplingConfig(temperature=1.0)
  out = specjax.speculative_decode(model, tp, model, dp, jnp.full((n, 1), start, jnp.int32),
                                   slots=64, gamma=2, max_decode_len=steps, sampling=config,
                                   rng=jax.random.PRNGKey(4))
  expected = enumerate_markov(model.transition_probs(tp, config), start, steps)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert 0.05 < out.stats.acceptance_rate < 0.95


def test_decode_job_with_refill_matches_fixed_batches(tmp_path):
  """The CLI's job: same records, in input order, with and without refill."""
  from specjax.job import decode_job
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(['Print the page', 'Open the file', 'Save changes before closing?',
                            'Unable to open the file', 'Close the window', 'Quit',
                            'Delete the selected messages', 'Undo']) + '\n')

  def decode(refill):
    records = []
    summary = decode_job.run(decode_job.DecodeJob(input=str(src), gamma=3, batch_size=3, max_decode_len=24,
                                    refill=refill, progress=False), records.append)
    return summary, records

  streamed, streamed_records = decode(True)
  fixed, fixed_records = decode(False)
  assert streamed['identical_to_target'] is True and fixed['identical_to_target'] is True
  assert streamed_records == fixed_records  # predictions, counts, order
  assert streamed['generated_tokens'] == fixed['generated_tokens']


def test_a_run_of_several_refill_units_keeps_input_order_and_each_inputs_randomness(tmp_path):
  """20 sampled inputs at batch 2 with refill: three decode calls of up to 8 inputs. The
  records come in input order, and each input's sample is the one a single fixed batch of
  all 20 gives it: its randomness is its own (seed, line), not its unit's or its slot's."""
  from specjax.job import decode_job
  lines = ['Print the page', 'Open the file', 'Save changes before closing?', 'Quit',
           'Unable to open the file', 'Close the window', 'Delete the selected messages',
           'Undo', 'Redo', 'Copy the link'] * 2
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(lines) + '\n')

  def decode(batch_size, refill):
    records = []
    decode_job.run(decode_job.DecodeJob(input=str(src), gamma=3, batch_size=batch_size,
                                        max_decode_len=12, temperature=1.0, seed=5,
                                        refill=refill, compare=False, progress=False),
                   records.append)
    return records

  streamed, fixed = decode(2, True), decode(20, False)
  assert [r['input_line'] for r in streamed] == list(range(1, 21))
  assert [r['prediction'] for r in streamed] == [r['prediction'] for r in fixed]
  assert len({r['prediction'] for r in streamed[:10]} | {r['prediction'] for r in
                                                          streamed[10:]}) > 10
