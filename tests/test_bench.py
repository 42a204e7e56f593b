"""The bench's arithmetic on hand-made timings, and a --quick run end to end."""
import json
import os

import pytest

from specjax.bench import cli, decodes, report, rows
from specjax.core import theory
from specjax.speed import timing

# One worker runs this file (scripts/run_tests.sh: --dist loadfile), so that the --quick run
# of the module fixture is made once.


def test_score_on_hand_made_timings():
  costs = {'c': 0.1, 'v': {5: 1.5}}
  s = rows.score(baseline_seconds=10.0, seconds=4.0, alpha=0.8, gamma=4, costs=costs,
                      baseline_prefill=1.0, prefill=1.5)
  expected_e = (1 - 0.8 ** 5) / (1 - 0.8)  # 3.3616 tokens per call
  predicted = expected_e / (4 * 0.1 + 1.5)
  assert s['speedup'] == pytest.approx(2.5)
  assert s['loop_speedup'] == pytest.approx(9.0 / 2.5)  # (10 - 1) / (4 - 1.5)
  assert s['predicted_speedup'] == pytest.approx(predicted)
  assert s['efficiency'] == pytest.approx(3.6 / predicted)
  assert s['end_to_end_efficiency'] == pytest.approx(2.5 / predicted)
  assert rows.score(10.0, 4.0, 0.8, 4, costs)['loop_speedup'] == pytest.approx(2.5)
  lost = rows.score(10.0, 4.0, 0.8, 4, costs, baseline_prefill=1.0, prefill=4.2)
  assert lost['loop_speedup'] is None and lost['efficiency'] is None


def test_best_gamma_uses_the_measured_verify_cost():
  flat = {k: 1.0 for k in range(1, 10)}
  steep = {k: 1.0 + 0.6 * (k - 1) for k in range(1, 10)}  # a compute-bound verify
  g_flat = theory.best_gamma(0.8, 0.05, lambda k: flat[k], range(1, 9))
  g_steep = theory.best_gamma(0.8, 0.05, lambda k: steep[k], range(1, 9))
  assert g_flat == 8 and g_steep < g_flat
  # brute force agrees
  best = max(range(1, 9), key=lambda g: theory.speedup(0.8, g, 0.05, steep[g + 1]))
  assert g_steep == best


def _row(**extra):
  """A hand-made greedy row at gamma 2 with its interleaved timings."""
  row = {'gamma': 2, 'temperature': 0.0, 'alpha': 0.8, 'speedup': 1.6, 'iterations': 10,
         'tokens': 22, 'baseline_tokens': 22, 'seconds': 0.025, 'prefill_seconds': 0.005,
         'baseline_seconds': 0.0374, 'baseline_prefill_seconds': 0.004, 't_1': 0.001,
         'c': 0.1, 'v': 1.5, 'model_calls_seconds': 0.0018, 'tokens_per_call': 2.5,
         'target_calls': 10}
  row.update(extra)
  row.update(rows.score(row['baseline_seconds'], row['seconds'], row['alpha'], 2,
                              {'c': row['c'], 'v': {3: row['v']}},
                              row['baseline_prefill_seconds'], row['prefill_seconds'],
                              row['tokens'], row['baseline_tokens']))
  row['factors'] = rows.efficiency_factors(row)
  return row


def _product(factors):
  return factors['tokens'] * factors['calls'] * factors['loop'] * factors['baseline']


def test_efficiency_is_the_product_of_its_measured_factors():
  row = _row()
  f = row['factors']
  # 22 tokens / 10 iterations against E(0.8, 2) = 2.44
  assert f['tokens'] == pytest.approx(2.2 / 2.44)
  # calls alone (2 * 0.1 + 1.5) * 1 ms = 1.7 ms against 1.8 ms alternating
  assert f['calls'] == pytest.approx(1.7 / 1.8)
  # 1.8 ms of calls in an iteration of (25 - 5) ms / 10 = 2 ms
  assert f['loop'] == pytest.approx(0.9)
  # the target alone: (37.4 - 4) ms / 22 tokens = 1.518 ms per token, over t_1 = 1 ms
  assert f['baseline'] == pytest.approx(33.4 / 22)
  assert row['efficiency'] == pytest.approx(_product(f))
  # sampled rows differ in length: speedups are ratios of tokens per second
  longer = _row(baseline_tokens=33)
  assert longer['loop_speedup'] == pytest.approx(row['loop_speedup'] * 22 / 33)
  assert longer['efficiency'] == pytest.approx(_product(longer['factors']))
  assert rows.efficiency_factors(_row(prefill_seconds=0.03)) is None
  # at batch 2 the factors are per row: the same timings and tokens over twice the rows
  pair = _row(batch_size=2)['factors']
  assert pair['tokens'] == pytest.approx(f['tokens'] / 2)
  assert pair['baseline'] == pytest.approx(f['baseline'] * 2)
  assert _product(pair) == pytest.approx(row['efficiency'])


