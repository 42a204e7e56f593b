"""`python -m specjax.bench --paper-table --quick` end to end (one run: its JSON, markdown,
plot and stdout), and the report's sentences and tables from hand-made cells."""
import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from specjax.bench import cli, paper_report, paper_table
from specjax.speed import paper

from scripts_for_tests import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = 't5_tiny_draft'  # the draft model of --quick
PAPER_HEADING = '## The paper\'s published cells'
TITLES = {'ende': 'EnDe (gettext messages)', 'summarize': 'summaries'}

# One worker runs this file (scripts/run_tests.sh: --dist loadfile), so that the run of the
# module fixture is made once.


_RUN = {}  # the one run: an xdist worker may tear a module fixture down and set it up again


@pytest.fixture(scope='module')
def table(tmp_path_factory):
  """One --quick run of the table, in this process: (its JSON, its markdown, the plot's
  path, its stdout)."""
  if _RUN:
    return _RUN['table']
  out = tmp_path_factory.mktemp('paper_table')
  paths = {k: out / f'table.{k}' for k in ('json', 'md', 'png')}
  stdout = io.StringIO()
  with contextlib.redirect_stdout(stdout):
    code = cli.main(['--paper-table', '--quick', '--rounds', '1', '--json', str(paths['json']),
                     '--markdown', str(paths['md']), '--plot', str(paths['png'])])
  assert code == 0
  _RUN['table'] = (json.loads(paths['json'].read_text()), paths['md'].read_text(),
                   paths['png'], stdout.getvalue())
  return _RUN['table']


def test_python_m_bench_runs_main_and_exits_with_its_code():
  """The entry point itself, once: a task it does not know is a one-line error, exit 2."""
  proc = subprocess.run(
      [sys.executable, '-m', 'specjax.bench', '--paper-table', '--paper-tasks', 'nosuch'],
      cwd=ROOT, env=dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=os.pathsep.join(
          [ROOT] + [p for p in [os.environ.get('PYTHONPATH')] if p])),
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 2 and proc.stdout == ''
  assert proc.stderr.strip() == (
      "error: --paper-tasks: 'nosuch' is not a bundled task (ende, manpages, manlm); pass "
      'NAME=FILE for your own inputs')


def test_json_has_every_task_draft_and_temperature(table):
  result = table[0]
  assert [t['task'] for t in result['tasks']] == ['ende', 'summarize']
  assert [t['paper_task'] for t in result['tasks']] == ['ende', 'cnndm']
  labels = {paper_table.draft_label(s, MODEL) for s in paper_table.DEFAULT_DRAFTS}
  assert labels == {MODEL, 'bigram', 'copy', f'copy+{MODEL}'}
  assert result['temperatures'] == [0.0, 1.0]
  cells = {(c['task'], c['draft'], c['temperature']) for c in result['cells']}
  assert len(cells) == len(result['cells'])  # one cell each
  assert cells == {(t, d, x) for t in ('ende', 'summarize') for d in labels
                   for x in (0.0, 1.0)}
  for t in result['tasks']:
    assert set(t['drafts']) == labels and t['num_examples'] > 0


def test_greedy_cells_are_identical_and_sampled_cells_carry_block_rows(table):
  for c in table[0]['cells']:
    assert c['rows'] and c['gamma'] in [r['gamma'] for r in c['rows']]
    best = max(c['rows'], key=lambda r: r['speedup'])
    assert c['speedup'] == best['speedup'] and c['tokens_per_call'] >= 1.0
    if c['temperature'] == 0.0:
      assert c['identical_to_target'] is True, c['draft']
      assert all(r['identical_to_target'] is True for r in c['rows'])
      assert c['block'] is None
    else:
      assert c['identical_to_target'] is None
      block = c['block']
      assert isinstance(block, dict), c['draft']
      assert block['gamma'] == c['gamma'] and block['temperature'] == 1.0
      assert block['tokens_per_call'] >= 1.0 and 0.0 <= block['alpha'] <= 1.0


def _table_rows(lines):
  """The cells of a markdown table's data rows."""
  return [[x.strip() for x in l.strip().strip('|').split('|')] for l in lines
          if l.startswith('|') and not l.startswith('|---')]


