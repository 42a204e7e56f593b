"""The TPU speed plan: its cost extraction and arithmetic end to end on the tiny pair (CPU
cost analysis), a decode step's weight reads (its jaxpr; compile-only TPU v4 where libtpu
is installed), the gather-free decoder bias, and the measured counterpart's arithmetic."""
import importlib.util
import json
import os
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.core import theory
from specjax.models import t5_layers as layers
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import measure, paper, predict, programs
from specjax.speed.predict import PairCosts, Prediction
from specjax.speed.programs import ITERATION_GAMMAS, VERIFY_TOKENS, cast_floats
from specjax.speed.roofline import V4_CHIP, Cost

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_decoder_position_bias_equals_the_bucket_lookup():
  rel = jnp.asarray(np.random.default_rng(0).normal(size=(3, 32)), jnp.float32)
  positions = jnp.array([0, 5, 130, 300], jnp.int32)  # past max_distance too
  for num_buckets, max_distance in ((32, 128), (8, 20)):
    got = layers.decoder_position_bias(rel[:, :num_buckets], positions, 9, 320, num_buckets,
                                       max_distance)
    query = np.asarray(positions)[:, None] + np.arange(9)[None]  # [B, K]
    buckets = layers.relative_position_bucket(np.arange(320)[None, None] - query[:, :, None],
                                              False, num_buckets, max_distance)
    want = np.transpose(np.asarray(rel[:, :num_buckets]).T[buckets], (0, 3, 1, 2))
    np.testing.assert_array_equal(np.asarray(got), want)


def _eqns(jaxpr):
  """Every equation of a jaxpr, those of its sub-jaxprs included."""
  for eqn in jaxpr.eqns:
    yield eqn
    for value in eqn.params.values():
      for sub in value if isinstance(value, (list, tuple)) else [value]:
        inner = getattr(sub, 'jaxpr', sub)
        if hasattr(inner, 'eqns'):
          yield from _eqns(inner)


@pytest.mark.parametrize('name', ['t5_small', 't5_1_0_small'])
@pytest.mark.parametrize('tokens', [1, 8])
def test_decode_step_reads_bfloat16_weights_as_stored(name, tokens):
  """No weight is converted to float32 in a bfloat16 decode step: every product with a
  weight takes it as stored and accumulates in float32 itself."""
  model = T5(T5_CONFIGS[name].replace(dtype='bfloat16'))
  params = cast_floats(jax.eval_shape(model.init, jax.random.PRNGKey(0)), 'bfloat16')
  ints = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)
  encoded = jax.eval_shape(model.encode, params, ints(1, 16))
  cache = jax.eval_shape(lambda: model.init_cache(1, 32))
  jaxpr = jax.make_jaxpr(model.decode)(params, encoded, cache, ints(1, tokens), ints(1)).jaxpr
  cfg = model.config
  smallest = cfg.emb_dim * cfg.num_heads * cfg.head_dim  # a query kernel, the smallest
  weight_sized = lambda v: v.aval.size >= smallest
  converts = [e for e in _eqns(jaxpr) if e.primitive.name == 'convert_element_type'
              and e.params['new_dtype'] == jnp.float32 and weight_sized(e.invars[0])]
  assert not converts, converts
  # The weight is either operand (the key and value products take it first, see
  # `project_kv`).
  products = [(e, w) for e in _eqns(jaxpr) if e.primitive.name == 'dot_general'
              for w in e.invars if weight_sized(w)]
  assert len(products) >= 8 * cfg.num_decoder_layers
  for e, w in products:
    assert w.aval.dtype == jnp.bfloat16
    assert e.params['preferred_element_type'] == jnp.float32


@pytest.mark.skipif(importlib.util.find_spec('libtpu') is None,
                    reason='compile-only TPU v4 needs libtpu (pip install libtpu)')
