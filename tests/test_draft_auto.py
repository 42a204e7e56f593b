"""`--draft auto`: no draft model; `--gamma auto` picks among the proposers that need none.

On the bundled demo pair through the command line: every candidate is calibrated and
reported, the choice is the candidate measured fastest or the target alone (recomputed
here from the reported figures), a rerun reuses the cached choice, a run from a cache
entry naming a proposer decodes with it and writes the target alone's greedy output, and
a resumed sampled run keeps the proposer its file was written with. The choice rule on
given measurements; bad combinations are one line before any model loads.
"""
import pathlib

import pytest

from specjax import decode
from specjax.job import draft_auto, gamma_choice, task_eval
from specjax.job.config import DecodeConfig

import cli_for_tests

CANDIDATES = 'copy;lookahead:3,2,2'
RUN = ['--max-examples', '8', '--batch-size', '4', '--max-decode-len', '12', '--quiet',
       '--json', '--draft', 'auto', '--auto-drafts', CANDIDATES, '--max-gamma', '2']
BEFORE_LOAD = ['--target', 'no_such_model', '--quiet']


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
  """{name: (summary, output file)}: the first run (calibrates), its rerun (the cache), and
  runs from the cache entry edited to lookahead (its own tree) and to copy's chain."""
  return cli_for_tests.calibrated_runs(
      tmp_path_factory.mktemp('draft_auto'), RUN,
      {name: dict(draft=name, gamma=gamma, tree=None)
       for name, gamma in (('lookahead:3,2,2', 3), ('copy', 2))})


def test_every_candidate_is_measured_and_the_fastest_is_chosen(runs):
  summary, _ = runs['first']
  cal = summary['gamma_calibration']
  rows = cal['candidates']
  assert [r['draft'] for r in rows] == CANDIDATES.split(';')
  for row in rows:
    assert row['measured_speedup'] > 0 and row['gamma'] >= 1
    assert (row['tree'] is None) == (row['draft'] == 'copy')  # lookahead: its own tree
  copy, lookahead = rows
  assert 0 < copy['alpha'] <= 1 and lookahead['tokens_per_call'] >= 1
  best = max(rows, key=lambda r: r['measured_speedup'])
  if best['measured_speedup'] >= 1:
    assert cal['chosen'] == best['draft'] == summary['draft']
    assert summary['gamma'] == best['gamma']
  else:  # the target alone; the draft named is the chain's
    assert cal['chosen'] == 'target alone' and summary['gamma'] == 0
    assert summary['draft'] == 'copy'
  for row in rows:
    assert f'{row["draft"]} (' in summary['gamma_reason']
    assert f'{row["measured_speedup"]:.2f}x' in summary['gamma_reason']
  assert summary['identical_to_target'] is True


def test_a_rerun_reuses_the_cached_choice(runs):
  first, rerun = runs['first'][0], runs['rerun'][0]
  assert 'as calibrated for this setting' in rerun['gamma_reason']
  assert (rerun['draft'], rerun['gamma']) == (first['draft'], first['gamma'])
  assert cli_for_tests.predictions(runs['rerun'][1]) == cli_for_tests.predictions(runs['first'][1])


@pytest.mark.parametrize('name, gamma', [('lookahead:3,2,2', 3), ('copy', 2)])
def test_a_chosen_proposer_decodes_the_target_alones_greedy_output(runs, name, gamma):
  summary, path = runs[name]
  assert (summary['draft'], summary['gamma']) == (name, gamma)
  assert summary['target_calls'] > 0 and summary['identical_to_target'] is True
  assert ('tree' in summary) == name.startswith('lookahead')
  assert cli_for_tests.predictions(path) == cli_for_tests.predictions(runs['first'][1])


def _rows(*measured):
  names = ['copy', 'lookahead', 'suffix'][:len(measured)]
  return {n: dict(draft=n, gamma=3 if n == 'lookahead' else 2,
                  tree={'kind': 'dynamic', 'nodes': 4, 'depth': 3, 'top': 2}
                  if n == 'lookahead' else None, alpha=None, tokens_per_call=None,
                  predicted_speedup=None, measured_speedup=m) for n, m in zip(names, measured)}


@pytest.mark.parametrize('measured, chosen, gamma', [
    ((0.9, 1.2, 1.1), 'lookahead', 3),
    ((1.3, 1.2, 1.1), 'copy', 2),
    ((0.8, 0.95, 0.9), 'suffix', 0),  # none faster: the best chain is named, gamma 0
], ids=['lookahead', 'copy', 'target alone'])
def test_the_fastest_measured_is_chosen(monkeypatch, measured, chosen, gamma):
  rows = _rows(*measured)
  monkeypatch.setattr(draft_auto, 'candidates', lambda job: list(rows))
  monkeypatch.setattr(draft_auto, 'resolve', lambda job, spec, target, vocab: (None, None))
  monkeypatch.setattr(draft_auto, '_calibrated', lambda job, spec, *a: rows[spec])
  job = DecodeConfig(draft='auto')
  spec, got, tree, reason, cal = draft_auto.choose(job, None, None, None, [[1]] * 8, None,
                                                   None, lambda d: 4, lambda j, d: None, {})
  assert (spec, got) == (chosen, gamma)
  assert (tree is not None) == (gamma and chosen == 'lookahead')
  assert cal['chosen'] == (chosen if gamma else 'target alone')
  assert ('none is faster than the target alone' in reason) == (gamma == 0)