def test_markdown_shows_our_cells_and_the_papers_labelled_apart(table):
  result, text = table[0], table[1]
  ours, _, theirs = text.partition(PAPER_HEADING)
  assert theirs, 'no section of the paper\'s cells'
  assert 'T5-XXL' in theirs.split('\n')[0] and 'TPU' in theirs.split('\n')[0]
  assert 'THE PAPER\'S TPU NUMBERS' in theirs and 'not measured here' in theirs.split('\n')[0]
  paper_rows = [r for r in _table_rows(theirs.split('\n')) if r[0] != 'draft']
  assert len(paper_rows) == len(paper.TABLE2)
  in_order = [c for task in paper.TASKS for c in paper.TABLE2 if c.task == task]
  for cell, row in zip(in_order, paper_rows):
    assert row[0].startswith(cell.draft) and float(row[1]) == cell.temperature
    assert int(row[2]) == cell.gamma and float(row[3]) == pytest.approx(cell.alpha)
    assert float(row[4].rstrip('x')) == pytest.approx(cell.speedup)
    assert float(row[5].rstrip('x')) == pytest.approx(cell.expected)
  assert '(T5 1.1)' not in ours  # no paper cell among ours
  our_rows = [r for r in _table_rows(ours.split('\n')) if r[0] != 'draft']
  assert len(our_rows) == len(result['cells'])
  assert sum(r[-1] == 'yes' for r in our_rows) == len(result['cells']) // 2
  assert 'NO' not in [r[-1] for r in our_rows]
  assert '![tokens per call' in ours and 'table.png' in ours
  for t in result['tasks']:
    for x in result['temperatures']:
      copy = _at_largest_gamma(result, t['task'], 'copy', x)
      bigram = _at_largest_gamma(result, t['task'], 'bigram', x)
      assert (f'{TITLES[t["task"]]}, T={x:g}, gamma 2: `copy` yields {copy:.2f} tokens per '
              f'target call, {copy - bigram:+.2f} against the bigram\'s {bigram:.2f}') in ours


def test_plot_is_a_png(table):
  with open(table[2], 'rb') as f:
    assert f.read(8) == b'\x89PNG\r\n\x1a\n'
  assert os.path.getsize(table[2]) > 10_000


def _at_largest_gamma(result, task, draft, temperature):
  """Tokens per call of a cell's row at the sweep's largest gamma, read from the JSON."""
  (cell,) = [c for c in result['cells'] if (c['task'], c['draft'], c['temperature']) ==
             (task, draft, temperature)]
  (row,) = [r for r in cell['rows'] if r['gamma'] == max(result['gammas'])]
  return row['tokens_per_call']


def test_stdout_has_the_tables(table):
  result, stdout = table[0], table[3]
  lines = stdout.strip().split('\n')
  header = ('| draft | T | best gamma | alpha | tokens / call | speedup | loop speedup | '
            'predicted | block: tokens / call | block: speedup | identical to target |')
  assert [l for l in lines if not l.startswith('|')][:1] == ['EnDe (gettext messages): t5_tiny']
  assert lines.count(header) == len(result['tasks'])
  for c in result['cells']:
    b = c['block']
    row = (f'| {c["draft"]} | {c["temperature"]:g} | {c["gamma"]} | {c["alpha"]:.3f} | '
           f'{c["tokens_per_call"]:.2f} | {c["speedup"]:.2f}x |')
    assert sum(l.startswith(row) for l in lines) >= 1, row
    if b:
      assert any(l.startswith(row) and l.endswith(
          f'| {b["tokens_per_call"]:.2f} | {b["speedup"]:.2f}x |  |') for l in lines), row
  assert stdout.strip() == paper_report.format_text(result).strip()


# --- the report's arithmetic on hand-made cells ------------------------------------------


