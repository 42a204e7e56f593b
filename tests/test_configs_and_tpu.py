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
from specjax.bench import cli as bench_cli
from specjax.bench import paper_table
from specjax.datastore import cli as datastore_cli
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
    job = decode.parse_config(v4_8.args(temperature))
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
    if os.environ.get('CI'):  # .ci/run installs it: there it must run
      pytest.fail('shellcheck is not installed; .ci/run installs it with apt-get')
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
  assert args.prefix == prefix and args.gamma == 7
  (command,) = _run_with_gcloud(tmp_path, 'decode.sh')  # no arguments: no '' either
  assert _cli_words(command, 'specjax.decode') == []


def test_pod_and_speed_bench_commands_parse(tmp_path):
  commands = _run_with_gcloud(tmp_path, 'pod.sh', ['--input', 'in.txt'])
  words = _cli_words(commands[-1].split(' > ')[0], 'specjax.decode')
  job = decode.parse_config(words)
  assert job.output == 'results/pod.jsonl' and job.num_partitions == 8
  assert job.target == 't5_1_0_11b' and job.input == 'in.txt'
  (command,) = _run_with_gcloud(tmp_path, 'speed_bench.sh', ['--rounds', '3'])
  args = measure.parse_args(_cli_words(command, 'specjax.speed'))
  assert args.rounds == 3 and args.json == 'results/tpu_speed_measured.json'


def _vm_table(tmp_path, env, table=False):
  """Runs vm_paper_table.sh with the VM's python recorded (inputs already made; the bigram
  table too with `table`): the argv lists of its python runs."""
  data, results, log = tmp_path / 'data', tmp_path / 'results', tmp_path / 'py.jsonl'
  data.mkdir(exist_ok=True)
  for name in ('ende', 'cnndm', 'references'):
    (data / f'{name}.jsonl').write_text('{"inputs": "x", "targets": "y"}\n' * 64)
  if table:
    (data / 't5_bigram.npz').write_bytes(b'')
  fake = tmp_path / 'python'
  fake.write_text(
      f'#!{sys.executable}\nimport json, sys\na = sys.argv[1:]\n'
      f'open({str(log)!r}, "a").write(json.dumps(a) + "\\n")\n'
      'if a[:2] == ["-m", "specjax.bench"]:\n'
      '  for flag in ("--json", "--markdown", "--plot"):\n'
      '    open(a[a.index(flag) + 1], "w").write("{}")\n'
      'elif a[:3] == ["-m", "specjax.datastore", "bigram"]:\n'
      '  open(a[a.index("--output") + 1], "wb").write(b"")\n'
      'else:\n'
      '  sys.exit(f"unexpected python run: {a}")\n')
  fake.chmod(0o755)
  run_env = dict(os.environ, PY=str(fake), DATA_DIR=str(data), RESULTS_DIR=str(results),
                 NUM_EXAMPLES='3')
  run_env.update(env)
  for name in ('PAIR', 'TARGET_CHECKPOINT', 'DRAFT_CHECKPOINT_SMALL', 'DRAFT_CHECKPOINT_BASE',
               'DRAFT_CHECKPOINT_LARGE', 'BIGRAM_TABLE', 'PAPER_GAMMAS', 'ROUNDS'):
    if name not in env:
      run_env.pop(name, None)
  proc = subprocess.run(['bash', os.path.join(ROOT, 'tpu', 'vm_paper_table.sh')],
                        env=run_env, capture_output=True, text=True)
  calls = [json.loads(l) for l in log.read_text().splitlines()] if log.exists() else []
  log.unlink(missing_ok=True)
  return proc, calls


def _bench_args(calls):
  """The parsed arguments of the one `python -m specjax.bench` run among `calls`."""
  (words,) = [c[2:] for c in calls if c[:2] == ['-m', 'specjax.bench']]
  return bench_cli.parse_args(words)


