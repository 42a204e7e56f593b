"""The bench's arithmetic on hand-made timings, and a --quick run end to end."""
import json

import pytest

from specjax import bench, benchmark, report, theory


def test_score_on_hand_made_timings():
  costs = {'c': 0.1, 'v': {5: 1.5}}
  s = benchmark.score(baseline_seconds=10.0, seconds=4.0, alpha=0.8, gamma=4, costs=costs,
                      baseline_prefill=1.0, prefill=1.5)
  expected_e = (1 - 0.8 ** 5) / (1 - 0.8)  # 3.3616 tokens per call
  predicted = expected_e / (4 * 0.1 + 1.5)
  assert s['speedup'] == pytest.approx(2.5)
  assert s['loop_speedup'] == pytest.approx(9.0 / 2.5)  # (10 - 1) / (4 - 1.5)
  assert s['predicted_speedup'] == pytest.approx(predicted)
  assert s['efficiency'] == pytest.approx(3.6 / predicted)
  assert s['end_to_end_efficiency'] == pytest.approx(2.5 / predicted)
  assert benchmark.score(10.0, 4.0, 0.8, 4, costs)['loop_speedup'] == pytest.approx(2.5)
  lost = benchmark.score(10.0, 4.0, 0.8, 4, costs, baseline_prefill=1.0, prefill=4.2)
  assert lost['loop_speedup'] is None and lost['efficiency'] is None


def test_iterations_count_the_busiest_row_of_each_batch():
  import numpy as np
  assert benchmark._iterations(np.array([3, 5, 2, 2, 7, 1]), 2) == 5 + 2 + 7
  assert benchmark._iterations(np.array([3, 5, 2]), 1) == 10


def test_best_gamma_uses_the_measured_verify_cost():
  flat = {k: 1.0 for k in range(1, 10)}
  steep = {k: 1.0 + 0.6 * (k - 1) for k in range(1, 10)}  # a compute-bound verify
  g_flat = theory.best_gamma(0.8, 0.05, lambda k: flat[k], range(1, 9))
  g_steep = theory.best_gamma(0.8, 0.05, lambda k: steep[k], range(1, 9))
  assert g_flat == 8 and g_steep < g_flat
  # brute force agrees
  best = max(range(1, 9), key=lambda g: theory.speedup(0.8, g, 0.05, steep[g + 1]))
  assert g_steep == best


def _timed_result(**extra):
  """Hand-made bench results: one greedy row at gamma 2 and its baseline."""
  return {'rows': [{'gamma': 2, 'temperature': 0.0, 'speedup': 1.6, 'loop_speedup': 2.0,
                    'predicted_speedup': 2.1, 'target_calls': 10, 'iterations': 10,
                    'tokens': 22, 'seconds': 0.025, 'prefill_seconds': 0.005,
                    'tokens_per_call': 2.5, 'alpha': 0.8, 'efficiency': 0.95}],
          'baselines': {'0.0': {'seconds': 0.044, 'prefill_seconds': 0.004,
                                'num_tokens': 32}},
          'batch_size': 1, 'target_step_seconds': 0.001, 'c': 0.1, 'v': {'3': 1.5}, **extra}


def test_reading_accounts_for_the_time():
  text = report.reading(_timed_result())
  # (0.025 - 0.005) s / 10 iterations = 2 ms; model calls 0.2 + 1.5 ms; the loop 0.3 ms
  assert '2.00 ms' in text and '1.70 ms' in text and '0.30 ms, 15%' in text
  # 22 tokens / 10 iterations vs E(0.8, 2) = 2.44; 2 ms / (0.04 s / 32 tokens) = 1.6 steps
  assert 'yields 2.20 tokens' in text and 'E = 2.44' in text and '(x0.90' in text
  assert 'costs 1.60 steps' in text and 'gamma c + v = 1.70 (x1.06)' in text
  assert '20% of the speculative' in text and '9% of the target-alone' in text
  assert 'end-to-end speedup is 1.60x' in text and '(efficiency 0.95)' in text


def test_reading_splits_the_cost_when_the_model_calls_were_timed_together():
  text = report.reading(_timed_result(
      model_calls={'gamma': 2, 'seconds': 0.0018, 'target_steps': 1.8}))
  # calls alone 1.7 ms, together 1.8 ms (x0.94); the loop's work 2.0 - 1.8 ms (x0.90)
  assert '1.80 ms (1.80 target steps, x0.94' in text
  assert 'remaining 0.20 ms (x0.90)' in text
  assert '1.25 t_1 per token' in text  # 40 ms of loop / 32 tokens over t_1 = 1 ms
  noisy = report.reading(_timed_result(
      model_calls={'gamma': 2, 'seconds': 0.0023, 'target_steps': 2.3}))
  assert 'below the timing noise' in noisy and '0.30 ms more than a whole iteration' in noisy


