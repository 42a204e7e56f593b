"""The man-page seqio task: its test split is the bundled one (inputs in the pair's form and
vocabulary), train / validation come from the corpus folder, and its metric is T5's ROUGE."""
import json

import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import seqio  # pylint: disable=wrong-import-position

from specjax import checkpoints  # pylint: disable=wrong-import-position
from specjax import tasks  # pylint: disable=wrong-import-position
from specjax.job import task_data  # pylint: disable=wrong-import-position

TASK = tasks.MANPAGES_TASK
BUNDLED = real_t5x.REPO / 'specjax' / 'assets' / 'manpages'


@pytest.fixture(scope='module')
def bundled():
  return real_t5x.read_jsonl(BUNDLED / 'test.jsonl')


def test_test_split_is_the_bundled_one(bundled):
  task = tasks.get_task(TASK)
  assert 'test' in task.splits
  examples = list(task.get_dataset(sequence_length=None, split='test', shuffle=False,
                                   use_cached=False).as_numpy_iterator())
  assert len(examples) == len(bundled) == 500
  assert [e['inputs_pretokenized'].decode() for e in examples] == [r['inputs'] for r in bundled]
  assert [e['targets_pretokenized'].decode() for e in examples] == [
      r['targets'] for r in bundled]
  vocab = checkpoints.load_vocab(str(BUNDLED / 'spm.model'))
  for ex in examples[:50]:
    np.testing.assert_array_equal(ex['inputs'],
                                  vocab.encode(ex['inputs_pretokenized'].decode()) + [1])
    np.testing.assert_array_equal(ex['targets'],
                                  vocab.encode(ex['targets_pretokenized'].decode()) + [1])
  read, _ = task_data.read_task(TASK, 'test', 3)
  assert [(e['inputs'], e['targets']) for e in read] == [
      (r['inputs'], r['targets']) for r in bundled[:3]]


def test_record_metrics_are_rouge(bundled):
  records = [{'targets': r['targets'], 'prediction': r['targets'],
              'target_prediction': r['inputs'][len('summarize: '):]} for r in bundled[:40]]
  metrics = task_data.record_metrics(TASK, records)
  assert set(metrics) == {'speculative', 'target'}
  for scores in metrics.values():
    assert set(scores) == {'rouge1', 'rouge2', 'rougeLsum'}
  assert all(v == pytest.approx(100.0) for v in metrics['speculative'].values())
  assert all(0.0 < v < 100.0 for v in metrics['target'].values())


def test_train_and_validation_come_from_the_corpus_folder(tmp_path, monkeypatch):
  rows = [{'text': f'Does thing {i} to files.', 'summary': f'do thing {i}', 'page': 'x.1.gz'}
          for i in range(3)]
  for split in ('train', 'validation'):
    (tmp_path / f'{split}.jsonl').write_text(
        ''.join(json.dumps(r) + '\n' for r in rows), encoding='utf-8')
  monkeypatch.setenv(tasks.MANPAGES_DATA_ENV, str(tmp_path))
  name = TASK + '_with_corpus'
  try:
    task = tasks.register_manpages_task(name)
    assert set(task.splits) == {'train', 'validation', 'test'}
    (ex, *_), = [list(task.get_dataset(sequence_length=None, split='train', shuffle=False,
                                       use_cached=False).as_numpy_iterator())]
    assert ex['inputs_pretokenized'].decode() == 'summarize: Does thing 0 to files.'
    assert ex['targets_pretokenized'].decode() == 'do thing 0'
  finally:
    seqio.TaskRegistry.remove(name)