def test_the_default_candidates_are_those_the_target_has(tmp_path):
  assert draft_auto.candidates(DecodeConfig(target='demo_target', draft='auto')) == list(
      draft_auto.DEFAULT)
  assert draft_auto.candidates(DecodeConfig(target=str(tmp_path), draft='auto')) == [
      'copy', 'suffix', 'lookahead']  # no bundled bigram table or datastore
  assert 'bigram' in draft_auto.candidates(DecodeConfig(
      target=str(tmp_path), draft='auto', draft_checkpoint='table.npz'))
  assert draft_auto.candidates(DecodeConfig(draft='auto', auto_drafts='suffix; copy;suffix')
                               ) == ['suffix', 'copy']
  assert draft_auto.candidates(DecodeConfig(draft='auto', auto_drafts='bigram:t.npz;copy')
                               ) == ['bigram:t.npz', 'copy']  # a table named by its path


@pytest.mark.parametrize('flags, message', [
    (['--draft', 'auto', '--gamma', '3'], 'drop --gamma 3'),
    (['--draft', 'auto', '--tree', '2,1'], 'drop --tree'),
    (['--draft', 'auto', '--tree-nodes', '4', '--tree-depth', '2'],
     'drop --tree-nodes and --tree-depth'),
    (['--draft', 'auto', '--auto-drafts', 'copy;demo_draft'],
     'demo_draft needs a draft model or is no proposer'),
    (['--draft', 'auto', '--auto-drafts', 'copy;'], 'an empty proposer'),
    (['--auto-drafts', 'copy'], 'pass --draft auto'),
    (['--draft', 'auto', '--auto-drafts', 'lookahead:0,3,4'], 'lookahead'),
    (['--draft', 'auto', '--auto-drafts', 'rest'], 'no datastore ships with no_such_model'),
    (['--draft', 'auto', '--auto-drafts', 'copy;bigram:/nonexistent.npz'],
     'bigram table /nonexistent.npz does not exist'),
], ids=['gamma', 'tree', 'nodes', 'model', 'empty', 'alone', 'lookahead', 'datastore',
        'table'])
def test_bad_draft_auto_flags_are_one_line_before_any_load(capsys, flags, message):
  assert decode.main(BEFORE_LOAD + flags) == 2
  err = capsys.readouterr().err
  assert err.startswith('error: ') and err.count('\n') == 1 and 'Traceback' not in err, err
  assert message in err and 'unknown model' not in err, err


@pytest.mark.parametrize('flags', [['--draft', 'auto'], ['--draft', 'auto', '--tree', 'auto'],
                                   ['--draft', 'auto', '--temperature', '1']],
                         ids=['default', 'tree auto', 'sampled'])
def test_good_draft_auto_flags_reach_the_load(capsys, flags):
  assert decode.main(BEFORE_LOAD + flags) == 2
  assert "unknown model 'no_such_model'" in capsys.readouterr().err


def test_a_resumed_sampled_run_keeps_its_proposer(tmp_path, monkeypatch):
  """The first run's file cut after 4 records (as a killed run leaves it) and its cached
  choice gone: the rerun takes the proposer and gamma the file was written with and
  writes the uninterrupted file."""
  monkeypatch.setenv('SPECJAX_CACHE_DIR', str(tmp_path / 'cache'))
  path = tmp_path / 'out.jsonl'
  args = RUN + ['--temperature', '1', '--seed', '5', '--output', str(path)]
  code, first, err = cli_for_tests.main_json(args)
  assert code == 0, err
  whole = path.read_text()
  path.write_text(''.join(whole.splitlines(keepends=True)[:4]))
  pathlib.Path(gamma_choice.cache_file()).unlink()
  code, second, err = cli_for_tests.main_json(args)
  assert code == 0, err
  assert second['resumed'] == 4 and path.read_text() == whole
  assert (second['draft'], second['gamma']) == (first['draft'], first['gamma'])
  assert 'the choice of the run that wrote' in second['gamma_reason']  # not calibrated again
  assert second['gamma_reason'].startswith(f'--draft {first["draft"]}, as the run that wrote')
  assert not pathlib.Path(gamma_choice.cache_file()).exists()


def test_evaluate_refuses_draft_auto_in_one_line():
  with pytest.raises(ValueError, match='--draft auto is python -m specjax.decode'):
    task_eval.evaluate(DecodeConfig(task='ende', draft='auto', gamma=4))


def test_with_tree_auto_each_proposer_weighs_its_trees(tmp_path, monkeypatch):
  """--draft auto --tree auto: a retrieval proposer's row is its chain or one of the
  candidate tries (`calibrate.choose_tree`'s choice for it), lookahead's its own tree."""
  monkeypatch.setenv('SPECJAX_CACHE_DIR', str(tmp_path / 'cache'))
  args = [{CANDIDATES: 'suffix;lookahead:3,2,2'}.get(a, a) for a in RUN] + [
      '--tree', 'auto', '--auto-trees', 'dynamic:4:2:2', '--output', str(tmp_path / 'o.jsonl')]
  code, summary, err = cli_for_tests.main_json(args)
  assert code == 0, err
  suffix, lookahead = summary['gamma_calibration']['candidates']
  assert suffix['tree'] in (None, {'kind': 'dynamic', 'nodes': 4, 'depth': 2, 'top': 2})
  assert lookahead['tree']['nodes'] == 3 + 2  # its window and its guesses, its own shape
  assert summary['identical_to_target'] is True