def test_compile_only_tpu_step_reads_what_it_must():
  script = ('import json\nfrom specjax.speed import cli, traffic\ncli.prepare_tpu()\n'
            'from specjax.models.t5_config import t5_small\n'
            'device = cli.Backend(cpu=False).mesh(1).devices.flat[0]\n'
            'print(json.dumps([traffic.measure_step(t5_small, tokens=k, batch=1, '
            'input_len=128, cache_len=137, device=device).ratio for k in (1, 8)]))\n')
  out = subprocess.run([sys.executable, '-c', script], check=True, capture_output=True,
                       text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
  one, eight = json.loads(out.stdout.strip().splitlines()[-1])
  # The rest above 1: caches in (8, 128) tiles (137 positions occupy 256, a K-token write
  # rewrites whole tiles), which t5_small's 80 MB does not dwarf as T5-XXL's 11 GB does.
  assert one <= 1.10 and eight <= 1.15


def _roofline(row) -> float:
  return max(row['bytes'] / V4_CHIP.bytes_per_s, row['flops'] / V4_CHIP.flops_per_s)


def _kill_after_first_row(cmd, cwd, env, partial):
  """Starts `cmd` and kills it (SIGKILL) once `partial` holds a row; False when it ended
  first."""
  proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)
  while proc.poll() is None and not partial.exists():
    time.sleep(0.05)
  alive = proc.poll() is None
  proc.kill()
  proc.wait(timeout=60)
  return alive


def test_quick_speed_plan_killed_leaves_the_old_report_then_resumes(tmp_path):
  """Without --output it writes under specjax_reports/; killed after a row, the old report
  and rows are byte for byte as they were; --resume finishes with what was measured."""
  reports = tmp_path / 'specjax_reports'
  reports.mkdir()
  output, rows = reports / 'tpu_speed.md', reports / 'tpu_speed.json'
  old = {output: b'# an earlier report\n',
         rows: json.dumps({'programs': [], 'run': {'tpu': False, 'quick': True}}).encode()}
  for path, data in old.items():
    path.write_bytes(data)
  cmd = [sys.executable, '-m', 'specjax.plan', '--speed', '--quick', '--cpu']
  env = dict(os.environ, PYTHONPATH=ROOT)
  partial = reports / 'tpu_speed.partial.json'
  if _kill_after_first_row(cmd, tmp_path, env, partial):
    assert {p: p.read_bytes() for p in old} == old
    assert json.loads(partial.read_text())['programs']
  subprocess.run(cmd + ['--resume'], check=True, capture_output=True, cwd=tmp_path, env=env)
  assert sorted(p.name for p in tmp_path.rglob('*')) == [
      'specjax_reports', 'tpu_speed.json', 'tpu_speed.md']  # nothing else, no partial
  text = output.read_text()
  data = json.loads(rows.read_text())
  assert data['run'] == {'tpu': False, 'quick': True}
  keys = [json.dumps([r[k] for k in ('model', 'program', 'tokens', 'batch', 'input_len',
                                     'max_decode_len', 'mesh', 'greedy')])
          for r in data['programs']]
  assert len(set(keys)) == len(keys)  # the resumed run measured only what was missing
  assert '## 4. The paper\'s Table 2' in text and '## 7. Batch' in text
  assert '## 8. Token trees' in text and data['summary']['trees']['settings']
  cells = data['summary']['table2']
  assert len(cells) == len(paper.TABLE2)
  rows = {}
  for r in data['programs']:
    rows[(r['model'], r['program'], r['tokens'], r['greedy'])] = r
  for cell in cells:
    greedy = cell['temperature'] == 0
    t = lambda model, program, tokens, mode=greedy: _roofline(rows[(model, program, tokens,
                                                                    mode)])
    pair = f'{cell["target"]}+{cell["draft"]}'
    first, step = t(cell['draft'], 'first', 2), t(cell['draft'], 'step', 1)

    def loop(gamma):  # the iteration less its parts (one scan step counted), in bytes/flops
      parts = [rows[(cell['draft'], 'first', 2, greedy)],
               rows[(cell['target'], 'verify', gamma + 1, True)]]
      parts += [rows[(cell['draft'], 'step', 1, greedy)]] if gamma >= 2 else []
      it = rows[(pair, 'iteration', gamma, greedy)]
      return [it[k] - sum(p[k] for p in parts) for k in ('bytes', 'flops')]

    (g0, g1), gamma = ITERATION_GAMMAS, cell['gamma']
    lo, hi = loop(g0), loop(g1)
    extra = [max(a + (b - a) * (gamma - g0) / (g1 - g0), 0.0) for a, b in zip(lo, hi)]
    t_loop = max(extra[0] / V4_CHIP.bytes_per_s, extra[1] / V4_CHIP.flops_per_s)
    t_spec = first + (gamma - 1) * step + t(cell['target'], 'verify', gamma + 1, True) + t_loop
    alone = t(cell['target'], 'alone', 0)
    e = theory.expected_tokens_per_call(cell['alpha'], gamma)
    assert cell['predicted'] == pytest.approx(e * alone / t_spec, rel=1e-9)
    c, v = step / alone, (t_spec - gamma * step) / alone
    assert cell['predicted'] == pytest.approx(theory.speedup(cell['alpha'], gamma, c, v),
                                              rel=1e-9)
    assert cell['c'] == pytest.approx(step / t(cell['target'], 'step', 1), rel=1e-9)


