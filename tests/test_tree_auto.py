"""`--tree auto`: `--gamma auto` picks the best chain, a token tree or the target alone.

On the bundled demo pair through the command line: the choice is the argmax of the
predicted speedups it reports (recomputed here from its measured figures), a rerun reuses
the cached choice and `--recalibrate` measures again, a run that decodes with a chosen tree
writes the target alone's greedy outputs; on tiny random models through the API, a draft
that never agrees with the target leaves the target alone; bad combinations are one line
before any model loads.
"""
import dataclasses

import numpy as np
import pytest

from specjax import decode
from specjax.core.tree import DynamicTree, TreeShape
from specjax.job import calibrate, gamma_choice, tree_auto
from specjax.job.config import DecodeConfig

import cli_for_tests
import models_for_tests as mft

TREES = '2,1;dynamic:4:2:2'
RUN = ['--max-examples', '8', '--batch-size', '4', '--max-decode-len', '12', '--quiet',
       '--json', '--tree', 'auto', '--auto-trees', TREES, '--max-gamma', '2']


def _recomputed(cal):
  """{candidate name: tokens per call / (draft cost + verify cost)}, each part from the
  calibration's measured figures: c times the draft calls' u(K), and v(N + 1)."""
  out = {}
  for row in cal['candidates']:
    draft = cal['c'] * sum(cal['draft_call_cost'][str(k)] for k in row['draft_calls'])
    table = cal['v'] if row['kind'] == 'chain' else cal['tree_v']
    verify = table[str(row['nodes'] + 1)]
    assert row['draft_cost'] == pytest.approx(draft)
    assert row['verify_cost'] == pytest.approx(verify)
    out[row['name']] = row['tokens_per_call'] / (draft + verify)
  return out


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """{name: (summary, output file)}: the first run (calibrates), its rerun (the cache),
  runs from a cache entry edited to each tree, and a --recalibrate run."""
  trees = {'static': TreeShape((2, 1)), 'dynamic': DynamicTree(4, 2, 2)}
  return cli_for_tests.calibrated_runs(
      tmp_path_factory.mktemp('tree_auto'), RUN,
      {name: dict(gamma=tree.depth_count, tree=tree_auto.to_json(tree))
       for name, tree in trees.items()}, after=[('recalibrated', ['--recalibrate'])])


def test_the_choice_is_the_argmax_of_the_predicted_speedups(runs):
  s = runs['first'][0]
  cal = s['gamma_calibration']
  names = [r['name'] for r in cal['candidates']]
  assert names == ['chain gamma %d' % cal['predicted_best'], 'tree 2,1', 'tree dynamic:4:2:2']
  predicted = _recomputed(cal)
  best = max(names, key=lambda n: predicted[n])  # the first among equals, as listed
  assert cal['choice'] == best
  assert cal['predicted_speedup'] == pytest.approx(predicted[best])
  assert all(r['tokens_per_call'] >= 1 for r in cal['candidates'])
  assert cal['draft_call_cost']['1'] == 1.0 and set(cal['tree_v']) == {'5'}  # N + 1 = 5
  row = cal['candidates'][names.index(best)]
  if cal['measured_speedup'] >= 1:
    assert cal['chosen'] == best and s['gamma'] == row['gamma']
    assert s.get('tree') == row['tree']
  else:
    assert cal['chosen'] == 'target alone' and s['gamma'] == 0 and 'tree' not in s
  reason = s['gamma_reason']
  assert reason.startswith('calibrated on 1 device: alpha ')
  assert (f'{best} maximises the predicted speedup ({predicted[best]:.2f}x) over these 3 '
          f'candidates, and measures {cal["measured_speedup"]:.2f}x on ') in reason
  for name in names:
    assert f'{name} ' in reason and f'= {predicted[name]:.2f}x' in reason
  assert '; kept in ' in reason and reason.endswith(' for reruns of this setting')
  assert s['identical_to_target'] is True


def test_a_rerun_reuses_the_cached_choice(runs):
  first, rerun = runs['first'][0], runs['rerun'][0]
  assert rerun['gamma'] == first['gamma'] and rerun.get('tree') == first.get('tree')
  assert rerun['gamma_calibration'] == first['gamma_calibration']
  assert ', as calibrated for this setting on ' in rerun['gamma_reason']
  assert '--recalibrate measures again' in rerun['gamma_reason']
  again = runs['recalibrated'][0]
  assert again['gamma_reason'].startswith('calibrated on 1 device')


@pytest.mark.parametrize('name, tree', [
    ('static', dict(kind='static', branching=[2, 1], nodes=4, depth=2)),
    ('dynamic', dict(kind='dynamic', nodes=4, depth=2, top=2))])