def test_vm_paper_table_runs_the_bench_paper_table_for_t5_xxl(tmp_path):
  proc, calls = _vm_table(tmp_path, {})
  assert proc.returncode == 0, proc.stderr
  data, results = tmp_path / 'data', tmp_path / 'results'
  (build,) = [c[3:] for c in calls if c[:3] == ['-m', 'specjax.datastore', 'bigram']]
  build_args = datastore_cli.parse_args(['bigram', *build])
  assert (build_args.input, build_args.field) == (str(data / 'references.jsonl'), 'targets')
  assert build_args.output == str(data / 't5_bigram.npz') and build_args.target == 't5_xxl'
  assert build_args.vocab.startswith('gs://t5-data/vocabs/')
  args = _bench_args(calls)
  assert args.paper_table and (args.target, args.draft) == ('t5_xxl', 't5_small')
  assert args.paper_tasks == f'ende={data}/ende.jsonl,cnndm={data}/cnndm.jsonl'
  specs = args.paper_drafts.split(',')
  labels = [paper_table.draft_label(s, args.draft) for s in specs]
  assert labels == ['t5_small', 't5_base', 't5_large', 'bigram', 'copy', 'copy+t5_small']
  assert {c.draft for c in paper.TABLE2} <= set(labels)  # the paper's T5 1.1 drafts
  assert args.bigram_table == str(data / 't5_bigram.npz')
  assert {cell.gamma for cell in paper.TABLE2} <= set(bench_cli._ints(args.paper_gammas))
  assert args.temperatures == '0,1' and args.batch_size == 1 and args.num_examples == 3
  assert (args.dtype, args.param_dtype) == ('bfloat16', 'bfloat16')
  assert args.max_input_len == 512 and args.target_checkpoint is None
  assert (args.json_path, args.markdown, args.plot) == tuple(
      str(results / f'paper_table.{e}') for e in ('json', 'md', 'png'))
  proc, again = _vm_table(tmp_path, {})  # the table is built once
  assert proc.returncode == 0 and [c[:2] for c in again] == [['-m', 'specjax.bench']]


def test_vm_paper_table_pairs_and_checkpoints(tmp_path):
  proc, calls = _vm_table(tmp_path, {
      'TARGET_CHECKPOINT': 'gs://b/xxl', 'DRAFT_CHECKPOINT_SMALL': 'gs://b/small',
      'DRAFT_CHECKPOINT_LARGE': '/ckpt/large'}, table=True)
  assert proc.returncode == 0, proc.stderr
  args = _bench_args(calls)
  assert (args.target_checkpoint, args.draft_checkpoint) == ('gs://b/xxl', 'gs://b/small')
  assert args.paper_drafts == 'model,t5_base,/ckpt/large,bigram,copy,copy+model'
  proc, calls = _vm_table(tmp_path, {'PAIR': 'flan', 'PAPER_GAMMAS': '7'}, table=True)
  args = _bench_args(calls)
  assert (args.target, args.draft, args.paper_gammas) == ('flan_t5_xxl', 'flan_t5_small', '7')
  assert args.paper_drafts.split(',')[1:3] == ['flan_t5_base', 'flan_t5_large']
  proc, calls = _vm_table(tmp_path, {'PAIR': 't5_2'}, table=True)
  assert proc.returncode == 2 and 'PAIR must be' in proc.stderr and calls == []
  proc, calls = _vm_table(tmp_path, {'NUM_EXAMPLES': '65'}, table=True)  # too few inputs
  assert calls[0][:3] == ['-m', 'pip', 'install'] and proc.returncode != 0


def _assigned(command: str) -> dict:
  """The VAR=value words of a remote command."""
  return dict(w.split('=', 1) for w in shlex.split(command.split('&&')[1]) if '=' in w)


def test_paper_table_sh_passes_its_settings_and_copies_the_report_back(tmp_path, monkeypatch):
  for name in ('PAIR', 'NUM_EXAMPLES', 'PAPER_GAMMAS', 'ROUNDS'):
    monkeypatch.delenv(name, raising=False)
  (command,) = _run_with_gcloud(tmp_path, 'paper_table.sh')
  assert command.split('&&')[1].strip().endswith('bash tpu/vm_paper_table.sh')
  assigned = _assigned(command)
  assert assigned == {'NUM_EXAMPLES': '64', 'PAIR': 't5_1_1', 'PAPER_GAMMAS': '3,5,7',
                      'ROUNDS': '1'}
  calls = [json.loads(l) for l in (tmp_path / 'gcloud.jsonl').read_text().splitlines()]
  copied = [c[c.index('scp') + 2] for c in calls if 'scp' in c]
  assert copied == [f'specjax-v4-8:~/specjax/results/paper_table.{e}'
                    for e in ('json', 'md', 'png')]
  (command,) = _run_with_gcloud(tmp_path, 'paper_table.sh', env={'PAIR': 'flan'})
  vm = tmp_path / 'vm'
  vm.mkdir()
  proc, calls = _vm_table(vm, _assigned(command), table=True)
  assert proc.returncode == 0, proc.stderr
  args = _bench_args(calls)
  assert args.target == 'flan_t5_xxl' and args.num_examples == 64
