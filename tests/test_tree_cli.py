"""python -m specjax.decode with token trees (--tree, --tree-nodes/--tree-depth/--tree-top) on
the bundled demo pair: greedy output files equal the target alone's, the summary names the
tree and its per-call figures, a sampled run is reproducible, a resume with another tree is
refused, and each bad combination is one line before any model loads."""
import contextlib
import io
import json

import pytest

from specjax import decode
from specjax.job import decode_job

import cli_for_tests

RUN = ['--max-examples', '8', '--max-decode-len', '12', '--quiet', '--json']
STATIC = ['--tree', '2,2,1']
DYNAMIC = ['--tree-nodes', '8', '--tree-depth', '4', '--tree-top', '2']
SAMPLED = ['--temperature', '1', '--seed', '3', '--tree', '2,1', '--no-compare']


def _records(path):
  return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """{name: (summary, output file)} of the target alone (gamma 0, as --gamma auto picks it
  when speculation measures slower), the static tree and the dynamic tree, greedy."""
  tmp = tmp_path_factory.mktemp('tree_cli')
  costs = dict(alpha=0.5, c=0.1, v={2: 1.0}, predicted_best=2, predicted_speedup=1.1,
               measured_speedup=0.9)
  out = {}
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(decode_job.calibrate, 'choose_gamma',
                  lambda *a, **k: (0, 'measured slower', costs))
    for name, flags in (('alone', []), ('static', STATIC), ('dynamic', DYNAMIC)):
      path = tmp / f'{name}.jsonl'
      code, summary, err = cli_for_tests.main_json(RUN + flags + ['--output', str(path)])
      assert code == 0, err
      out[name] = (summary, path)
  assert out['alone'][0]['gamma'] == 0
  return out


@pytest.mark.parametrize('name', ['static', 'dynamic'])
def test_greedy_tree_output_file_is_the_target_alones(runs, name):
  alone = _records(runs['alone'][1])
  records = _records(runs[name][1])
  assert len(records) == len(alone) == 8
  assert [r['prediction'] for r in records] == [r['prediction'] for r in alone]
  assert [r['num_tokens'] for r in records] == [r['num_tokens'] for r in alone]
  assert runs[name][0]['identical_to_target'] is True
  assert sum(r['accepted'] for r in records) > 0  # paths below the root were accepted


@pytest.mark.parametrize('name, tree, nodes', [
    ('static', dict(kind='static', branching=[2, 2, 1], nodes=10, depth=3), 10),
    ('dynamic', dict(kind='dynamic', nodes=8, depth=4, top=2), 8),
])
def test_summary_carries_the_tree_and_its_per_call_figures(runs, name, tree, nodes):
  s = runs[name][0]
  assert s['tree'] == tree and s['gamma'] == tree['depth']
  assert s['nodes_per_call'] == pytest.approx(nodes)  # every call verifies the N nodes
  assert s['drafted_tokens'] == nodes * s['target_calls']
  depths = s['accepted_depths']  # calls by depth of the accepted path, 0 .. D
  assert len(depths) == tree['depth'] + 1 and sum(depths) == pytest.approx(1.0)
  mean_depth = sum(d * share for d, share in enumerate(depths))
  assert mean_depth == pytest.approx(s['accepted_tokens'] / s['target_calls'])
  assert 'not calibrated' in s['gamma_reason'] and s['gamma_calibration'] is None
  text = io.StringIO()  # the same run again (compiled already), as text
  with contextlib.redirect_stdout(text):
    assert decode.main(RUN[:-1] + (STATIC if name == 'static' else DYNAMIC)) == 0
  lines = text.getvalue().splitlines()
  name_of_tree = ('tree 2,2,1 (10 nodes, depth 3)' if name == 'static'
                  else 'dynamic tree (8 nodes, depth 4, top 2)')
  assert name_of_tree in lines[1] and 'gamma 3' not in lines[1]
  assert lines[2].startswith('  gamma: not calibrated') and 'tree verification' in lines[3]
  assert f'{nodes:.1f} nodes verified per target call; depth of the accepted path: 0 in ' in (
      text.getvalue())


def test_chain_summary_has_no_tree(runs):
  assert 'tree' not in runs['alone'][0] and 'nodes_per_call' not in runs['alone'][0]


def test_sampled_tree_run_twice_writes_the_same_file(tmp_path):
  files = []
  for i in range(2):
    path = tmp_path / f'sampled{i}.jsonl'
    code, summary, err = cli_for_tests.main_json(RUN + SAMPLED + ['--output', str(path)])
    assert code == 0, err
    assert summary['gamma'] == 2 and summary['tree']['branching'] == [2, 1]
    files.append(path.read_text())
  assert files[0] == files[1] and len(files[0].splitlines()) == 8


