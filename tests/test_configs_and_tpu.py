"""The paper's run configs resolve and run as their docstrings say; tpu/ scripts parse."""
import glob
import importlib
import os
import re
import shlex
import subprocess

import pytest

from specjax import decode
from specjax.models.t5_config import T5_CONFIGS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIGS = sorted(os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, 'configs',
                                                                            '*.py'))
                 if not p.endswith('__init__.py'))
SCRIPTS = sorted(glob.glob(os.path.join(ROOT, 'tpu', '*.sh')))


def _docstring_command(doc: str) -> list:
  text = doc.replace('\\\n', ' ')
  line = next(l for l in text.splitlines() if 'python -m specjax.decode' in l)
  words = shlex.split(line.strip())
  return words[words.index('specjax.decode') + 1:]


def test_the_paper_table_is_covered():
  assert {'ende_t5xxl_t5small_g7', 'cnndm_t5xxl_t5small_g5'} <= set(CONFIGS)


@pytest.mark.parametrize('name', CONFIGS)
def test_config_resolves_and_its_docstring_command_runs_it(name):
  module = importlib.import_module(f'configs.{name}')
  single, v4_8 = module.SINGLE_CHIP, module.V4_8
  assert single.name == name
  for config in (single, v4_8):
    assert config.target in T5_CONFIGS and config.draft in T5_CONFIGS
    assert T5_CONFIGS[config.target].vocab_size == T5_CONFIGS[config.draft].vocab_size
    assert f'g{config.gamma}' in name and config.task in name
    assert len(config.paper_speedup) == len(config.temperatures)
  assert single.num_partitions is None and v4_8.num_partitions == 4
  from_doc = decode.parse_args(_docstring_command(module.__doc__))
  assert from_doc == decode.parse_args(single.args(single.temperatures[0]))
  assert shlex.split(single.command())[3:] == single.args(single.temperatures[0])
  job = decode._job(decode.parse_args(v4_8.args(v4_8.temperatures[-1])))
  assert job.num_partitions == 4 and job.gamma == v4_8.gamma
  assert job.temperature == v4_8.temperatures[-1]


@pytest.mark.parametrize('script', SCRIPTS, ids=os.path.basename)
def test_tpu_script_parses_and_is_strict(script):
  subprocess.run(['bash', '-n', script], check=True)
  text = open(script, encoding='utf-8').read()
  assert 'set -euo pipefail' in text
  assert text.startswith('#!/usr/bin/env bash')


def test_tpu_scripts_create_a_v4_8_and_run_pods_on_every_worker():
  text = {os.path.basename(p): open(p, encoding='utf-8').read() for p in SCRIPTS}
  assert re.search(r'--accelerator-type "\$ACCELERATOR_TYPE"', text['create_vm.sh'])
  assert 'v4-8' in text['env.sh'] and 'tpu-ubuntu2204-base' in text['env.sh']
  assert "jax[tpu]" in text['setup.sh']
  assert '--worker=all' in text['env.sh'] and '--multihost' in text['pod.sh']
  assert 'for temperature in 0.0 1.0' in text['vm_paper_table.sh']