def test_a_chosen_tree_decodes_the_target_alones_greedy_output(runs, name, tree):
  s, path = runs[name]
  assert s['tree'] == tree and s['gamma'] == 2 and s['nodes_per_call'] == pytest.approx(4)
  assert s['identical_to_target'] is True
  assert s['gamma_reason'].startswith(f'the {"dynamic tree" if name == "dynamic" else "tree"} '
                                      f'{"dynamic:4:2:2" if name == "dynamic" else "2,1"} '
                                      '(gamma 2, its depth), as calibrated')
  assert cli_for_tests.predictions(path) == cli_for_tests.predictions(runs['first'][1])


@dataclasses.dataclass(frozen=True)
class Contrary:
  """A draft that proposes what the target finds least likely: the target with its logits
  negated (no top-k child of its is ever the target's argmax)."""

  base: object

  def __getattr__(self, name):
    if name.startswith('__'):
      raise AttributeError(name)
    return getattr(self.base, name)

  def decode(self, params, encoded, cache, tokens, positions, tree=None,
             return_hidden=False):
    del return_hidden
    logits, cache = self.base.decode(params, encoded, cache, tokens, positions, tree=tree)
    return -logits, cache


def test_a_draft_that_never_agrees_leaves_the_target_alone():
  target, tp = mft.tiny_transformer(seed=1)
  draft = Contrary(target)
  rng = np.random.default_rng(0)
  inputs = rng.integers(2, mft.VOCAB, size=(4, 6)).astype(np.int32)
  from specjax.core.sampling import SamplingConfig
  # The last word is a timing of the pick against the target alone: six interleaved rounds,
  # each keeping its fastest, so that a busy spell of the other test worker cannot make
  # the pick (twice the target's calls per token) time faster; with two, it once did.
  gamma, tree, reason, cal = calibrate.choose_tree(
      target, tp, draft, tp, inputs, SamplingConfig(), 8,
      [TreeShape((2, 1)), DynamicTree(4, 2, 2)], max_gamma=2, probe_gamma=2, passes=6)
  assert (gamma, tree) == (0, None) and cal['chosen'] == 'target alone'
  assert reason.endswith('slower than the target alone, so gamma 0: the target alone decodes')
  assert [r['tokens_per_call'] for r in cal['candidates']] == [1.0, 1.0, 1.0]
  predicted = _recomputed(cal)
  assert cal['choice'] == max(predicted, key=predicted.get) and cal['measured_speedup'] < 1


def test_candidates_fit_the_depth_and_the_draft():
  trees = tree_auto.parse(None)
  assert [tree_auto.label(t) for t in trees] == tree_auto.DEFAULT.split(';')
  assert [tree_auto.label(t) for t in tree_auto.fit(trees, 3)] == [
      '2,1,1', '2,2,1', '4,2,1', 'dynamic:8:3:2', 'dynamic:16:3:4', 'dynamic:32:3:4']
  assert [tree_auto.label(t) for t in tree_auto.fit(trees, 1)] == ['2', '4']
  assert tree_auto.draft_calls(TreeShape((4, 2, 1))) == (1, 4, 8)
  assert tree_auto.draft_calls(DynamicTree(16, 8, 4)) == (1,) + (4,) * 7
  assert tree_auto.draft_calls(None, 3) == (1, 1, 1)
  copy = DecodeConfig(draft='copy', tree='auto')
  assert all(isinstance(t, TreeShape) for t in copy.auto_tree_candidates)
  rest = DecodeConfig(draft='rest', tree='auto', max_decode_len=4)
  assert [tree_auto.label(t) for t in rest.auto_tree_candidates] == [
      'dynamic:8:4:2', 'dynamic:16:4:4', 'dynamic:32:4:4']
  for tree in trees + [None]:
    resolved = DecodeConfig(tree='auto').with_tree(tree_auto.to_json(tree))
    assert resolved.tree_json() == tree_auto.to_json(tree)
  assert DecodeConfig().tree_auto_setting() is None
  assert DecodeConfig(tree='auto').tree_auto_setting()[0] == 8


BEFORE_LOAD = ['--target', 'no_such_model', '--quiet']


def test_the_calibration_says_what_it_measures_before_it_does(monkeypatch, capsys):
  """A calibration runs for seconds with nothing else on screen: its line comes first, on
  stderr, and not at all without the progress bar (--quiet)."""
  class Measured(Exception):
    pass

  def measure(*args):
    raise Measured
  monkeypatch.setattr(calibrate, '_calibration', measure)
  said = []
  for choose, extra in ((calibrate.choose_gamma, ()), (calibrate.choose_tree, ([1, 2],))):
    with pytest.raises(Measured):
      choose(None, None, None, None, np.zeros((4, 3)), None, 8, *extra, max_gamma=3,
             probe=np.zeros((16, 3)), say=said.append)
  assert said == ['--gamma auto: measuring gammas 1..3 on 16 inputs, then timing the best '
                  'against the target alone',
                  '--tree auto: measuring the chain (gammas 1..3) and 2 trees on 16 inputs, '
                  'then timing the best against the target alone']
  assert DecodeConfig(progress=False).say is None
  DecodeConfig().say('a line')
  assert capsys.readouterr().err == 'a line\n'


