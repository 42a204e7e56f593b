"""python -m specjax.decode end to end on the bundled demo pair, and its one-line errors."""
import json
import os
import subprocess
import sys

import pytest

from specjax import decode
from specjax.job import decode_job
from specjax.checkpoints.registry import ASSETS

SENTENCES = ['Unable to open the file', 'Save changes before closing?', 'Print the page']


def _run_cli(args, stdin=None):
  return subprocess.run([sys.executable, '-m', 'specjax.decode'] + args, input=stdin,
                        capture_output=True, text=True, timeout=600)


def _run_main(args, capsys):
  """`python -m specjax.decode args` in this process: (exit code, stdout, stderr)."""
  code = decode.main(args)
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def test_cli_end_to_end_on_three_sentences(tmp_path):
  """The entry point itself, once (the other runs call `decode.main` in this process)."""
  src, out = tmp_path / 'in.txt', tmp_path / 'out.jsonl'
  src.write_text('\n'.join(SENTENCES) + '\n')
  proc = _run_cli(['--input', str(src), '--output', str(out), '--json', '--batch-size', '2',
                   '--gamma', '3', '--quiet'])
  assert proc.returncode == 0, proc.stderr
  summary = json.loads(proc.stdout.strip().splitlines()[-1])
  for key in ('gamma', 'alpha', 'tokens_per_call', 'target_calls', 'tokens_per_second',
              'speedup', 'identical_to_target', 'num_examples'):
    assert key in summary, key
  assert summary['num_examples'] == 3 and summary['gamma'] == 3
  assert summary['identical_to_target'] is True
  assert 0.0 <= summary['alpha'] <= 1.0
  assert 1.0 <= summary['tokens_per_call'] <= 4.0
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r['inputs'] for r in records] == [
      'translate English to German: ' + s for s in SENTENCES]
  for r in records:
    assert isinstance(r['prediction'], str) and r['prediction'].strip()
    assert r['num_tokens'] >= 1 and r['target_calls'] >= 1


def _error(args, tmp_path, capsys):
  assert decode.main(args + ['--quiet']) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and 'Traceback' not in err
  return err


def test_empty_input_file(tmp_path, capsys):
  empty = tmp_path / 'empty.txt'
  empty.write_text('\n\n')
  assert 'has no examples' in _error(['--input', str(empty)], tmp_path, capsys)


def test_line_longer_than_encoder(tmp_path, capsys):
  long = tmp_path / 'long.txt'
  long.write_text('open the file and save it ' * 20 + '\n')
  err = _error(['--input', str(long), '--max-input-len', '16'], tmp_path, capsys)
  assert '--max-input-len 16' in err and '--truncate-inputs' in err


def test_truncation_only_when_asked(tmp_path, capsys):
  """The cut keeps the first 15 tokens and EOS, the record says so, and the prediction is
  that of the cut text decoded as it is."""
  from specjax import checkpoints
  from specjax.checkpoints.registry import DEMO_VOCAB
  long, out = tmp_path / 'long.txt', tmp_path / 'out.jsonl'
  long.write_text('open the file and save it ' * 20 + '\n')
  args = ['--max-input-len', '16', '--json', '--quiet', '--max-decode-len', '8', '--gamma', '3',
          '--no-compare']
  code, stdout, stderr = _run_main(['--input', str(long), '--truncate-inputs', '--output',
                                    str(out)] + args, capsys)
  assert code == 0, stderr
  assert json.loads(stdout.splitlines()[-1])['num_examples'] == 1
  record = json.loads(out.read_text())
  assert record['truncated'] is True
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  cut = vocab.decode(vocab.encode(record['inputs'])[:15])
  assert len(vocab.encode(cut)) <= 15
  short, short_out = tmp_path / 'cut.txt', tmp_path / 'cut.jsonl'
  short.write_text(cut + '\n')
  assert _run_main(['--input', str(short), '--output', str(short_out)] + args, capsys)[0] == 0
  again = json.loads(short_out.read_text())
  assert 'truncated' not in again and again['prediction'] == record['prediction']


def test_unknown_registry_name_lists_known(tmp_path, capsys):
  err = _error(['--target', 't5_huge'], tmp_path, capsys)
  assert "unknown model 't5_huge'" in err and 't5_xxl' in err and 'demo_target' in err


def test_draft_with_another_vocabulary(tmp_path, capsys):
  import sentencepiece as spm
  corpus = tmp_path / 'corpus.txt'
  corpus.write_text('\n'.join(['hello world', 'guten tag welt', 'open the file'] * 50))
  spm.SentencePieceTrainer.train(input=str(corpus), model_prefix=str(tmp_path / 'other'),
                                 vocab_size=20, pad_id=0, eos_id=1, unk_id=2, bos_id=-1)
  err = _error(['--draft-vocab', str(tmp_path / 'other.model')], tmp_path, capsys)
  assert 'differs from the target' in err


