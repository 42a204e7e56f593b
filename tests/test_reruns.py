"""Interrupted, then rerun: for greedy and sampled decoding, `--gamma auto` and a fixed
gamma, with and without refill, the resumed file is byte for byte the file of an
uninterrupted run (each input once, in order), and two runs of one sampled command write
the same file. The interruption here is in-process (the run stops after some records, a
torn line is left, as SIGKILL leaves one); test_resume.py kills real processes."""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

from specjax import decode
from specjax.checkpoints.registry import ASSETS
from specjax.job import gamma_choice
from specjax.job.output import JsonlOutput

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINES = 6
TORN = '{"inputs": "translate English to German: cut sh'  # a line cut short by a kill
BASE = ['--quiet', '--no-compare', '--batch-size', '2', '--max-decode-len', '10',
        '--max-gamma', '2', '--seed', '5']


@pytest.fixture(scope='module')
def src(tmp_path_factory):
  rows = [json.loads(line) for line in (pathlib.Path(ASSETS) / 'test.jsonl').open()]
  path = tmp_path_factory.mktemp('reruns') / 'in.txt'
  path.write_text('\n'.join(r['en'] for r in rows[:LINES]) + '\n')
  return path


def _run(src, out, args):
  return decode.main(['--input', str(src), '--output', str(out)] + BASE + args)


def _interrupted(src, out, args, after: int, monkeypatch) -> int:
  """Runs the command and stops it (as Ctrl-C does) once `after` records are written,
  then leaves a torn last line; returns the exit code."""
  write = JsonlOutput.write

  def counting(self, record):
    write(self, record)
    if self.written >= after:
      raise KeyboardInterrupt
  monkeypatch.setattr(JsonlOutput, 'write', counting)
  try:
    code = _run(src, out, args)
  finally:
    monkeypatch.setattr(JsonlOutput, 'write', write)
  with out.open('a') as f:
    f.write(TORN)
  return code


@pytest.mark.parametrize('refill', [True, False], ids=['refill', 'no-refill'])
@pytest.mark.parametrize('gamma', ['auto', '2'])
@pytest.mark.parametrize('temperature', ['0', '1'])
def test_interrupted_and_rerun_equals_an_uninterrupted_run(src, tmp_path, monkeypatch,
                                                           temperature, gamma, refill):
  args = ['--temperature', temperature, '--gamma', gamma] + ([] if refill else ['--no-refill'])
  out, full = tmp_path / 'out.jsonl', tmp_path / 'full.jsonl'
  assert _interrupted(src, out, args, 2, monkeypatch) == 130
  assert out.read_text().count('\n') == 2
  assert _run(src, out, args) == 0  # the rerun resumes
  assert _run(src, full, args) == 0  # an uninterrupted run of the same command
  assert out.read_bytes() == full.read_bytes()
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r['input_line'] for r in records] == list(range(1, LINES + 1))
  if temperature != '0' and gamma == 'auto' and refill:  # a third run: the same file again
    again = tmp_path / 'again.jsonl'
    assert _run(src, again, args) == 0
    assert again.read_bytes() == full.read_bytes()


def test_sampled_gamma_auto_is_kept_and_reused(src, tmp_path, capsys):
  """The first sampled run calibrates and caches its choice; the next reuses and says so;
  --recalibrate measures again; a greedy run keeps its own choice (its records' counters
  depend on gamma), apart from the sampled one."""
  args = ['--temperature', '1', '--gamma', 'auto', '--json']
  assert _run(src, tmp_path / 'a.jsonl', args) == 0
  first = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert 'maximises the predicted speedup' in first['gamma_reason']
  assert first['gamma_reason'].endswith(
      f'kept in {gamma_choice.cache_file()} for reruns of this setting')
  (key, entry), = json.loads(pathlib.Path(gamma_choice.cache_file()).read_text()).items()
  assert entry['gamma'] == first['gamma'] and len(key) == 64
  assert _run(src, tmp_path / 'b.jsonl', args) == 0
  second = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert second['gamma'] == first['gamma']
  assert second['gamma_reason'].startswith(
      f'gamma {first["gamma"]}, as calibrated for this setting on ')
  assert second['gamma_calibration'] == first['gamma_calibration']
  assert _run(src, tmp_path / 'c.jsonl', args + ['--recalibrate']) == 0
  third = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert 'maximises the predicted speedup' in third['gamma_reason']
  os.unlink(gamma_choice.cache_file())
  assert _run(src, tmp_path / 'd.jsonl', ['--gamma', 'auto', '--json']) == 0  # greedy
  greedy = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  (greedy_key, entry), = json.loads(pathlib.Path(gamma_choice.cache_file()).read_text()).items()
  assert greedy_key != key and entry['gamma'] == greedy['gamma']


def test_another_seed_does_not_reuse_a_resumed_gamma():
  stored = {'target': 't', 'seed and gamma': [5, 2]}
  assert gamma_choice.resumed_gamma(stored, {'target': 't', 'seed and gamma': [5, 'auto']}) == 2
  assert gamma_choice.resumed_gamma(stored, {'target': 't', 'seed and gamma': [6, 'auto']}) is None
  assert gamma_choice.resumed_gamma(stored, {'target': 'u', 'seed and gamma': [5, 'auto']}) is None
  assert gamma_choice.resumed_gamma(None, {'seed and gamma': [5, 'auto']}) is None


def test_sigkill_of_a_sampled_gamma_auto_refill_run_then_rerun(src, tmp_path):
  """A real SIGKILL (after the calibration and some records); the rerun resumes with the
  killed run's gamma and writes the uninterrupted run's file."""
  many = tmp_path / 'many.txt'
  many.write_text(src.read_text() * 12)  # 72 inputs: room to kill before the end
  out, full = tmp_path / 'out.jsonl', tmp_path / 'full.jsonl'
  args = ['--temperature', '1', '--gamma', 'auto']
  env = dict(os.environ, PYTHONPATH=ROOT)
  cmd = [sys.executable, '-m', 'specjax.decode', '--input', str(many), '--output', str(out)
         ] + BASE + args
  proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  lines = lambda: out.read_text().count('\n') if out.exists() else 0
  while proc.poll() is None and lines() < 4:
    time.sleep(0.02)
  proc.send_signal(signal.SIGKILL)
  proc.wait(timeout=120)
  killed = lines()
  assert proc.returncode == -signal.SIGKILL and 4 <= killed < 72
  sidecar = json.loads(out.with_name(out.name + '.run.json').read_text())
  assert _run(many, out, args) == 0
  assert _run(many, full, args) == 0
  assert out.read_bytes() == full.read_bytes()
  assert json.loads(out.with_name(out.name + '.run.json').read_text()) == sidecar