def test_interleaved_rounds_run_every_job_each_round_and_spread_compares_extremes():
  order = []
  times = {'a': iter([3.0, 1.0, 2.0]), 'b': iter([0.5, 0.7, 0.6])}

  def job(name):
    def run():
      order.append(name)
      return next(times[name])
    return run

  rounds = rows.interleaved_rounds({'a': job('a'), 'b': job('b')}, rounds=3)
  assert rounds == {'a': [3.0, 1.0, 2.0], 'b': [0.5, 0.7, 0.6]}
  assert order == ['a', 'b'] * 3
  assert rows.spread(rounds['a']) == pytest.approx(2.0)
  assert rows.spread(rounds['b']) == pytest.approx(0.4)
  assert rows.spread([1.0]) == 0.0


def test_noise_line_reports_median_spreads():
  rows = [_row(spread={'t_1': 0.1, 'seconds': 0.3, 'baseline_seconds': 0.5}),
          _row(spread={'t_1': 0.3, 'seconds': 0.1, 'baseline_seconds': 0.7})]
  line = report.noise({'rows': rows, 'rounds': 5})
  # every figure of both rows: 0.1, 0.3, 0.5, 0.3, 0.1, 0.7 -> median 0.3
  assert 'slower than its fastest by 30%' in line and '5 rounds' in line
  assert 't_1 20%' in line and 'speculative decodes 20%' in line
  assert 'target-alone decodes 60%' in line
  assert report.noise({'rows': rows, 'rounds': 1}) == ''
  assert report.noise({'rows': [_row()], 'rounds': 5}) == ''


def _timed_result(**extra):
  return {'rows': [_row(**extra)], 'rounds': 3, 'batch_size': 1}


def test_reading_accounts_for_the_time():
  text = report.reading(_timed_result())
  # (0.025 - 0.005) s / 10 iterations = 2 ms; calls alone 0.2 + 1.5 ms, together 1.8 ms
  assert 'iteration measures 2.00 ms' in text and 'account for 1.70 ms' in text
  assert 'take 1.80 ms (x0.94' in text and 'remaining 0.20 ms (x0.90)' in text
  assert 'yields 2.20 tokens' in text and 'E = 2.44' in text and '(x0.90' in text
  assert '1.52 t_1 per token' in text and '3 interleaved rounds' in text
  assert '20% of the speculative' in text and '11% of the target-alone' in text
  row = _timed_result()['rows'][0]
  assert f'efficiency is {row["efficiency"]:.2f} = 0.90 x 0.94 x 0.90 x 1.52' in text
  noisy = report.reading(_timed_result(model_calls_seconds=0.0023))
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
  seconds = timing.model_calls_seconds(
      _Recording(model, target_log), params, _Recording(model, draft_log), params,
      np.full((3, 4), 5, np.int32), gamma=4, repeats=2, trials=1)
  assert seconds > 0
  # Traced once: the timed loop and the zero-repeat run that measures the set-up are one
  # program (the count is traced), so XLA cannot drop the set-up from the zero-repeat run.
  assert target_log == [(3, 5)]  # one verify call of G + 1 tokens
  assert draft_log == [(3, 2), (3, 1)]  # the catch-up call, then the scanned steps
  # The decode loop itself makes the same calls (after writing the [3, 4] prompts).
  import specjax
  loop_target, loop_draft = [], []
  specjax.speculative_decode(_Recording(model, loop_target), params,
                             _Recording(model, loop_draft), params,
                             np.full((3, 4), 5, np.int32), gamma=4, max_decode_len=6)
  assert loop_target == [(3, 4), (3, 5)] and loop_draft == [(3, 4), (3, 2), (3, 1)]


def test_step_costs_trace_each_call_size_once():
  """c and v(K) for K = 1..3: the draft's step and three verify sizes, one program each
  (the zero-repeat run of each and the device count reuse it), every K timed."""
  import jax
  import numpy as np
  from specjax.models.markov import MarkovModel
  target_log, draft_log = [], []
  model = MarkovModel(16)
  params = model.init(jax.random.PRNGKey(0))
  costs = timing.step_costs(_Recording(model, target_log), params, _Recording(model, draft_log),
                            params, np.full((2, 4), 5, np.int32), 3, rounds=2, repeats=2,
                            trials=1)
  assert sorted(target_log) == [(2, 1), (2, 2), (2, 3)]  # a verify of K tokens is [B, K]
  assert draft_log == [(2, 1)]
  assert sorted(costs['v']) == [1, 2, 3] and costs['v'][1] == 1.0
  assert costs['c'] == pytest.approx(costs['draft_step_seconds'] / costs['target_step_seconds'])
  assert costs['devices'] == 1


