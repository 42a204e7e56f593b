"""Generated documents: written whole or not at all, never over a full TPU run's from a
quick or CPU-only one, and bad output paths refused before any work (the plans and the
bench, through their command lines)."""
import json
import os
import subprocess
import sys

import pytest

from specjax import reports
from specjax.bench import cli as bench_cli

from scripts_for_tests import load_script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL_TPU = {'programs': [{'model': 't5_xxl'}], 'run': {'tpu': True, 'quick': False}}


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
  path = tmp_path / 'report.md'
  path.write_text('old\n')
  with pytest.raises(RuntimeError):
    with reports.replacing(str(path)) as tmp:
      with open(tmp, 'w', encoding='utf-8') as f:
        f.write('half of a new')
      raise RuntimeError('killed')
  assert path.read_text() == 'old\n' and os.listdir(tmp_path) == ['report.md']
  reports.write_text(str(path), 'new\n')
  assert path.read_text() == 'new\n' and os.listdir(tmp_path) == ['report.md']
  with reports.replacing(str(tmp_path / 'plot.png')) as tmp:
    assert tmp.endswith('.png')  # savefig picks the format from it
    open(tmp, 'wb').close()
  assert sorted(os.listdir(tmp_path)) == ['plot.png', 'report.md']


def test_resume_reads_the_partial_rows_first(tmp_path):
  rows = tmp_path / 'x.json'
  assert reports.partial_path(str(rows)) == str(tmp_path / 'x.partial.json')
  assert reports.read_rows(str(rows)) is None
  rows.write_text('{"done": 1}')
  assert reports.read_rows(str(rows)) == {'done': 1}
  (tmp_path / 'x.partial.json').write_text('{"done": 2}')
  assert reports.read_rows(str(rows)) == {'done': 2}


@pytest.mark.parametrize('old,tpu,quick,refused', [
    (FULL_TPU, False, True, True), (FULL_TPU, True, True, True),
    (FULL_TPU, False, False, True), (FULL_TPU, True, False, False),
    ({'programs': [], 'run': {'tpu': False, 'quick': True}}, False, True, False),
    ({'cpu': [{'batch': 1}], 'tpu': [{'batch': 1}]}, False, False, True),  # a --tpu plan
    ({'cpu': [{'batch': 1}], 'tpu': []}, False, False, False),
])
def test_quick_or_cpu_runs_never_replace_a_full_tpu_run(tmp_path, old, tpu, quick, refused):
  rows = tmp_path / 'plan.json'
  rows.write_text(json.dumps(old))
  error = reports.downgrade_error(str(rows), 'plan.md', tpu=tpu, quick=quick)
  assert (error is not None) == refused
  if refused:
    assert error.startswith('error: plan.md holds a full TPU v4 run') and '--output' in error
  assert reports.downgrade_error(str(tmp_path / 'none.json'), 'x', False, True) is None


def _plan(cwd, *args):
  return subprocess.run([sys.executable, '-m', 'specjax.plan', *args], cwd=cwd,
                        capture_output=True, text=True, timeout=300,
                        env=dict(os.environ, PYTHONPATH=ROOT))


def test_the_plans_refuse_to_replace_tpu_documents_before_compiling(tmp_path):
  """The committed-docs layout: a quick CPU speed plan and a CPU-only memory plan told to
  write there get one line, exit 2, and leave every byte."""
  docs = tmp_path / 'docs'
  docs.mkdir()
  files = {docs / 'tpu_speed.md': b'# TPU v4 speed\n', docs / 'tpu_speed.json':
           json.dumps(FULL_TPU).encode(), docs / 'scale.md': b'# Memory plan\n',
           docs / 'scale.json': json.dumps({'cpu': [], 'tpu': [{'batch': 1}]}).encode()}
  for path, data in files.items():
    path.write_bytes(data)
  speed = _plan(tmp_path, '--speed', '--quick', '--cpu', '--output', 'docs/tpu_speed.md')
  memory = _plan(tmp_path, '--quick', '--output', 'docs/scale.md')
  for proc, name in ((speed, 'tpu_speed.md'), (memory, 'scale.md')):
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        f'error: docs/{name} holds a full TPU v4 run; this quick CPU-only run would replace '
        'it: pass another --output')
  assert {p: p.read_bytes() for p in files} == files
  assert sorted(os.listdir(tmp_path)) == ['docs']


def test_unwritable_outputs_are_refused_before_any_work(tmp_path):
  (tmp_path / 'a_folder').mkdir()
  blocked = tmp_path / 'file'
  blocked.write_text('')
  inside = os.path.join('file', 'scale' + '.md')  # under a file, not a folder
  proc = _plan(tmp_path, '--quick', '--output', inside)
  assert proc.returncode == 2 and proc.stderr.strip() == (
      f'error: --output {inside}: {blocked} is not a directory')
  assert bench_cli.main(['--quick', '--json', str(tmp_path / 'a_folder')]) == 2
  assert bench_cli.main(['--quick', '--markdown', str(blocked / 'x.md')]) == 2
  assert sorted(os.listdir(tmp_path)) == ['a_folder', 'file']


def test_bench_errors_name_the_flag(tmp_path, capsys):
  assert bench_cli.main(['--quick', '--plot', str(tmp_path)]) == 2
  assert capsys.readouterr().err.strip() == (
      f'error: --plot {tmp_path}: is a directory; name a file')


def test_other_sections_are_those_the_generator_does_not_write_whole_in_file_order(tmp_path):
  """What a report's generator appends when it rewrites the report: the sections other
  scripts wrote (the TPU speed report keeps the hidden-state drafts' section, and any
  other), not its own numbered ones, whether this run writes them or not."""
  from specjax.speed import cli as speed_cli  # pylint: disable=import-outside-toplevel
  path = tmp_path / 'r.md'
  assert reports.other_sections(str(path), '# R\n') == ''  # no file yet
  path.write_text('# R\n\n## A\na\n\n## K\nk 1\nk 2\n\n## B\nb\n\n## L\nl\n')
  assert reports.other_sections(str(path), '# R\n\n## A\nnew a\n', ('## B',)) == (
      '\n## K\nk 1\nk 2\n\n## L\nl\n')
  path.write_text('# R\n\n## 8. Trees\nt\n\n## Drafts on the target\'s hidden states\n'
                  'heads\n\n## 3. Real T5X\nx\n\n## Another script\ny\n')
  assert reports.other_sections(str(path), '# R\n\n## 1. Traffic\n', speed_cli.OWN) == (
      '\n## Drafts on the target\'s hidden states\nheads\n\n## Another script\ny\n')


def test_a_rewritten_report_section_stays_where_it_stands(tmp_path):
  """A measuring script's rerun puts its section in place, not at the end of the file."""
  sections = load_script('report_sections')
  doc = tmp_path / 'report.md'
  doc.write_text('# Report\n\n## A\n\nold a\n\n## B\n\nold b\n\n## C\n\nold c\n')
  sections.write_section(str(doc), '## B', '## B\n\nnew b\n')
  assert doc.read_text() == '# Report\n\n## A\n\nold a\n\n## B\n\nnew b\n\n## C\n\nold c\n'
  sections.write_section(str(doc), '## C', '## C\n\nnew c')
  sections.write_section(str(doc), '## D', '## D\n\nd\n')
  assert doc.read_text() == ('# Report\n\n## A\n\nold a\n\n## B\n\nnew b\n\n## C\n\nnew c\n'
                             '\n## D\n\nd\n')