class _Recording:
  """Wraps a model and records the token shapes its decode is traced with."""

  def __init__(self, base, log):
    self.base, self.log = base, log

  def __getattr__(self, name):
    return getattr(self.base, name)

  def decode(self, params, encoded, cache, tokens, positions):
    self.log.append(tokens.shape)
    return self.base.decode(params, encoded, cache, tokens, positions)


def test_model_calls_of_one_iteration_are_the_loops_calls():
  import jax
  import numpy as np
  from specjax.models.markov import MarkovModel
  target_log, draft_log = [], []
  model = MarkovModel(16)
  params = model.init(jax.random.PRNGKey(0))
  seconds = benchmark.model_calls_seconds(
      _Recording(model, target_log), params, _Recording(model, draft_log), params,
      np.full((3, 4), 5, np.int32), gamma=4, repeats=2, trials=1)
  assert seconds > 0
  # Traced twice (the timed loop and the zero-repeat one that measures the set-up).
  assert target_log == [(3, 5)] * 2  # one verify call of G + 1 tokens
  assert draft_log == [(3, 2), (3, 1)] * 2  # the catch-up call, then the scanned steps


def test_quick_bench_end_to_end(tmp_path):
  out, png, md = tmp_path / 'b.json', tmp_path / 'b.png', tmp_path / 'b.md'
  assert bench.main(['--quick', '--json', str(out), '--plot', str(png), '--markdown', str(md),
                     '--peers', 'hf']) == 0
  result = json.loads(out.read_text())
  assert result['rows'] and result['traces'] == 1
  for row in result['rows']:
    for key in ('gamma', 'temperature', 'alpha', 'tokens_per_call', 'speedup',
                'predicted_speedup', 'prefill_seconds'):
      assert isinstance(row[key], (int, float)), key
    for key in ('loop_speedup', 'efficiency'):  # None when noise swallows a tiny loop
      assert row[key] is None or row[key] > 0, key
    assert row['prefill_seconds'] > 0 and row['iterations'] >= 1
    assert 0.0 <= row['alpha'] <= 1.0 and 1.0 <= row['tokens_per_call'] <= row['gamma'] + 1
    if row['temperature'] == 0.0:
      assert row['identical_to_target'] is True
  assert result['model_calls']['seconds'] > 0
  for key in ('c', 'v', 'compile_seconds', 'traces', 'machine'):
    assert key in result
  assert result['machine']['jax']
  assert all(run['identical'] for run in result['peers']['runs'].values())
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert 'Where the time goes' in md.read_text()


def test_inputs_first_or_longest_in_file_order(tmp_path):
  path = tmp_path / 'in.jsonl'
  lines = ['a b', 'a much longer line', 'mid line', '', 'the longest line of them all']
  path.write_text('\n'.join(json.dumps({'en': t}) if t else '' for t in lines))
  assert bench._read_texts(str(path), 'p: ', 2) == ['p: a b', 'p: a much longer line']
  assert bench._read_texts(str(path), 'p: ', 2, 'longest') == [
      'p: a much longer line', 'p: the longest line of them all']


def test_timed_decode_keeps_each_batchs_fastest_pass():
  import time
  import numpy as np
  from specjax.decoding import DecodeOutput
  from specjax.loop_state import DecodeStats
  calls = []

  def fn(batch):  # every batch's first timed pass hits a "slow spell" of 0.2 s
    calls.append(int(batch[0, 0]))
    if len(calls) > 1 and calls.count(calls[-1]) == 2:
      time.sleep(0.2)
    return DecodeOutput(tokens=batch, lengths=np.ones(1, np.int32),
                        stats=DecodeStats.zeros(1, 2))

  batches = [np.full((1, 3), i, np.int32) for i in range(4)]
  run = benchmark.timed_decode(fn, batches, passes=3)
  assert len(calls) == 1 + 4 * 3  # the compile call, then three passes per batch
  assert run['seconds'] < 0.2 and run['num_tokens'] == 4
  assert run['tokens'].tolist() == [[i] * 3 for i in range(4)]
