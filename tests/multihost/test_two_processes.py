"""Two processes on this machine (`jax.distributed` on localhost, one CPU device each)
decode one input file into one output on a mesh across both: process 0 alone writes the
records and the summary, and the file is byte for byte a single-process run's on a mesh
of two devices. Run beside the 8-device tests (scripts/run_tests.sh): its decodes set
their own device count."""
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from specjax.checkpoints.registry import ASSETS

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ARGS = ['--mesh', 'data=2,model=1', '--batch-size', '2', '--max-decode-len', '8',
        '--gamma', '2', '--no-compare', '--quiet', '--json']


def _env(devices: int) -> dict:
  flags = os.environ.get('XLA_FLAGS', '').replace('--xla_force_host_platform_device_count=8',
                                                   '')
  return dict(os.environ, JAX_PLATFORMS='cpu', PYTHONPATH=ROOT, XLA_FLAGS=(
      f'{flags} --xla_force_host_platform_device_count={devices}').strip())


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


@pytest.mark.parametrize('sampling', [[], ['--temperature', '1', '--seed', '3']],
                         ids=['greedy', 'sampled'])
def test_two_processes_write_the_single_process_file(tmp_path, sampling):
  rows = [json.loads(line) for line in (pathlib.Path(ASSETS) / 'test.jsonl').open()]
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(r['en'] for r in rows[:6]) + '\n')
  decode = [sys.executable, '-m', 'specjax.decode', '--input', str(src)] + ARGS + sampling
  single = subprocess.run(decode + ['--output', str(tmp_path / 'single.jsonl')],
                          env=_env(2), capture_output=True, text=True, timeout=600)
  assert single.returncode == 0, single.stderr
  port = _free_port()
  procs = [subprocess.Popen(
      decode + ['--output', str(tmp_path / 'multi.jsonl'), '--coordinator-address',
                f'localhost:{port}', '--num-processes', '2', '--process-id', str(i)],
      env=_env(1), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
           for i in range(2)]
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (_, err) in zip(procs, outs):
    assert p.returncode == 0, err
  summary = json.loads(outs[0][0].strip().splitlines()[-1])
  assert summary['devices'] == 2 and summary['mesh'] == {'data': 2, 'model': 1}
  # process 1 prints nothing (but the line gloo, the CPU collectives, prints itself)
  assert [l for l in outs[1][0].splitlines() if not l.startswith('[Gloo]')] == []
  assert (tmp_path / 'multi.jsonl').read_bytes() == (tmp_path / 'single.jsonl').read_bytes()
  # (specjax-cache: this test's own cache directory, tests/conftest.py, where the compile
  # cache goes when the run sets no JAX_COMPILATION_CACHE_DIR)
  written = sorted(set(os.listdir(tmp_path)) - {'specjax-cache'})
  assert written == ['in.txt', 'multi.jsonl', 'multi.jsonl.run.json', 'single.jsonl',
                     'single.jsonl.run.json']
