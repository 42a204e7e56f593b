"""What the tests of specjax inside real T5X share: the t5x requirement, running T5X's own
commands, and tiny models built from T5X's examples network.

The tests here need real t5x, in an environment of its own (README: Inside T5X; CI builds
one, .ci/run). Where t5x is not importable they skip, unless SPECJAX_REQUIRE_T5X is set (as
the CI stage that installs t5x sets it): then a missing t5x fails them.
"""
import json
import os
import pathlib
import subprocess
import sys
import tempfile

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
GIN = REPO / 'tests' / 't5x' / 'gin'
REQUIRE_ENV = 'SPECJAX_REQUIRE_T5X'


def require_t5x():
  """Skips the calling test module without t5x and seqio; fails it when they are required."""
  if os.environ.get(REQUIRE_ENV):
    import seqio  # pylint: disable=import-outside-toplevel,unused-import
    import t5x.models  # pylint: disable=import-outside-toplevel,unused-import
    return
  pytest.importorskip('t5x.models', reason='needs real t5x (README: Inside T5X)')
  pytest.importorskip('seqio', reason='needs seqio (installed with t5x)')


def env() -> dict:
  """The environment of a child process: CPU, quiet TensorFlow, the repository importable."""
  out = dict(os.environ, TF_CPP_MIN_LOG_LEVEL='3', JAX_PLATFORMS='cpu')
  out['PYTHONPATH'] = os.pathsep.join([str(REPO)] + [p for p in [os.environ.get(
      'PYTHONPATH')] if p])
  return out


def run_module(module: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
  """`python -m module args...` from the repository root; fails the test with the tail of
  its output when it exits non-zero."""
  proc = subprocess.run([sys.executable, '-m', module, *args], cwd=REPO, env=env(),
                        capture_output=True, text=True, timeout=timeout)
  assert proc.returncode == 0, (proc.stdout[-3000:] + proc.stderr[-6000:])
  return proc


def t5x_args(gin_files, **bindings) -> list:
  """T5X's flags: gin files (relative to the repository) and bindings (values in gin syntax)."""
  args = [f'--gin_search_paths={REPO}'] + [f'--gin_file={f}' for f in gin_files]
  return args + [f'--gin.{k}={v}' for k, v in bindings.items()]


def run_t5x(command: str, gin_files, **bindings) -> subprocess.CompletedProcess:
  """`python -m t5x.<command>` with `t5x_args`."""
  return run_module(f't5x.{command}', *t5x_args(gin_files, **bindings))


def run_t5x_together(command: str, runs, timeout: int = 900) -> None:
  """Several `python -m t5x.<command>` at once (runs: (gin_files, bindings) pairs), their
  output in files (T5X logs a lot); fails the test with the log tail of one that fails."""
  with tempfile.TemporaryDirectory() as logs:
    procs = []
    for i, (gins, bindings) in enumerate(runs):
      log = open(os.path.join(logs, f'{i}.log'), 'w+', encoding='utf-8')
      procs.append((log, subprocess.Popen(
          [sys.executable, '-m', f't5x.{command}', *t5x_args(gins, **bindings)], cwd=REPO,
          env=env(), stdout=log, stderr=subprocess.STDOUT)))
    for log, proc in procs:
      proc.wait(timeout=timeout)
      log.seek(0)
      text = log.read()
      log.close()
      assert proc.returncode == 0, text[-8000:]


def quoted(path) -> str:
  """A path as a gin string literal."""
  return json.dumps(str(path))


def read_jsonl(path) -> list:
  with open(path, encoding='utf-8') as f:
    return [json.loads(line) for line in f if line.strip()]
