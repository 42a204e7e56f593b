"""The paper's run configs resolve and run as their docstrings say; the tpu/ scripts pass
shellcheck and hand the CLI command lines its own parser accepts (gcloud and the VM's
python replaced by recorders)."""
import glob
import importlib
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys

import pytest

from specjax import decode
from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import measure, paper

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


def test_every_cell_of_the_paper_table_has_its_config_and_gamma():
  for cell in paper.TABLE2:
    module = importlib.import_module(f'configs.{cell.task}_{cell.draft[3:]}')
    run = module.SINGLE_CHIP
    assert run.gamma(cell.temperature) == cell.gamma
    assert cell.speedup in run.paper_speedup


@pytest.mark.parametrize('name', CONFIGS)
def test_config_resolves_and_its_docstring_command_runs_it(name):
  module = importlib.import_module(f'configs.{name}')
  single, v4_8 = module.SINGLE_CHIP, module.V4_8
  assert single.name == name and single.task in name
  assert (single.target, module.FLAN.target, module.PAPER.target) == (
      't5_1_0_11b', 'flan_t5_xxl', 't5_xxl')
  for config in (single, v4_8, module.FLAN, module.PAPER):
    assert config.target in T5_CONFIGS and config.draft in T5_CONFIGS
    assert T5_CONFIGS[config.target].vocab_size == T5_CONFIGS[config.draft].vocab_size
    assert len(config.paper_speedup) == len(config.temperatures) == len(config.gammas)
  assert single.num_partitions is None and v4_8.num_partitions == 4
  from_doc = decode.parse_args(_docstring_command(module.__doc__))
  assert from_doc == decode.parse_args(single.args(single.temperatures[0]))
  assert shlex.split(single.command())[3:] == single.args(single.temperatures[0])
  for temperature in v4_8.temperatures:
    job = decode._job(decode.parse_args(v4_8.args(temperature)))
    assert job.num_partitions == 4 and job.gamma == v4_8.gamma(temperature)
    assert job.temperature == temperature and job.truncate_inputs


@pytest.mark.parametrize('script', SCRIPTS, ids=os.path.basename)
def test_tpu_script_parses_and_is_strict(script):
  subprocess.run(['bash', '-n', script], check=True)
  text = open(script, encoding='utf-8').read()
  assert 'set -euo pipefail' in text
  assert text.startswith('#!/usr/bin/env bash')


def test_tpu_scripts_pass_shellcheck():
  if shutil.which('shellcheck') is None:
    pytest.skip('shellcheck is not installed (apt-get install shellcheck; .ci/run does)')
  result = subprocess.run(['shellcheck', '-x'] + SCRIPTS, capture_output=True, text=True,
                          cwd=os.path.join(ROOT, 'tpu'))
  assert result.returncode == 0, result.stdout


def _recorder(path, log, reply='') -> None:
  """An executable that logs its argv as a JSON line and prints `reply`."""
  with open(path, 'w', encoding='utf-8') as f:
    f.write(f'#!{sys.executable}\nimport json, sys\n'
            f'open({str(log)!r}, "a").write(json.dumps(sys.argv[1:]) + "\\n")\n'
            f'print({reply!r})\n')
  os.chmod(path, os.stat(path).st_mode | stat.S_IEXEC)


def _run_with_gcloud(tmp_path, script, args=(), env=None):
  """Runs a tpu/ script with gcloud recorded; returns the commands it ran on the VM."""
  bin_dir, log = tmp_path / 'bin', tmp_path / 'gcloud.jsonl'
  bin_dir.mkdir(exist_ok=True)
  log.unlink(missing_ok=True)
  _recorder(bin_dir / 'gcloud', log)
  run_env = dict(os.environ, PATH=f'{bin_dir}:{os.environ["PATH"]}', **(env or {}))
  subprocess.run(['bash', os.path.join(ROOT, 'tpu', script), *args], check=True,
                 cwd=tmp_path, env=run_env, capture_output=True)
  calls = [json.loads(l) for l in log.read_text().splitlines()]
  return [c[c.index('--command') + 1] for c in calls if '--command' in c]


def _cli_words(command: str, module: str) -> list:
  words = shlex.split(command.split('&&')[-1])
  return words[words.index(module) + 1:]


def test_decode_sh_passes_its_arguments_through_intact(tmp_path):
  prefix = "translate English to German: it's"
  (command,) = _run_with_gcloud(tmp_path, 'decode.sh', ['--prefix', prefix, '--gamma', '7'])
  args = decode.parse_args(_cli_words(command, 'specjax.decode'))
  assert args.prefix == prefix and args.gamma == '7'
  (command,) = _run_with_gcloud(tmp_path, 'decode.sh')  # no arguments: no '' either
  assert _cli_words(command, 'specjax.decode') == []


