"""--output has one writer, resumes by what its records are (not by counting them), keeps a
sidecar it did not write, and '-' is standard output; errors come before any model loads."""
import json

import pytest

from specjax import decode
from specjax.job import output as output_lib

QUICK = ['--max-decode-len', '6', '--batch-size', '2', '--gamma', '3', '--no-compare',
         '--quiet', '--json']
TEXTS = ['Open the file', 'Save changes before closing?', 'Print the page', 'Quit',
         'Remove the folder', 'Show hidden files']


@pytest.fixture()
def src(tmp_path):
  path = tmp_path / 'in.txt'
  path.write_text('\n'.join(TEXTS) + '\n')
  return path


def _run(capsys, *argv):
  code = decode.main(list(argv))
  out, err = capsys.readouterr()
  return code, out, err


def test_a_second_writer_is_refused_in_one_line_before_any_load(tmp_path, src, capsys):
  out = tmp_path / 'out.jsonl'
  holder = output_lib.JsonlOutput(str(out))  # a run that holds the file
  try:
    code, _, err = _run(capsys, '--input', str(src), '--output', str(out),
                        '--target', 'no_such_model', *QUICK)  # a load would fail otherwise
    assert code == 2 and err.strip() == (f'error: another run is writing {out}; wait for it '
                                         'to finish, or pass another --output')
  finally:
    holder.close()
  assert not out.exists()  # created by the holder, never begun: removed again


def test_resume_redecodes_a_deleted_record_in_place(tmp_path, src, capsys):
  out = tmp_path / 'runs' / 'today' / 'out.jsonl'  # folders that do not exist yet are made
  assert _run(capsys, '--input', str(src), '--output', str(out), *QUICK)[0] == 0
  full = out.read_bytes()
  lines = full.decode().splitlines(keepends=True)
  assert len(lines) == len(TEXTS)
  out.write_text(''.join(lines[:2] + lines[3:]))  # a record lost in the middle
  code, stdout, _ = _run(capsys, '--input', str(src), '--output', str(out), *QUICK)
  assert code == 0 and json.loads(stdout)['resumed'] == 2
  assert out.read_bytes() == full  # every input once, in order
  out.write_text(''.join(lines) + lines[0])  # a record too many, out of place
  assert _run(capsys, '--input', str(src), '--output', str(out), *QUICK)[0] == 0
  assert out.read_bytes() == full


def test_a_sidecar_specjax_did_not_write_is_kept(tmp_path, src, capsys):
  out = tmp_path / 'notes'
  sidecar = tmp_path / 'notes.run.json'
  sidecar.write_bytes(b'{"mine": true}\n')
  code, _, err = _run(capsys, '--input', str(src), '--output', str(out), *QUICK)
  assert code == 2 and 'notes.run.json exists and was not written by specjax' in err
  assert sidecar.read_bytes() == b'{"mine": true}\n'


def test_dash_writes_the_records_to_stdout_and_the_summary_to_stderr(src, capsys, tmp_path):
  code, stdout, err = _run(capsys, '--input', str(src), '--output', '-', *QUICK)
  assert code == 0 and not (tmp_path / '-').exists()
  records = [json.loads(line) for line in stdout.splitlines()]
  assert [r['input_line'] for r in records] == list(range(1, len(TEXTS) + 1))
  assert json.loads(err.strip().splitlines()[-1])['num_examples'] == len(TEXTS)


def test_an_unwritable_output_is_an_error_before_any_load(tmp_path, src, capsys):
  code, _, err = _run(capsys, '--input', str(src), '--output', str(src / 'out.jsonl'),
                      '--target', 'no_such_model', *QUICK)  # a folder that is a file
  assert code == 2 and err.startswith('error: cannot write --output ') and 'writable' in err


def test_folders_made_for_a_run_that_ends_before_its_first_record_are_removed(tmp_path, src,
                                                                             capsys):
  (tmp_path / 'runs').mkdir()
  (tmp_path / 'runs' / 'kept.txt').write_text('mine')
  code, _, err = _run(capsys, '--input', str(src), '--output',
                      str(tmp_path / 'runs' / 'a' / 'b' / 'out.jsonl'),
                      '--target', 'no_such_model', *QUICK)
  assert code == 2 and 'no_such_model' in err
  assert sorted(p.name for p in (tmp_path / 'runs').iterdir()) == ['kept.txt']


def test_done_prefix_stops_at_the_first_record_out_of_place():
  examples = [{'inputs': t, 'input_line': i + 1} for i, t in enumerate('abc')]
  line = lambda i, t: json.dumps({'inputs': t, 'input_line': i}).encode()
  assert output_lib.done_prefix([line(1, 'a'), line(2, 'b')], examples) == 2
  assert output_lib.done_prefix([line(1, 'a'), line(3, 'c')], examples) == 1
  assert output_lib.done_prefix([line(1, 'a'), line(2, 'x')], examples) == 1  # other text
  assert output_lib.done_prefix([b'{"inputs": "a", "input_', line(2, 'b')], examples) == 0
  assert output_lib.done_prefix([line(i + 1, t) for i, t in enumerate('abc')] +
                                [line(1, 'a')], examples) == 3


def test_a_full_disk_is_one_line_and_the_rerun_resumes(tmp_path, src, capsys, monkeypatch):
  """The disk fills after two records: one line naming the file and what it holds, exit 2
  (no traceback from close), and the same command afterwards completes the file."""
  import errno
  import os
  out = tmp_path / 'out.jsonl'
  synced = []

  def fsync(fd):
    if len(synced) == 3:  # the sidecar, then two records
      raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    synced.append(fd)
  monkeypatch.setattr(output_lib.os, 'fsync', fsync)
  code, _, err = _run(capsys, '--input', str(src), '--output', str(out), *QUICK)
  assert code == 2 and err.strip().splitlines()[-1] == (
      f'error: cannot write {out}: No space left on device; 2 records are in it: free space '
      '(or pass another --output) and rerun the same command to resume')
  monkeypatch.undo()
  code, _, _ = _run(capsys, '--input', str(src), '--output', str(out), *QUICK)
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert code == 0 and [r['input_line'] for r in records] == list(range(1, len(TEXTS) + 1))