def test_gcs_default_without_access_names_the_flag(tmp_path, capsys, monkeypatch):
  monkeypatch.setenv('SPECJAX_GCS_TIMEOUT', '3')  # no network here: fail fast
  err = _error(['--target', 't5_xxl', '--draft', 't5_small', '--vocab',
                os.path.join(ASSETS, 'spm.model')], tmp_path, capsys)
  assert 'gs://t5-data/pretrained_models/t5x/t5_1_1_xxl/checkpoint_1000000' in err
  assert '--target-checkpoint' in err


def test_gamma_auto_explains_its_choice(tmp_path, capsys):
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  code, stdout, stderr = _run_main(['--input', str(src), '--gamma', 'auto', '--json',
                                    '--batch-size', '3', '--max-decode-len', '16',
                                    '--max-gamma', '4'], capsys)
  assert code == 0, stderr
  # the seconds of calibrating show on stderr (with the progress bar; --quiet drops both)
  assert ('--gamma auto: measuring gammas 1..4 on 3 inputs, then timing the best against '
          'the target alone\n') in stderr
  summary = json.loads(stdout.strip().splitlines()[-1])
  assert summary['identical_to_target'] is True
  # the gamma the measured alpha, c and v(K) predict fastest; 0 when it measured slower
  from specjax.core import theory
  cal = summary['gamma_calibration']
  predicted = {g: theory.speedup(cal['alpha'], g, cal['c'], cal['v'][str(g + 1)])
               for g in range(1, 5)}  # 1..--max-gamma
  assert cal['predicted_best'] == max(predicted, key=predicted.get)
  assert f'gamma {cal["predicted_best"]} maximises the predicted speedup' in summary[
      'gamma_reason'] and 'over 1..4,' in summary['gamma_reason']
  assert sorted(cal['v'], key=int) == ['1', '2', '3', '4', '5']  # v(K) up to K = 5
  assert summary['gamma'] == (cal['predicted_best'] if cal['measured_speedup'] >= 1 else 0)
  assert f'measures {cal["measured_speedup"]:.2f}x' in summary['gamma_reason']


def test_param_dtype_flag_holds_params_in_bfloat16():
  import jax
  import jax.numpy as jnp
  from specjax.job import decode_job
  job = decode.parse_config(['--param-dtype', 'bfloat16', '--dtype', 'bfloat16'])
  assert job.param_dtype == 'bfloat16'
  target, tp, draft, dp, _ = decode_job.load_pair(job)
  assert target.config.dtype == draft.config.dtype == 'bfloat16'
  for params in (tp, dp):
    assert {x.dtype for x in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}
  with pytest.raises(SystemExit):
    decode.parse_args(['--param-dtype', 'int8'])


def test_sampled_speedup_is_a_ratio_of_tokens_per_second(tmp_path):
  """Sampled outputs of the two decodes differ in length: time alone would mislead."""
  src = tmp_path / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  summary = decode_job.run(decode_job.DecodeJob(input=str(src), temperature=1.0, batch_size=3,
                                                gamma=2, max_decode_len=16, progress=False))
  assert summary['identical_to_target'] is None
  assert summary['baseline_tokens'] != summary['generated_tokens']  # the case that matters
  assert summary['speedup'] == pytest.approx(
      summary['tokens_per_second'] / summary['baseline_tokens_per_second'])


@pytest.mark.parametrize('picked', [0, 2])
def test_task_records_carry_the_target_alone_prediction(tmp_path, monkeypatch, picked):
  """A --task run keeps the target alone's prediction beside each output (its metrics read
  it), also when --gamma auto picks 0 and the target alone is all that decodes."""
  examples = [{'inputs': s, 'targets': s, 'input_line': i + 1}
              for i, s in enumerate(SENTENCES)]
  monkeypatch.setattr(decode_job.task_data, 'read_task', lambda *a, **k: (examples, 'x'))
  costs = dict(alpha=0.5, c=0.1, v={2: 1.0}, predicted_best=2, predicted_speedup=1.1,
               measured_speedup=1.0 if picked else 0.9)
  monkeypatch.setattr(decode_job.calibrate, 'choose_gamma',
                      lambda *a, **k: (picked, 'measured', costs))
  records = []
  summary = decode_job.run(decode_job.DecodeJob(task='any', gamma='auto', batch_size=2,
                                                max_decode_len=12, progress=False),
                           records.append)
  assert summary['gamma'] == picked and summary['identical_to_target'] is True
  assert [r['input_line'] for r in records] == [1, 2, 3]
  assert all(r['target_prediction'] == r['prediction'] for r in records)
  assert (sum(r['drafted'] for r in records) > 0) == (picked > 0)
