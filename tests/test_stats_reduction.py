"""The one reduction from a decode's counters to its reported figures
(specjax/core/figures.py): hand-written counters and their expected figures, the CLI's,
evaluate's and the T5X aux's tokens per call after a row ended inside its accepted drafts,
and a scan of the package showing that no other module derives a figure from the counters."""
import ast
import pathlib
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.core.figures import decode_figures, per_example_figures
from specjax.core.state import DecodeOutput, DecodeStats
from specjax.job.task_eval import Predictor
from specjax.job.totals import Totals

REPO = pathlib.Path(__file__).resolve().parents[1]
# Two rows at gamma 4, counted by hand:
# row 0, 3 calls: all 4 drafts accepted + bonus (5 tokens, 4 positions verified), none
#   accepted + the resample (1 token, 1 verified), 1 accepted + resample (2 tokens, 2
#   verified): accepted 5, generated 8, beta_count 7, per position [2, 1, 1, 1].
# row 1, 2 calls: 2 accepted + resample (3 tokens, 3 verified); then all 4 accepted with
#   EOS at the 2nd, so the output ends there (2 tokens, 2 verified) and the 2 drafts past
#   EOS and the bonus token count nowhere: accepted 4, generated 5, beta_count 5,
#   per position [2, 2, 0, 0].
STATS = DecodeStats(
    target_calls=np.int32([3, 2]), drafted=np.int32([12, 8]), accepted=np.int32([5, 4]),
    accepted_per_position=np.int32([[2, 1, 1, 1], [2, 2, 0, 0]]),
    generated=np.int32([8, 5]), beta_sum=np.float32([4.5, 3.5]),
    beta_count=np.int32([7, 5]), nonfinite=np.int32([0, 0]))


def _check_batch_figures(f):
  assert float(f.alpha) == pytest.approx(8.0 / 12)
  assert float(f.acceptance_rate) == pytest.approx(0.75)  # 9 / 12
  assert float(f.tokens_per_call) == pytest.approx(2.6)  # 13 / 5
  assert float(f.accepted_per_call) == pytest.approx(1.8)  # 9 / 5
  assert float(f.drafted_per_call) == pytest.approx(4.0)  # 20 / 5
  np.testing.assert_allclose(f.accepted_per_position, [0.8, 0.6, 0.2, 0.2], rtol=1e-6)


def test_figures_of_hand_written_counters():
  f = decode_figures(STATS)
  _check_batch_figures(f)
  assert float(np.sum(f.accepted_per_position)) == pytest.approx(float(f.accepted_per_call))


def test_jax_counters_give_the_same_figures_and_trace():
  stats = jax.tree.map(jnp.asarray, STATS)
  _check_batch_figures(decode_figures(stats))
  _check_batch_figures(jax.jit(decode_figures)(stats))
  assert isinstance(decode_figures(stats).alpha, jax.Array)


def test_counters_summed_over_calls_give_the_same_figures():
  summed = types.SimpleNamespace(target_calls=5, drafted=20, accepted=9, generated=13,
                                 beta_sum=8.0, beta_count=12,
                                 accepted_per_position=np.int32([4, 3, 1, 1]))
  _check_batch_figures(decode_figures(summed))
  half = lambda a: a[:1]
  totals = Totals()
  totals.add(jax.tree.map(half, STATS), 3, 1.0)
  totals.add(jax.tree.map(lambda a: a[1:], STATS), 2, 1.0)
  f = decode_figures(totals)  # a Totals is the counters summed, under their names
  assert f.accepted_per_position is None
  assert float(f.tokens_per_call) == pytest.approx(2.6)


def test_zero_denominators_give_zero():
  f = decode_figures(DecodeStats.zeros(2, 3))
  for value in (f.alpha, f.acceptance_rate, f.tokens_per_call, f.accepted_per_call,
                f.drafted_per_call):
    assert float(value) == 0.0
  np.testing.assert_array_equal(f.accepted_per_position, np.zeros(3))
  target_alone = types.SimpleNamespace(target_calls=4, accepted=0, generated=4, beta_sum=0.0,
                                       beta_count=0)
  f = decode_figures(target_alone)
  assert (float(f.alpha), float(f.tokens_per_call), f.drafted_per_call) == (0.0, 1.0, None)