def test_per_repeat_seconds_subtracts_the_fastest_set_up_from_the_fastest_loop(monkeypatch):
  """A fake clock: set-up 5 ms, 0.1 ms a repeat, noise on top. In the first trial the
  zero-repeat run is slowed by 0.8 ms. The minimum of each column gives 0.1 ms exactly;
  the minimum of the trials' differences would have taken the first trial's 0.05 ms."""
  clock = [0.0]
  noise = iter([0.0,  # the first call, which compiles
                0.0, 0.0008, 0.0003, 0.0, 0.0002, 0.0004])  # (16 repeats, 0 repeats) x 3
  durations = []

  def run(n):
    durations.append((n, 0.005 + n * 0.0001 + next(noise)))
    clock[0] += durations[-1][1]
    return n

  monkeypatch.setattr(timing.time, 'perf_counter', lambda: clock[0])
  seconds = timing.per_repeat_seconds(run, 16, 3)
  assert [n for n, _ in durations] == [16, 16, 0, 16, 0, 16, 0]  # interleaved pairs
  assert seconds == pytest.approx(0.0001, rel=1e-9)
  pairs = [(durations[i][1], durations[i + 1][1]) for i in (1, 3, 5)]
  old_rule = min((loop - setup) / 16 for loop, setup in pairs)
  assert old_rule == pytest.approx(0.00005, rel=1e-9)  # the rule this replaced: too low


_RUN = {}  # the one run: an xdist worker may tear a module fixture down and set it up again


@pytest.fixture(scope='module')
def quick_bench(tmp_path_factory):
  """One --quick run with the peers and the rows beyond the draft model: (its JSON, the
  plot's path, its markdown)."""
  if _RUN:
    return _RUN['bench']
  tmp = tmp_path_factory.mktemp('bench')
  out, png, md = tmp / 'b.json', tmp / 'b.png', tmp / 'b.md'
  assert cli.main(['--quick', '--json', str(out), '--plot', str(png), '--markdown', str(md),
                   '--peers', 'hf', '--drafts', 'copy,layerskip:1',
                   '--verifications', 'token,block',
                   '--variant-gammas', '2', '--thresholds', '0.5', '--threshold-gamma', '3',
                   '--threshold-rules', 'cumulative']) == 0
  _RUN['bench'] = (json.loads(out.read_text()), png, md.read_text())
  return _RUN['bench']


def test_quick_bench_end_to_end(quick_bench):
  result, png, text = quick_bench
  # At most one trace per input shape: none where an earlier test of this process traced the
  # same programs (test_compile_and_errors counts exactly one from a cold start).
  assert result['rows'] and result['traces'] <= 1 and result['input_widths'] == [8]
  for row in result['rows']:
    for key in ('gamma', 'temperature', 'alpha', 'tokens_per_call', 'speedup',
                'predicted_speedup', 'prefill_seconds'):
      assert isinstance(row[key], (int, float)), key
    for key in ('loop_speedup', 'efficiency'):  # None when noise swallows a tiny loop
      assert row[key] is None or row[key] > 0, key
    assert row['prefill_seconds'] > 0 and row['iterations'] >= 1
    assert row['traces'] <= row['shapes'] == 1  # no more than one trace per input shape
    assert 0.0 <= row['alpha'] <= 1.0 and 1.0 <= row['tokens_per_call'] <= row['gamma'] + 1
    if row['temperature'] == 0.0:
      assert row['identical_to_target'] is True
    assert row['model_calls_seconds'] > 0 and row['t_1'] > 0 and row['c'] > 0
    assert row['factors'] is None or set(row['factors']) == {'tokens', 'calls', 'loop',
                                                             'baseline'}
    assert set(row['spread']) >= {'t_1', 'seconds', 'baseline_seconds'}
    assert all(x >= 0.0 for x in row['spread'].values())
  for key in ('c', 'v', 'compile_seconds', 'traces', 'machine'):
    assert key in result
  assert result['machine']['jax']
  for row in result['rows']:
    assert row['tokens_per_iteration_at_lengths'] >= 1.0
    assert row['predicted_speedup_at_lengths'] <= row['predicted_speedup'] + 1e-9
  assert result['draft_after_sweep']['sweep_bytes'] > 0
  assert result['draft_after_sweep']['gamma'] in (1, 2)
  assert all(run['identical'] for run in result['peers']['runs'].values())
  assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert 'Where the time goes' in text and '`draft_step`' in text
  assert 'timing noise:' in text  # --rounds 3 by default
  # tiny models' figures are said to be no measurement, and only theirs
  assert result['quick'] is True and report.QUICK_NOTE in text
  assert report.QUICK_NOTE not in report.format_table(dict(result, quick=False))