def test_a_resume_with_another_tree_is_refused(tmp_path, runs):
  """A sampled output depends on the tree: its file refuses another tree or a chain. A
  greedy output does not (it is the target's), as with gamma: its file resumes."""
  path = tmp_path / 'sampled.jsonl'
  assert cli_for_tests.main_json(RUN + SAMPLED + ['--output', str(path)])[0] == 0
  before = path.read_text()
  for other in (['--tree', '2,2'], ['--tree-nodes', '3', '--tree-depth', '2', '--tree-top',
                                    '2'], ['--gamma', '2']):
    flags = [f for f in SAMPLED if f not in ('--tree', '2,1')] + other
    code, _, err = cli_for_tests.main_json(RUN + flags + ['--output', str(path)])
    assert code == 2, err
    assert err.startswith('error: ') and 'another tree' in err and err.count('\n') == 1, err
    assert path.read_text() == before
  code, summary, err = cli_for_tests.main_json(RUN + DYNAMIC + ['--output', str(runs['static'][1])])
  assert code == 0 and summary['resumed'] == 8 and summary['decoded'] == 0, err


BEFORE_LOAD = ['--target', 'no_such_model', '--quiet']


@pytest.mark.parametrize('flags, message', [
    (['--tree', '2,1', '--tree-nodes', '4', '--tree-depth', '2'], 'exclude each other'),
    (['--tree', '2,1', '--tree-depth', '2'], 'exclude each other'),
    (['--tree-nodes', '4'], '--tree-nodes needs --tree-depth'),
    (['--tree-depth', '2'], '--tree-depth needs --tree-nodes'),
    (['--tree', '2,x'], '--tree takes the children per depth as integers >= 1'),
    (['--tree', '2,0'], '--tree takes the children per depth as integers >= 1'),
    (['--tree', ''], '--tree takes the children per depth as integers >= 1'),
    (['--tree', 'dynamic:16:4:4'], 'is --tree-nodes N --tree-depth D --tree-top K'),
    (['--tree-nodes', '0', '--tree-depth', '2'], '--tree-nodes must be an integer >= 1'),
    (['--tree-nodes', '40', '--tree-depth', '2', '--tree-top', '2'], 'lower --tree-nodes'),
    (['--tree-top', '2'], '--tree-top shapes a dynamic tree'),
    (['--tree', '2,1', '--tree-top', '2'], '--tree-top shapes a dynamic tree'),
    (['--tree', '2,1', '--verification', 'block'], 'drop --verification block, or drop'),
    (['--tree', '2,1', '--draft-threshold', '0.5'], 'drop --draft-threshold, or drop'),
    (['--tree-nodes', '4', '--tree-depth', '2', '--verification', 'block',
      '--draft-threshold', '0.5'], 'drop --verification block and --draft-threshold'),
    (['--tree-nodes', '4', '--tree-depth', '2', '--draft', 'copy'],
     '--draft copy grows static trees only'),
    (['--tree', '2,1', '--draft', 'copy+demo_draft'],
     'trees need a draft model, copy or bigram'),
    (['--tree', '2,1', '--gamma', '3'], '--gamma 3 disagrees with the tree'),
    (['--tree', '4,2,1', '--gamma', '0'], "drop --gamma (a tree's gamma is its depth, 3)"),
    (['--tree', '1,1,1', '--max-decode-len', '2'], 'more than --max-decode-len 2'),
], ids=['static+dynamic', 'static+depth', 'nodes alone', 'depth alone', 'bad string',
        'zero children', 'empty', 'dynamic as --tree', 'zero nodes', 'pool too small',
        'top alone', 'top+static',
        'block', 'threshold', 'block+threshold', 'copy', 'copy+model', 'gamma 3',
        'gamma 0', 'deeper than L'])
def test_bad_tree_flags_are_one_line_before_any_load(capsys, flags, message):
  assert decode.main(BEFORE_LOAD + flags) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and err.count('\n') == 1 and 'Traceback' not in err, err
  assert message in err and 'no_such_model' not in err, err


@pytest.mark.parametrize('flags', [
    ['--tree', '2,1', '--draft', 'bigram'], ['--tree', '3,1', '--draft', 'copy'],
    ['--tree', '2,1', '--gamma', '2'],
    ['--tree-nodes', '4', '--tree-depth', '2', '--tree-top', '2', '--temperature', '1',
     '--lenience', '0.5']], ids=['bigram', 'copy', 'gamma = depth', 'lenience'])
def test_good_tree_flags_reach_the_load(capsys, flags):
  assert decode.main(BEFORE_LOAD + flags) == 2
  assert "unknown model 'no_such_model'" in capsys.readouterr().err