def test_per_example_figures_of_consecutive_rows():
  f = per_example_figures(STATS, 2)
  np.testing.assert_allclose(f.alpha, [4.5 / 7, 3.5 / 5], rtol=1e-6)
  np.testing.assert_allclose(f.tokens_per_call, [8 / 3, 2.5], rtol=1e-6)
  np.testing.assert_allclose(f.accepted_per_position, [[2 / 3, 1 / 3, 1 / 3, 1 / 3],
                                                       [1.0, 1.0, 0.0, 0.0]], rtol=1e-6)
  one = per_example_figures(STATS, 1)  # both rows one example's N = 2 decodes
  assert float(one.tokens_per_call[0]) == pytest.approx(2.6)


def test_decode_stats_properties_are_the_reduction():
  assert STATS.alpha == pytest.approx(8.0 / 12)
  assert STATS.acceptance_rate == pytest.approx(0.75)
  assert STATS.tokens_per_call == pytest.approx(2.6)


def test_cli_summary_counts_no_token_past_eos():
  totals = Totals()
  totals.add(STATS, iterations=3, seconds=2.0)
  s = totals.summary(compare=False)
  assert s['tokens_per_call'] == pytest.approx(2.6)  # 13 tokens / 5 calls
  assert s['tokens_per_call'] != pytest.approx((9 + 5) / 5)  # (accepted + calls) / calls
  assert (s['alpha'], s['acceptance_rate']) == (pytest.approx(8 / 12), pytest.approx(0.75))
  assert (s['target_calls'], s['batched_target_calls'], s['generated_tokens']) == (5, 3, 13)
  assert s['tokens_per_second'] == pytest.approx(6.5)


class _Dataset:
  """What seqio.Evaluator hands a predict function: (index, features) pairs."""

  def __init__(self, n):
    self.items = [(i, {'encoder_input_tokens': np.full(4, 5 + i, np.int32),
                       'decoder_input_tokens': np.zeros(6, np.int32)}) for i in range(n)]

  def as_numpy_iterator(self):
    return iter(self.items)


def test_evaluate_tokens_per_call_is_generated_over_calls():
  def decode(rows, length, start, real):
    del start, real
    return DecodeOutput(tokens=np.ones((len(rows), length), np.int32),
                        lengths=STATS.generated, stats=STATS, iterations=3)
  predict = Predictor(decode, batch_size=2)
  assert [i for i, _ in predict(_Dataset(2))] == [0, 1]
  s = predict.summary()
  assert s['tokens_per_call'] == pytest.approx(2.6)
  assert s['tokens_per_call'] != pytest.approx((9 + 5) / 5)  # the old (accepted + calls) / calls
  assert (s['tokens'], s['target_calls'], s['alpha']) == (13, 5, pytest.approx(8 / 12))


def test_t5x_aux_tokens_per_call_is_generated_over_calls():
  from specjax.core import api  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import t5_tiny  # pylint: disable=import-outside-toplevel
  from specjax.t5x import decoding  # pylint: disable=import-outside-toplevel
  target = T5(t5_tiny)
  params = target.init(jax.random.PRNGKey(3))
  inputs = np.random.default_rng(5).integers(2, 32, (3, 5)).astype(np.int32)
  # The target as its own draft accepts every draft, so rows end inside an accepted block
  # (at EOS or at L = 9 after 4 + 4 tokens): accepted + calls overcounts those rows.
  p = decoding.predict(target, params, target, params, inputs, max_decode_len=9, gamma=3,
                       num_decodes=2)
  s = jax.tree.map(np.asarray, api.speculative_decode(target, params, target, params, inputs,
                                                      gamma=3, max_decode_len=9).stats)
  np.testing.assert_allclose(p.aux['tokens_per_call'], s.generated / s.target_calls,
                             rtol=1e-6)
  old = (s.accepted + s.target_calls) / s.target_calls
  assert np.any(np.abs(np.asarray(p.aux['tokens_per_call']) - old) > 0.1)
  np.testing.assert_array_equal(p.aux['target_calls'], 2 * s.target_calls)
  np.testing.assert_allclose(p.aux['alpha'], 1.0, rtol=1e-6)