@pytest.mark.parametrize('flags, tree', [
    (['--draft', 'rest'], 'auto'), (['--draft', 'suffix'], 'auto'),
    (['--draft', 'rest+suffix'], 'auto'), (['--draft', 'rest:/a/b'], 'auto'),
    (['--draft', 'rest', '--gamma', '3'], None),  # a chain, as asked
    (['--draft', 'rest', '--tree-nodes', '8', '--tree-depth', '4'], None),
    (['--draft', 'rest', '--verification', 'block'], None),
    (['--draft', 'rest', '--draft-threshold', '0.5'], None),
    (['--draft', 'bigram'], None), (['--draft', 'copy'], None), (['--draft', 'auto'], None)])
def test_a_retrieval_draft_with_no_tree_flag_weighs_its_tries(flags, tree):
  """rest and suffix propose the trie of what they retrieve: with --gamma auto and no tree
  flag the command line weighs it (--tree auto); any flag that settles the shape (or a rule
  a tree cannot use) keeps what it asks."""
  job = decode.parse_config(flags)
  assert job.tree == tree
  if tree is None and '--tree-nodes' in flags:
    assert (job.tree_nodes, job.tree_depth) == (8, 4)


@pytest.mark.parametrize('flags, message', [
    (['--tree', 'auto', '--gamma', '3'], 'drop --gamma 3'),
    (['--tree', 'auto', '--tree-nodes', '4', '--tree-depth', '2'], 'exclude each other'),
    (['--auto-trees', '2,1'], '--auto-trees lists the candidates of --tree auto'),
    (['--tree', 'auto', '--auto-trees', '2,x'], "--auto-trees: bad tree '2,x'"),
    (['--tree', 'auto', '--auto-trees', '2,1;'], '--auto-trees: an empty tree'),
    (['--tree', 'auto', '--auto-trees', 'dynamic:40:2:2'], '--auto-trees: dynamic:40:2:2: '),
    (['--tree', 'auto', '--tree-top', '2'], 'drop --tree-top'),
    (['--tree', 'auto', '--verification', 'block'],
     'drop --verification block, or drop --tree auto'),
    (['--tree', 'auto', '--draft-threshold', '0.5'], 'drop --draft-threshold, or drop --tree'),
    (['--tree', 'auto', '--draft', 'copy+demo_draft'], 'proposes chains only'),
    (['--tree', 'auto', '--draft', 'cascade:demo_draft/bigram'], 'proposes chains only'),
    (['--tree', 'auto', '--draft', 'copy', '--auto-trees', '2,1;dynamic:4:2:2'],
     'grows static trees only: drop the dynamic dynamic:4:2:2'),
    (['--tree', 'auto', '--draft', 'suffix', '--auto-trees', '2,1;dynamic:4:2:2'],
     'drop the static 2,1 from --auto-trees'),
    (['--tree', 'auto', '--draft', 'lookahead'], 'drop --tree'),
], ids=['gamma', 'nodes', 'trees alone', 'bad tree', 'empty item', 'pool', 'top', 'block',
        'threshold', 'hybrid', 'cascade', 'copy dynamic', 'suffix static', 'lookahead'])
def test_bad_tree_auto_flags_are_one_line_before_any_load(capsys, flags, message):
  assert decode.main(BEFORE_LOAD + flags) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and err.count('\n') == 1 and 'Traceback' not in err, err
  assert message in err and 'no_such_model' not in err, err


@pytest.mark.parametrize('flags', [
    ['--tree', 'auto'], ['--tree', 'auto', '--draft', 'copy'],
    ['--tree', 'auto', '--auto-trees', 'dynamic:8:4', '--temperature', '1']],
    ids=['default', 'copy', 'sampled'])
def test_good_tree_auto_flags_reach_the_load(capsys, flags):
  assert decode.main(BEFORE_LOAD + flags) == 2
  assert "unknown model 'no_such_model'" in capsys.readouterr().err


def test_a_resumed_sampled_run_keeps_the_tree_it_was_written_with():
  tree = dict(kind='dynamic', nodes=4, depth=2, top=2)
  stored = {'target': 't', 'seed and gamma': [5, 2], 'tree': tree}
  mine = {'target': 't', 'seed and gamma': [5, 'auto']}  # --tree auto before its choice
  assert gamma_choice.resumed_choice(stored, mine) == (2, tree)
  assert gamma_choice.resumed_choice({'target': 't', 'seed and gamma': [5, 3]}, mine) == (3, None)
  assert gamma_choice.resumed_choice(stored, dict(mine, target='u')) is None
  assert gamma_choice.resumed_choice(stored, {'target': 't', 'seed and gamma': [6, 'auto']}
                                     ) is None
  assert gamma_choice.resumed_choice(None, mine) is None