def _cell(task, draft, temperature, per_call, gammas=(2, 4)):
  """A cell whose row at gamma g yields per_call[g] tokens per call (best: the last)."""
  rows = [{'gamma': g, 'temperature': temperature, 'tokens_per_call': per_call[g],
           'speedup': 1.0 + g / 10} for g in gammas]
  return {'task': task, 'paper_task': 'cnndm', 'draft': draft, 'temperature': temperature,
          'gamma': gammas[-1], 'alpha': 0.5, 'tokens_per_call': per_call[gammas[-1]],
          'speedup': rows[-1]['speedup'], 'loop_speedup': None, 'predicted_speedup': 1.2,
          'identical_to_target': True if temperature == 0 else None, 'block': None,
          'rows': rows}


def _result(drafts):
  """A two-gamma result for one task: drafts maps label -> {gamma: tokens per call} at T=0;
  T=1 cells yield one token per call less (never under 1)."""
  cells = [_cell('manpages', d, 0.0, v) for d, v in drafts.items()]
  cells += [_cell('manpages', d, 1.0, {g: max(1.0, x - 1) for g, x in v.items()})
            for d, v in drafts.items()]
  return {'tasks': [{'task': 'manpages', 'paper_task': 'cnndm', 'source': 'x',
                     'num_examples': 3, 'target': 't', 'drafts': list(drafts)}],
          'cells': cells, 'gammas': [2, 4], 'temperatures': [0.0, 1.0]}


DRAFTS = {'small': {2: 1.5, 4: 1.75}, 'base': {2: 1.6, 4: 2.0}, 'bigram': {2: 1.2, 4: 1.25},
          'copy': {2: 2.0, 4: 3.0}, 'copy+small': {2: 2.25, 4: 3.5}}


def test_copy_versus_takes_the_largest_gamma_and_the_first_draft_model():
  result = _result(DRAFTS)
  assert paper_report.copy_versus(result, 'manpages') == {
      'gamma': 4, 'model': 1.75, 'base': 2.0, 'bigram': 1.25, 'copy': 3.0, 'copy+model': 3.5}
  assert paper_report.copy_versus(result, 'manpages', 1.0) == {
      'gamma': 4, 'model': 1.0, 'base': 1.0, 'bigram': 1.0, 'copy': 2.0, 'copy+model': 2.5}
  no_copy = {k: v for k, v in DRAFTS.items() if not k.startswith('copy')}
  assert paper_report.copy_versus(_result(no_copy), 'manpages') is None
  assert paper_report.copy_versus(result, 'ende') is None  # no such task


def test_copy_sentence_numbers():
  result = _result(DRAFTS)
  assert paper_report.copy_sentence(result, 'manpages') == (
      'man-page summaries, T=0, gamma 4: `copy` yields 3.00 tokens per target call, +1.75 '
      'against the bigram\'s 1.25 and +1.25 (1.71x) against the draft model\'s 1.75; '
      '`copy+model` yields 3.50 tokens per target call, +2.25 against the bigram\'s 1.25 '
      'and +1.75 (2.00x) against the draft model\'s 1.75.')
  without_bigram = {k: v for k, v in DRAFTS.items() if k != 'bigram'}
  assert paper_report.copy_sentence(_result(without_bigram), 'manpages') == ''
  only_copy = {k: DRAFTS[k] for k in ('bigram', 'copy')}
  assert paper_report.copy_sentence(_result(only_copy), 'manpages', 1.0) == (
      'man-page summaries, T=1, gamma 4: `copy` yields 2.00 tokens per target call, +1.00 '
      'against the bigram\'s 1.00.')


def test_task_table_marks_differences_and_missing_figures():
  result = _result({'small': {2: 1.5, 4: 1.75}})
  result['cells'][0]['identical_to_target'] = False
  result['cells'][0]['alpha'] = None
  result['cells'][1]['block'] = {'tokens_per_call': 1.5, 'speedup': 1.25}
  rows = _table_rows(paper_report.task_table(result, 'manpages'))
  assert rows[1][:4] == ['small', '0', '4', 'n/a'] and rows[1][-1] == 'NO'
  assert rows[1][-3:-1] == ['= token', '= token']
  assert rows[2][-3:] == ['1.50', '1.25x', '']


