"""Ctrl-C under bench, plan and evaluate, during the imports or the run: one line that says
what is left, exit 130, no traceback, and no report file half-written. (decode's own case,
with the resume it allows, is in test_resume.)"""
import os
import signal
import subprocess
import sys
import time

import pytest
import signals_for_tests


def _commands(tmp):
  return {
      'bench': ([sys.executable, '-m', 'specjax.bench', '--quick', '--json',
                 str(tmp / 'bench.json')], 'nothing was written', [tmp / 'bench.json']),
      'plan': ([sys.executable, '-m', 'specjax.plan', '--quick', '--output',
                str(tmp / 'scale.md')], 'add --resume', [tmp / 'scale.md', tmp / 'scale.json']),
      'evaluate': ([sys.executable, '-m', 'specjax.evaluate', '--task', 'specjax_demo_ende'],
                   'nothing was written', []),
  }


@pytest.mark.parametrize('delay', [0.5, 8.0])
def test_ctrl_c_ends_each_tool_in_one_line(tmp_path, delay):
  commands = _commands(tmp_path)
  procs = {name: subprocess.Popen(cmd, cwd=tmp_path, env=dict(os.environ),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for name, (cmd, _, _) in commands.items()}
  for proc in procs.values():  # the delay counts from the interpreters' start
    signals_for_tests.wait_until_python_runs(proc)
  time.sleep(delay)
  for proc in procs.values():
    if proc.poll() is None:
      proc.send_signal(signal.SIGINT)
  interrupted = set()
  for name, proc in procs.items():
    _, err = proc.communicate(timeout=120)
    _, says, files = commands[name]
    if name == 'evaluate' and proc.returncode == 2:  # no seqio here: it ended first
      assert 'needs seqio' in err, err
      continue
    assert proc.returncode == 130, (name, proc.returncode, err)
    assert 'Traceback' not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith('interrupted: ') and says in last, (name, last)
    for path in files:
      assert not path.exists(), path  # written whole at the end, or not at all
    interrupted.add(name)
  assert {'bench', 'plan'} <= interrupted


def test_the_wait_for_an_interpreter_ends_once_it_handles_ctrl_c():
  """The tests above send Ctrl-C only once the process handles it: then the interrupt
  reaches Python code (here a KeyboardInterrupt), not the kernel's default action. The
  child sets Python's handler itself, as the tools set theirs: Python sets none where
  SIGINT comes ignored (a background job of a non-interactive shell)."""
  sleeper = subprocess.Popen(['sleep', '30'])
  try:
    assert not signals_for_tests.catches(sleeper.pid, signal.SIGINT)  # no handler
  finally:
    sleeper.kill()
    sleeper.wait()
  code = ('import signal, time; signal.signal(signal.SIGINT, signal.default_int_handler); '
          'time.sleep(30)')
  proc = subprocess.Popen([sys.executable, '-c', code], stderr=subprocess.PIPE, text=True)
  signals_for_tests.wait_until_python_runs(proc)
  assert signals_for_tests.catches(proc.pid, signal.SIGINT)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=30)
  assert 'KeyboardInterrupt' in err, err


def test_ctrl_c_during_the_shutdown_after_a_complete_run_is_ignored(tmp_path):
  """Once the decode has written everything, Python's shutdown (most of a second after
  jax) would meet a Ctrl-C with the signal's default action: killed, exit -2, no line.
  The tool ignores it then (`interrupt.finish`) and ends with its own exit code."""
  out = tmp_path / 'out.jsonl'
  cmd = [sys.executable, '-m', 'specjax.decode', '--max-examples', '2', '--gamma', '2',
         '--no-compare', '--quiet', '--output', str(out)]
  proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)
  signals_for_tests.wait_until_python_runs(proc)  # the tool's handler is in place
  while proc.poll() is None and signals_for_tests.catches(proc.pid, signal.SIGINT):
    time.sleep(0.001)  # until the handler is gone: the run is over
  alive = proc.poll() is None
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert alive, 'the decode ended before its shutdown could be interrupted'
  assert proc.returncode == 0, (proc.returncode, err)
  assert len(out.read_text().splitlines()) == 2
