"""A long run interrupted (Ctrl-C, then SIGKILL) and resumed writes the file an
uninterrupted run writes, with no line lost or repeated; another run's file is refused."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest
import signals_for_tests

from specjax import decode
from specjax.checkpoints.registry import ASSETS

LINES = 72  # one decode call per line: each interruption leaves many calls to go
ARGS = ['--no-compare', '--quiet', '--batch-size', '1', '--no-refill', '--max-decode-len', '8', '--gamma', '3',
        '--temperature', '1', '--seed', '3', '--pad-inputs', 'max']


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
  tmp = tmp_path_factory.mktemp('resume')
  rows = [json.loads(line) for line in (pathlib.Path(ASSETS) / 'test.jsonl').open()]
  src = tmp / 'in.txt'
  src.write_text('\n'.join(r['en'] for r in rows[:LINES]) + '\n')
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(tmp / 'jax_cache'),
             JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS='0',
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES='0')  # later runs skip compiling
  return tmp, src, env


def _command(src, out, *extra):
  return [sys.executable, '-m', 'specjax.decode', '--input', str(src), '--output', str(out)
          ] + ARGS + list(extra)


def _lines(path):
  return path.read_text().count('\n') if path.exists() else 0


def _interrupt(cmd, env, out, after: int, sig, tries: int = 3):
  """Starts the command and sends `sig` once `out` holds at least `after` lines.

  On a loaded machine this process may not run again before the command has finished;
  the file is then put back as it was and the command started again.
  """
  sidecar = out.with_name(out.name + '.run.json')
  saved = {p: p.read_bytes() if p.exists() else None for p in (out, sidecar)}
  for _ in range(tries):
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    while _lines(out) < after and proc.poll() is None:
      time.sleep(0.02)
    if proc.poll() is None:
      proc.send_signal(sig)
      _, err = proc.communicate(timeout=120)
      return proc.returncode, err
    proc.communicate(timeout=120)
    for path, data in saved.items():  # finished before the signal: start again
      if data is None:
        path.unlink(missing_ok=True)
      else:
        path.write_bytes(data)
  pytest.fail(f'the run finished before it could be interrupted, {tries} times')


def test_killed_and_resumed_run_writes_the_uninterrupted_file(inputs):
  tmp, src, env = inputs
  full, out = tmp / 'full.jsonl', tmp / 'out.jsonl'
  subprocess.run(_command(src, full), env=env, check=True, capture_output=True, timeout=600)
  assert _lines(full) == LINES
  code, err = _interrupt(_command(src, out), env, out, 24, signal.SIGINT)  # Ctrl-C
  assert code == 130 and 'rerun the same command to resume' in err, err
  first = _lines(out)
  assert 24 <= first < LINES
  code, _ = _interrupt(_command(src, out), env, out, first + 24, signal.SIGKILL)
  assert code == -signal.SIGKILL
  second = _lines(out)
  assert first < second < LINES
  with out.open('a') as f:  # a line cut short by the kill, as a crash mid-write leaves one
    f.write('{"inputs": "translate English to German: cut sh')
  done = subprocess.run(_command(src, out, '--json'), env=env, capture_output=True, text=True,
                        timeout=600)
  assert done.returncode == 0, done.stderr
  summary = json.loads(done.stdout.strip().splitlines()[-1])
  assert summary['resumed'] == second and summary['decoded'] == LINES - second
  assert out.read_text() == full.read_text()  # byte for byte: nothing lost, nothing twice
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r['input_line'] for r in records] == list(range(1, LINES + 1))


@pytest.mark.parametrize('change, named', [
    (['--seed', '4'], 'seed and gamma'),
    (['--target', 'demo_draft'], 'target'),
    (['--max-decode-len', '9'], 'max_decode_len'),
])
def test_a_resume_with_another_setting_or_model_is_refused(inputs, change, named, capsys):
  """In process (the command line's own main): the refusal is the CLI's one line."""
  tmp, src, _ = inputs
  out = tmp / 'small.jsonl'
  if not out.exists():
    lines = src.read_text().splitlines()[:3]
    (tmp / 'small.txt').write_text('\n'.join(lines) + '\n')
    assert decode.main(_command(tmp / 'small.txt', out)[3:]) == 0
  before = out.read_text()
  capsys.readouterr()
  assert decode.main(_command(tmp / 'small.txt', out)[3:] + change) == 2
  error = capsys.readouterr().err.strip().splitlines()[-1]
  assert error.startswith('error: ') and f'another {named}' in error, error
  assert out.read_text() == before  # the file is left as it was


def test_ctrl_c_at_any_moment_is_one_line_and_exit_130(inputs):
  """During the imports, the loading, the compilation or the decode: no traceback, exit
  130, the line says what the output holds."""
  tmp, src, env = inputs
  out = tmp / 'ctrl_c.jsonl'
  interrupted = 0
  for delay in (0.5, 2.0, 5.0):
    proc = subprocess.Popen(_command(src, out), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    signals_for_tests.wait_until_python_runs(proc)  # the delay counts from Python's start
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:  # it finished first
      continue
    interrupted += 1
    assert proc.returncode == 130 and 'Traceback' not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith('interrupted: ') and (
        last == 'interrupted: nothing was written to a file' or
        last.endswith(f'inputs are in {out}; rerun the same command to resume')), last
  assert interrupted >= 2