def test_pod_and_speed_bench_commands_parse(tmp_path):
  commands = _run_with_gcloud(tmp_path, 'pod.sh', ['--input', 'in.txt'])
  words = _cli_words(commands[-1].split(' > ')[0], 'specjax.decode')
  job = decode._job(decode.parse_args(words))
  assert job.output == 'results/pod.jsonl' and job.num_partitions == 8
  assert job.target == 't5_1_0_11b' and job.input == 'in.txt'
  (command,) = _run_with_gcloud(tmp_path, 'speed_bench.sh', ['--rounds', '3'])
  args = measure.parse_args(_cli_words(command, 'specjax.speed'))
  assert args.rounds == 3 and args.json == 'results/tpu_speed_measured.json'


def _vm_table(tmp_path, env):
  """Runs vm_paper_table.sh with the VM's python recording decodes; their argv lists."""
  data, results, log = tmp_path / 'data', tmp_path / 'results', tmp_path / 'py.jsonl'
  data.mkdir(exist_ok=True)
  for task in ('ende', 'cnndm'):
    (data / f'{task}.jsonl').write_text('{"inputs": "x"}\n')
  fake = tmp_path / 'python'
  fake.write_text(
      f'#!/usr/bin/env bash\nif [[ "${{1:-}} ${{2:-}}" == "-m specjax.decode" ]]; then\n'
      f'  {sys.executable} -c \'import json, sys; open("{log}", "a").write('
      f'json.dumps(sys.argv[1:]) + "\\n"); a = sys.argv; print(json.dumps(dict('
      f'temperature=float(a[a.index("--temperature") + 1]), gamma=int(a[a.index("--gamma") '
      f'+ 1]), alpha=0.5, speedup=2.0)))\' "${{@:3}}"\nelse\n  exec {sys.executable} "$@"\nfi\n')
  fake.chmod(0o755)
  run_env = dict(os.environ, PY=str(fake), DATA_DIR=str(data), RESULTS_DIR=str(results),
                 **env)
  subprocess.run(['bash', os.path.join(ROOT, 'tpu', 'vm_paper_table.sh')], check=True,
                 env=run_env, capture_output=True)
  calls = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
  log.unlink(missing_ok=True)
  return calls, json.loads((results / 'paper_table.json').read_text())


def test_vm_paper_table_runs_every_cell_at_its_gamma_and_resumes(tmp_path):
  calls, table = _vm_table(tmp_path, {'MESH_FLAGS': ''})
  assert len(calls) == len(table) == len(paper.TABLE2)
  for words in calls:
    job = decode._job(decode.parse_args(words))
    size = job.draft.rsplit('_', 1)[1]
    task = 'ende' if job.prefix.startswith('translate') else 'cnndm'
    (cell,) = [c for c in paper.TABLE2 if (c.task, c.draft, c.temperature) ==
               (task, f't5_{size}', job.temperature)]
    assert job.gamma == cell.gamma and job.target == 't5_1_0_11b'
    assert job.truncate_inputs and job.num_partitions is None  # "" is one chip
  assert {(r['task'], r['draft_size'], r['temperature']) for r in table} == {
      (c.task, c.draft[3:], c.temperature) for c in paper.TABLE2}
  again, table = _vm_table(tmp_path, {'MESH_FLAGS': ''})  # the merge of a rerun
  assert again == [] and len(table) == len(paper.TABLE2)


def _assigned(command: str) -> dict:
  """The VAR=value words of a remote command."""
  return dict(w.split('=', 1) for w in shlex.split(command.split('&&')[1]) if '=' in w)


def test_paper_table_sh_keeps_an_empty_mesh_and_defaults_to_a_v4_8(tmp_path, monkeypatch):
  monkeypatch.delenv('MESH_FLAGS', raising=False)
  (command,) = _run_with_gcloud(tmp_path, 'paper_table.sh', env={'MESH_FLAGS': ''})
  assert _assigned(command)['MESH_FLAGS'] == '' and _assigned(command)['PAIR'] == 't5_1_0'
  (command,) = _run_with_gcloud(tmp_path, 'paper_table.sh', env={'PAIR': 'flan'})
  assigned = _assigned(command)
  assert assigned['MESH_FLAGS'] == '--num-partitions 4'
  vm = tmp_path / 'vm'
  vm.mkdir()
  calls, _ = _vm_table(vm, {'MESH_FLAGS': assigned['MESH_FLAGS'], 'PAIR': assigned['PAIR']})
  job = decode._job(decode.parse_args(calls[0]))
  assert job.num_partitions == 4 and job.target == 'flan_t5_xxl'
  assert job.draft.startswith('flan_t5_')