def test_inputs_first_or_longest_in_file_order(tmp_path):
  path = tmp_path / 'in.jsonl'
  lines = ['a b', 'a much longer line', 'mid line', '', 'the longest line of them all']
  path.write_text('\n'.join(json.dumps({'en': t}) if t else '' for t in lines))
  assert cli._read_texts(str(path), 'p: ', 2) == ['p: a b', 'p: a much longer line']
  assert cli._read_texts(str(path), 'p: ', 2, 'longest') == [
      'p: a much longer line', 'p: the longest line of them all']


def test_timed_decode_keeps_each_batchs_fastest_pass():
  import time
  import numpy as np
  from specjax.core.state import DecodeOutput
  from specjax.core.state import DecodeStats
  calls = []

  def fn(batch):  # every batch's first timed pass hits a "slow spell" of 0.2 s
    calls.append(int(batch[0, 0]))
    if len(calls) > 1 and calls.count(calls[-1]) == 2:
      time.sleep(0.2)
    return DecodeOutput(tokens=batch, lengths=np.ones(1, np.int32),
                        stats=DecodeStats.zeros(1, 2))

  batches = [np.full((1, 3), i, np.int32) for i in range(4)]
  run = decodes.timed_decode(fn, batches, passes=3)
  assert len(calls) == 1 + 4 * 3  # the compile call, then three passes per batch
  assert run['seconds'] < 0.2 and run['num_tokens'] == 4
  assert run['tokens'].tolist() == [[i] * 3 for i in range(4)]


def _simulated_iterations(alpha, gamma, length, trials=200_000, seed=0):
  """Mean iterations to produce `length` tokens when each draft token is accepted with
  probability alpha, independently: a Monte Carlo of the loop, apart from `theory`."""
  import numpy as np
  rng = np.random.default_rng(seed)
  left = np.full(trials, length)
  iterations = np.zeros(trials)
  while (left > 0).any():
    accepted = np.argmin(np.concatenate([rng.random((trials, gamma)) < alpha,
                                         np.zeros((trials, 1), bool)], axis=1), axis=1)
    busy = left > 0
    iterations += busy
    left = np.where(busy, np.maximum(left - accepted - 1, 0), 0)
  return iterations.mean()


def test_at_lengths_splits_the_tokens_factor():
  row = _row()
  row.update(rows.at_lengths(row, [12, 10]))
  at = theory.tokens_per_iteration_at_lengths(0.8, 2, [12, 10])
  simulated = 22 / (_simulated_iterations(0.8, 2, 12) + _simulated_iterations(0.8, 2, 10, seed=1))
  assert at == pytest.approx(simulated, rel=5e-3)
  assert row['tokens_per_iteration_at_lengths'] == pytest.approx(at)
  assert row['predicted_speedup_at_lengths'] == pytest.approx(at / (2 * 0.1 + 1.5))
  assert row['efficiency_at_lengths'] == pytest.approx(
      row['loop_speedup'] / row['predicted_speedup_at_lengths'])
  split = row['tokens_split']
  assert split['lengths'] == pytest.approx(at / theory.expected_tokens_per_call(0.8, 2))
  assert split['lengths'] * split['variation'] == pytest.approx(row['factors']['tokens'])
  assert split['lengths'] < 1.0  # 12 and 10 tokens end inside blocks of up to 3
  text = report.reading({'rows': [row], 'rounds': 3, 'batch_size': 1})
  assert f'yields {at:.2f} tokens per iteration (x{split["lengths"]:.2f}, lengths)' in text
  assert f'efficiency {row["efficiency_at_lengths"]:.2f}.' in text


def test_reading_names_the_draft_blocks_penalty():
  result = _timed_result()
  result['draft_after_sweep'] = {'gamma': 2, 'draft_block_seconds': 0.0002,
                                 'penalty_seconds': 0.00008, 'sweep_bytes': 42_000_000}
  text = report.reading(result)
  assert '0.20 ms back to back, and 0.08 ms more when a read of 42 MB' in text
  assert 'measure 0.10 ms more than alone' in text  # 1.8 ms alternating - 1.7 ms alone
  result['draft_after_sweep']['gamma'] = 3  # measured at another gamma: not quoted
  assert '42 MB' not in report.reading(result)