# The layout check: a module that divides a decode counter (or by calls) recomputes a
# figure that `decode_figures` defines; throughputs (a ratio with seconds) are not figures.
COUNTERS = {'target_calls', 'drafted', 'accepted', 'accepted_per_position', 'generated',
            'beta_sum', 'beta_count'}
REDUCTION = 'specjax/core/figures.py'


def _names(node):
  """Every name, attribute and string constant under `node`."""
  for n in ast.walk(node):
    if isinstance(n, ast.Name):
      yield n.id
    elif isinstance(n, ast.Attribute):
      yield n.attr
    elif isinstance(n, ast.Constant) and isinstance(n.value, str):
      yield n.value


def _divisions(tree):
  """(line, numerator nodes, denominator nodes) of every division in `tree`."""
  for n in ast.walk(tree):
    if isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Div, ast.FloorDiv)):
      yield n.lineno, [n.left], [n.right]
    elif isinstance(n, ast.AugAssign) and isinstance(n.op, (ast.Div, ast.FloorDiv)):
      yield n.lineno, [n.target], [n.value]
    elif isinstance(n, ast.Call) and len(n.args) == 2 and (
        getattr(n.func, 'attr', None) or getattr(n.func, 'id', None)) in (
            'divide', 'true_divide', 'floor_divide'):
      yield n.lineno, n.args[:1], n.args[1:]


def recomputed_figures(source: str) -> list:
  """Lines of `source` that take a ratio of decode counters outside the reduction."""
  lines = []
  for line, num, den in _divisions(ast.parse(source)):
    top = {x for node in num for x in _names(node)}
    bottom = {x for node in den for x in _names(node)}
    if any('seconds' in x for x in bottom):
      continue
    if COUNTERS & (top | bottom) or any('calls' in x for x in bottom):
      lines.append(line)
  return lines


OLD_DUPLICATES = [  # how the figures were derived before the reduction, one per module
    'alpha = self.beta_sum / max(self.beta_count, 1)',
    'tpc = (self.accepted + self.calls) / max(self.calls, 1)',
    'tpc = self.tokens / max(self.row_calls, 1)',
    'alpha = float(min(1.0, s.beta_sum.sum() / max(s.beta_count.sum(), 1)))',
    "x = {'drafted_per_call': float(s.drafted.sum() / max(num_calls, 1))}",
    'tpc = (_per_example(s.accepted, batch) + calls) / jnp.maximum(calls, 1)',
    'rate = float(jnp.sum(self.accepted) / jnp.maximum(jnp.sum(self.beta_count), 1))',
    "apc = np.divide(row['accepted'], row['target_calls'])",
    'per_position = s.accepted_per_position.sum(0) / n',
]


@pytest.mark.parametrize('source', OLD_DUPLICATES)
def test_the_layout_check_flags_a_recomputed_figure(source):
  assert recomputed_figures(source) == [1]


def test_the_layout_check_passes_throughputs_and_plain_sums():
  assert not recomputed_figures('tps = self.generated / max(self.seconds, 1e-9)\n'
                                'n = int(s.target_calls.sum()) + int(s.accepted.sum())\n'
                                'share = at / theory.expected_tokens_per_call(alpha, g)')


def test_no_module_but_the_reduction_derives_a_figure_from_the_counters():
  paths = sorted((REPO / 'specjax').rglob('*.py')) + sorted((REPO / 'scripts').rglob('*.py'))
  found = {str(p.relative_to(REPO)): recomputed_figures(p.read_text()) for p in paths
           if str(p.relative_to(REPO)) != REDUCTION}
  assert {p: lines for p, lines in found.items() if lines} == {}, (
      'call specjax.core.figures.decode_figures instead')