def test_format_text_of_hand_made_cells():
  result = _result({k: DRAFTS[k] for k in ('small', 'bigram', 'copy')})
  result['cells'][0]['loop_speedup'] = 1.6
  result['cells'][3]['block'] = {'tokens_per_call': 1.5, 'speedup': 1.25}
  assert paper_report.format_text(result) == '\n'.join([
      'man-page summaries: t',
      '| draft | T | best gamma | alpha | tokens / call | speedup | loop speedup | predicted '
      '| block: tokens / call | block: speedup | identical to target |',
      '|---|---|---|---|---|---|---|---|---|---|---|',
      '| small | 0 | 4 | 0.500 | 1.75 | 1.40x | 1.60x | 1.20x | = token | = token | yes |',
      '| bigram | 0 | 4 | 0.500 | 1.25 | 1.40x | n/a | 1.20x | = token | = token | yes |',
      '| copy | 0 | 4 | 0.500 | 3.00 | 1.40x | n/a | 1.20x | = token | = token | yes |',
      '| small | 1 | 4 | 0.500 | 1.00 | 1.40x | n/a | 1.20x | 1.50 | 1.25x |  |',
      '| bigram | 1 | 4 | 0.500 | 1.00 | 1.40x | n/a | 1.20x | = token | = token |  |',
      '| copy | 1 | 4 | 0.500 | 2.00 | 1.40x | n/a | 1.20x | = token | = token |  |',
      '',
      'man-page summaries, T=0, gamma 4: `copy` yields 3.00 tokens per target call, +1.75 '
      'against the bigram\'s 1.25 and +1.25 (1.71x) against the draft model\'s 1.75.',
      'man-page summaries, T=1, gamma 4: `copy` yields 2.00 tokens per target call, +1.00 '
      'against the bigram\'s 1.00 and +1.00 (2.00x) against the draft model\'s 1.00.'])


def test_a_table_merged_from_runs_names_each_runs_date_and_tasks():
  result = {'machine': {'date': '2026-12-01'},
            'tasks': [{'task': 'ende'}, {'task': 'manpages'},
                      {'task': 'manlm', 'date': '2026-12-03'}]}
  assert paper_report.run_dates(result) == (
      '2026-12-01 (EnDe (gettext messages), man-page summaries) and 2026-12-03 (man-page '
      'continuation (decoder-only))')
  del result['tasks'][2]['date']
  assert paper_report.run_dates(result) == '2026-12-01'


def test_a_run_of_one_task_replaces_that_task_of_the_table_and_keeps_the_others(tmp_path):
  merge = load_script('paper_table_merge')
  settings = {'gammas': [2, 4], 'temperatures': [0.0, 1.0], 'batch_size': 1,
              'max_decode_len': 48, 'rounds': 3}
  table = dict(settings, machine={'date': '2026-12-01'},
               tasks=[{'task': 'ende'}, {'task': 'manlm', 'old': True}],
               cells=[{'task': 'ende', 'n': 1}, {'task': 'manlm', 'n': 2}])
  run = dict(settings, machine={'date': '2026-12-03'}, tasks=[{'task': 'manlm'}],
             cells=[{'task': 'manlm', 'n': 3}])
  (tmp_path / 'table.json').write_text(json.dumps(table))
  (tmp_path / 'run.json').write_text(json.dumps(run))
  assert merge.main([str(tmp_path / 'run.json'), '--json', str(tmp_path / 'table.json')]) == 0
  merged = json.loads((tmp_path / 'table.json').read_text())
  assert merged['tasks'] == [{'task': 'ende', 'date': '2026-12-01'},
                             {'task': 'manlm', 'date': '2026-12-03'}]
  assert merged['cells'] == [{'task': 'ende', 'n': 1}, {'task': 'manlm', 'n': 3}]
  (tmp_path / 'run.json').write_text(json.dumps(dict(run, rounds=1)))
  err = io.StringIO()
  with contextlib.redirect_stderr(err):
    assert merge.main([str(tmp_path / 'run.json'), '--json', str(tmp_path / 'table.json')]) == 1
  assert err.getvalue() == ('error: the run differs from the table in rounds; rerun it with '
                            'the table\'s settings\n')