def test_measured_times_predict_with_every_draft_step_counted():
  """Measured iterations run all G - 1 scan steps: the loop's share subtracts them all."""
  seconds = {('verify', k): 1.0 + 0.01 * k for k in VERIFY_TOKENS}
  seconds.update({('step', 't'): 1.0, ('step', 'd'): 0.05, ('first', 'd'): 0.06,
                  ('alone', 't'): 1.02, ('encode', 't'): 3.0, ('encode', 'd'): 0.2})
  gammas = {g: 0.06 + (g - 1) * 0.05 + (1.0 + 0.01 * (g + 1)) + 0.002 * g
            for g in ITERATION_GAMMAS}  # draft block + verify + a loop share of 0.002 G
  rows = []
  make = lambda model, program, tokens, greedy, s: measure.TimedRow(
      model, program, tokens, 1, 8, 8, (1, 1), greedy, s, 'cpu')
  for greedy in (True, False):
    for (program, who), s in seconds.items():
      if program == 'verify':
        rows.append(make('t', 'verify', who, True, s))
      else:
        tokens = {'step': 1, 'first': 2}.get(program, 0)
        rows.append(make('t' if who == 't' else 'd', program, tokens, greedy, s))
    rows += [make('t+d', 'iteration', g, greedy, s) for g, s in gammas.items()]
  costs = PairCosts.from_rows({r.key: r for r in rows}, 't', 'd', 1, 8, 8, (1, 1), True,
                              scan_counted_once=False)
  p = Prediction(costs, V4_CHIP)
  for gamma in (1, 4, 7):
    assert p.iteration_seconds(gamma) == pytest.approx(
        0.06 + (gamma - 1) * 0.05 + 1.0 + 0.01 * (gamma + 1) + 0.002 * gamma)
  assert p.c == pytest.approx(0.05) and p.v(9) == pytest.approx(1.09 / 1.01)
  summary = measure.summarize(rows, 't', 'd', 1, 8, 8, True)
  assert summary['speedup']['0.75'][7] == pytest.approx(
      theory.expected_tokens_per_call(0.75, 7) * 1.02 / p.iteration_seconds(7))


def test_tree_verify_compiles_and_reads_more_than_a_shorter_chain():
  """The target's ONE call of a tree of N = 8 nodes (9 tokens, the tree mask) compiles on
  the CPU for the tiny T5 and costs more than its chain verify of 8 tokens."""
  kw = dict(batch=1, input_len=8, max_decode_len=8,
            mesh=programs.one_device_mesh(jax.devices('cpu')[0]))
  target, draft = T5_CONFIGS['t5_tiny'], T5_CONFIGS['t5_tiny_draft']
  tree, = programs.measure_trees(target, draft, shapes=((2, 1, 1, 1),),
                                 only=lambda m, p, k: p == 'tree_verify', **kw)
  assert (tree.model, tree.program, tree.tokens, tree.greedy) == (
      't5_tiny', 'tree_verify', 8, True)
  assert tree.bytes > 0 and tree.flops > 0
  chain = {r.tokens: r for r in programs.measure_pair(
      target, draft, greedy=True, only=lambda m, p, k: p == 'verify' and k in (1, 8), **kw)}
  assert tree.bytes > chain[8].bytes > chain[1].bytes
  assert tree.flops > chain[8].flops