def test_draft_after_sweep_times_the_draft_block_and_the_read():
  import jax
  import numpy as np
  from specjax.models.markov import MarkovModel
  log = []
  model = MarkovModel(16)
  params = model.init(jax.random.PRNGKey(0))
  out = timing.draft_after_sweep(_Recording(model, log), params, np.full((2, 4), 5, np.int32),
                                    gamma=3, sweep_bytes=timing.params_bytes(params),
                                    repeats=2, rounds=1)
  assert out['sweep_bytes'] == 16 * 16 * 4  # the Markov model's [V, V] float32 logits
  assert out['penalty_seconds'] == pytest.approx(
      out['alternating_seconds'] - out['draft_block_seconds'] - out['sweep_seconds'])
  assert min(out['draft_block_seconds'], out['sweep_seconds'], out['alternating_seconds']) > 0
  # the draft block is the decode's: a catch-up pair, then G - 1 single steps
  assert set(log) == {(2, 2), (2, 1)} and log[:2] == [(2, 2), (2, 1)]


def test_quick_bench_with_refill(tmp_path):
  out = tmp_path / 'b.json'
  assert cli.main(['--quick', '--batch-size', '2', '--refill', '--temperatures', '0',
                     '--json', str(out)]) == 0
  result = json.loads(out.read_text())
  assert result['refill'] is True and result['batch_size'] == 2
  for row in result['rows']:
    assert row['refill'] is True and row['identical_to_target'] is True
    assert row['traces'] <= row['shapes'] == 1  # the stream compiles once per shape
    # one stream of 4 inputs through 2 slots: at least 2 iterations, fewer than 4 x 8
    assert 2 <= row['iterations'] < 32


def test_quick_bench_rows_beyond_the_draft_model(quick_bench):
  result, _, text = quick_bench
  variants = result['variants']
  kinds = {(r['draft'], r['verification'], r['draft_threshold'], r['temperature'])
           for r in variants}
  assert ('copy', 'block', 0.0, 1.0) in kinds and ('t5_tiny_draft', 'token', 0.5, 0.0) in kinds
  # a draft that reads the target (layer-skip: its step is timed on the target's params)
  assert {('layerskip:1', 'token', 0.0, 0.0), ('layerskip:1', 'block', 0.0, 1.0)} <= kinds
  assert ('copy', 'block', 0.0, 0.0) not in kinds  # greedy block rows are the token rule's
  dynamic = {(r['threshold_rule'], r['gamma'], r['temperature']) for r in variants
             if r['draft_threshold'] > 0}
  assert dynamic == {('cumulative', 3, t) for t in (0.0, 1.0)}
  for r in variants:
    if r['temperature'] == 0.0:
      assert r['identical_to_target'] is True
    assert 1.0 <= r['drafted_per_call'] <= r['gamma']
  assert '## Other drafts, block verification, dynamic gamma' in text
  assert 'the best threshold (0.5' in text


def test_gamma_auto_rows_calibrate_in_a_cache_of_their_own(tmp_path, monkeypatch):
  """--gamma-auto-batches: each run calibrates (never a choice the user's cache holds),
  keeps it in a temporary cache rather than the user's, and reports no such path."""
  from specjax.bench import variants  # pylint: disable=import-outside-toplevel
  from specjax.job import gamma_choice  # pylint: disable=import-outside-toplevel
  users = tmp_path / 'users-cache'
  monkeypatch.setenv(gamma_choice.CACHE_ENV, str(users))
  users.mkdir()
  held = '{"a setting": {"gamma": 3, "reason": "r", "calibration": {}, "date": "d"}}\n'
  (users / gamma_choice.CACHE_NAME).write_text(held)
  texts = ['translate English to German: The house is small.',
           'translate English to German: I like green tea.']
  out = variants.gamma_auto_runs(texts, [2], dict(
      target='demo_target', draft='demo_draft', max_input_len=16, max_decode_len=8,
      max_gamma=2, seed=0))
  (row,) = out
  assert row['batch_size'] == 2 and row['gamma'] in (0, 1, 2)
  assert row['gamma_reason'].startswith('calibrated on 1 device: alpha ')
  assert 'kept in' not in row['gamma_reason'] and 'as calibrated' not in row['gamma_reason']
  assert (users / gamma_choice.CACHE_NAME).read_text() == held  # the user's, untouched
  assert os.environ[gamma_choice.CACHE_ENV] == str(users)  # restored
