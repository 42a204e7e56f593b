"""The seqio task path: `python -m specjax.decode --task` and `python -m specjax.evaluate` on
the demo task's test split with the bundled demo pair print the same BLEU for the
speculative decode and the target alone; the task's tokens are the decode's tokens."""
import re

import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

from specjax import checkpoints  # pylint: disable=wrong-import-position
from specjax import tasks  # pylint: disable=wrong-import-position
from specjax.checkpoints.registry import DEMO_VOCAB  # pylint: disable=wrong-import-position
from specjax.job import task_data  # pylint: disable=wrong-import-position

TASK = tasks.DEMO_TASK


def test_task_tokens_are_the_decode_tokens():
  task = tasks.get_task(TASK)
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  examples = list(task.get_dataset(sequence_length=None, split='test', shuffle=False)
                  .as_numpy_iterator())
  assert len(examples) == 500
  for ex in examples:
    text = ex['inputs_pretokenized'].decode()
    assert text.startswith('translate English to German: ')
    np.testing.assert_array_equal(ex['inputs'], vocab.encode(text) + [1])
  assert [e['inputs'] for e in task_data.read_task(TASK, 'test', 3)[0]] == [
      e['inputs_pretokenized'].decode() for e in examples[:3]]


def _bleu_lines(stdout):
  return re.findall(r'bleu ([0-9.]+) speculative, ([0-9.]+) target alone', stdout)


@pytest.fixture(scope='module')
def decoded(tmp_path_factory):
  """`python -m specjax.decode --task` of the demo test split with the bundled demo pair,
  inputs padded to 64 as T5X's feature lengths pad them: (stdout, records)."""
  out = tmp_path_factory.mktemp('decode') / 'out.jsonl'
  proc = real_t5x.run_module('specjax.decode', '--task', TASK, '--split', 'test', '--quiet',
                             '--batch-size', '32', '--gamma', '4', '--pad-inputs', 'max',
                             '--output', str(out))
  return proc.stdout, real_t5x.read_jsonl(out)


def test_decode_task_prints_equal_bleu(decoded):
  stdout, records = decoded
  (spec, alone), = _bleu_lines(stdout)
  assert spec == alone and float(spec) > 10.0  # the demo pair translates
  assert 'identical to the target\'s own greedy output: True' in stdout
  assert len(records) == 500
  assert all(r['prediction'] == r['target_prediction'] for r in records)
  metrics = task_data.record_metrics(TASK, records)
  assert f'{metrics["speculative"]["bleu"]:.2f}' == spec


def test_demo_pair_gin_in_t5x_infer_equals_the_decode(decoded, tmp_path):
  exported = real_t5x.run_module('specjax.t5x.export', '--model', 'demo_target', '--output',
                                 str(tmp_path / 'demo_target')).stdout.strip().splitlines()[-1]
  real_t5x.run_t5x('infer', ['specjax/t5x/configs/demo_pair.gin', 't5x/configs/runs/infer.gin'],
                   MIXTURE_OR_TASK_NAME=real_t5x.quoted(TASK),
                   TASK_FEATURE_LENGTHS="{'inputs': 64, 'targets': 64}",
                   CHECKPOINT_PATH=real_t5x.quoted(exported),
                   INFER_OUTPUT_DIR=real_t5x.quoted(tmp_path / 'infer'),
                   **{'utils.RestoreCheckpointConfig.dtype': '"float32"'})
  rows, = [real_t5x.read_jsonl(p) for p in (tmp_path / 'infer').glob('*-predict.jsonl-*')
           if not p.name.endswith('COMPLETED')]
  assert [r['prediction'] for r in rows] == [r['prediction'] for r in decoded[1]]


def test_evaluate_reports_equal_metrics_through_seqio_evaluator():
  text = real_t5x.run_module('specjax.evaluate', '--task', TASK, '--split', 'test',
                             '--batch-size', '32').stdout
  assert re.search(r'specjax_demo_ende test: 500 examples', text)
  (spec, alone), = _bleu_lines(text)
  assert spec == alone and float(spec) > 10.0
  alpha, per_call = map(float, re.search(r'alpha ([0-9.]+), ([0-9.]+) tokens per target call',
                                         text).groups())
  assert 0.0 < alpha <= 1.0 and per_call > 1.0
  assert re.search(r'speedup [0-9.]+x', text)


def test_evaluate_with_lookahead_verifies_its_own_tree():
  """--draft lookahead has no chain: evaluate decodes with its own tree (W, N, G = 5, 3, 4:
  18 nodes, 6 deep), and the greedy metrics are the target alone's."""
  text = real_t5x.run_module('specjax.evaluate', '--task', TASK, '--split', 'test',
                             '--draft', 'lookahead', '--max-examples', '16').stdout
  assert re.search(r'specjax_demo_ende test: 16 examples, .* draft lookahead, gamma 6,', text)
  (spec, alone), = _bleu_lines(text)
  assert spec == alone
  per_call = float(re.search(r'([0-9.]+) tokens per target call', text).group(1))
  assert per_call > 1.0


def test_task_errors_are_one_line():
  proc = real_t5x.subprocess.run(
      [real_t5x.sys.executable, '-m', 'specjax.decode', '--task', 'no_such_task', '--quiet'],
      cwd=real_t5x.REPO, env=real_t5x.env(), capture_output=True, text=True, timeout=600)
  err = proc.stderr.strip().splitlines()[-1]
  assert proc.returncode == 2 and err.startswith('error: unknown task') and 'pass one of' in err
  proc = real_t5x.subprocess.run(
      [real_t5x.sys.executable, '-m', 'specjax.evaluate', '--task', 'wmt_t2t_ende_v003'],
      cwd=real_t5x.REPO, env=dict(real_t5x.env(), TFDS_DATA_DIR='/nonexistent'),
      capture_output=True, text=True, timeout=600)
  err = proc.stderr.strip().splitlines()[-1]
  assert proc.returncode == 2 and 'tfds build wmt_t2t_translate/de-en' in err