def test_tree_speedup_is_tokens_over_draft_and_verify():
  """S = E / (d + v): the tree's draft calls over the target step, its verify over the
  one-token verify; the chain's best by the same formula over gamma 1..8."""
  cost = lambda seconds: Cost(seconds * V4_CHIP.bytes_per_s, 0.0)
  chain = Prediction(PairCosts(
      verify={k: cost(1.0 + 0.01 * k) for k in VERIFY_TOKENS}, target_step=cost(1.01),
      draft_step=cost(0.02), draft_first=cost(0.025), alone=cost(1.01),
      iterations={g: cost(1.0 + 0.05 * g) for g in ITERATION_GAMMAS},
      target_encode=cost(3.0), draft_encode=cost(0.1)), V4_CHIP)
  tree = predict.TreePrediction(nodes=16, verify=cost(1.2), draft=cost(0.1),
                                iteration=cost(1.4), chain=chain)
  assert tree.v == pytest.approx(1.2 / 1.01) and tree.d == pytest.approx(0.1 / 1.01)
  assert tree.speedup(3.5) == pytest.approx(3.5 / (0.1 / 1.01 + 1.2 / 1.01))
  assert tree.speedup_with_loop(3.5) == pytest.approx(3.5 * 1.01 / 1.4)
  assert tree.loop_share == pytest.approx(0.1 / 1.4)
  gamma, best = predict.chain_best(chain, 0.75)
  assert best == pytest.approx(max(
      theory.expected_tokens_per_call(0.75, g) / ((0.025 + (g - 1) * 0.02) / 1.01 +
                                                  (1.0 + 0.01 * (g + 1)) / 1.01)
      for g in range(1, 9)))
  assert best == pytest.approx(predict.chain_speedup(
      chain, gamma, theory.expected_tokens_per_call(0.75, gamma)))


def test_measured_programs_run_on_random_weights_and_fresh_donated_state():
  """`python -m specjax.speed` times programs on N(0, 0.02^2) floats (zeros let a GPU's
  matrix units run faster than real weights do), integers zero; the weights are filled once,
  the donated state before every call; --init zeros is the old behaviour."""
  sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  spec = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)
  tree = {'w': spec((64, 32), jnp.bfloat16), 'pos': spec((4,), jnp.int32)}
  filled = measure.fill(tree, 'random', jax.random.PRNGKey(1))
  w = np.asarray(filled['w'], np.float32)
  assert filled['w'].dtype == jnp.bfloat16 and filled['pos'].dtype == jnp.int32
  assert np.count_nonzero(w) == w.size and abs(w.std() - measure.SCALE) < 0.003
  np.testing.assert_array_equal(np.asarray(filled['pos']), 0)
  assert not np.asarray(measure.fill(tree, 'zeros', jax.random.PRNGKey(1))['w']).any()
  with pytest.raises(ValueError, match='random, zeros'):
    measure.fill(tree, 'ones', jax.random.PRNGKey(1))
  seen = []

  def fn(w, state):
    jax.debug.callback(lambda a, b: seen.append((np.asarray(a), np.asarray(b))), w, state)
    return state + 1
  state = spec((8,), jnp.float32)
  assert measure.time_program(fn, (tree['w'], state), (1,), rounds=3) > 0
  weights, states = zip(*seen)
  assert len(seen) == 4 and all(np.array_equal(x, weights[0]) for x in weights)
  assert len({s.tobytes() for s in states}) == 4 and all(s.any() for s in states)
  assert measure.parse_args([]).init == 'random'
