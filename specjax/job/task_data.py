"""A seqio Task as the decode job's inputs, and its metric functions on the outputs.

Only `--task` runs need seqio (and TensorFlow): they are imported here, lazily, through
`specjax.tasks`, which registers the demo task and T5's public ones.
"""
from __future__ import annotations

import hashlib
import json
from typing import Dict, List, Optional, Sequence, Tuple


def get_task(name: str):
  """The registered seqio Task `name` (see `specjax.tasks.get_task`).

  Raises:
    ValueError: seqio is not installed, the name is unknown, or a public task's data is
      missing (one line naming the fix).
  """
  try:
    from specjax import tasks  # pylint: disable=import-outside-toplevel
  except ImportError as e:
    raise ValueError(f'--task needs seqio and TensorFlow; pip install seqio ({e})') from e
  return tasks.get_task(name)


def read_task(name: str, split: str, max_examples: Optional[int] = None
              ) -> Tuple[List[dict], str]:
  """The examples of a Task's split, in order, as the job reads inputs.

  Args:
    name: a registered seqio Task.
    split: e.g. 'test'.
    max_examples: read only the first n.

  Returns:
    ([{'inputs': the preprocessed input text, 'targets': the reference text,
    'input_line': its 1-based position}], the sha256 of them all (what a resumed
    --output run checks)).

  Raises:
    ValueError: an unknown task or split, or an empty split.
  """
  task = get_task(name)
  if split not in task.splits:
    raise ValueError(f'task {name} has no split {split!r}; pass --split with one of '
                     f'{", ".join(task.splits)}')
  dataset = task.get_dataset(sequence_length=None, split=split, shuffle=False,
                             use_cached=False)
  if max_examples is not None:
    dataset = dataset.take(max_examples)
  text = lambda v: v.decode('utf-8') if isinstance(v, bytes) else str(v)
  examples = [{'inputs': text(ex['inputs_pretokenized']),
               'targets': text(ex['targets_pretokenized']), 'input_line': i + 1}
              for i, ex in enumerate(dataset.as_numpy_iterator())]
  if not examples:
    raise ValueError(f'task {name} split {split} has no examples; pass another --split')
  digest = hashlib.sha256(json.dumps([name, split, examples]).encode()).hexdigest()
  return examples, digest


def task_metrics(name: str, targets: Sequence[str], predictions: Sequence[str]
                 ) -> Dict[str, float]:
  """The Task's own metric functions (e.g. BLEU, ROUGE) on its postprocessed texts.

  Args:
    name: the Task.
    targets, predictions: one text per example, in the same order.

  Returns:
    {metric name: value} merged over the Task's predict metric functions.
  """
  task = get_task(name)
  post = lambda text, is_target: task.postprocess_fn(text, example={}, is_target=is_target)
  targets = [post(t, True) for t in targets]
  predictions = [post(p, False) for p in predictions]
  metrics = {}
  for fn in task.predict_metric_fns:
    metrics.update({k: float(getattr(v, 'value', v)) for k, v in fn(targets,
                                                                     predictions).items()})
  return metrics


def record_metrics(name: str, records: Sequence[dict]) -> Dict[str, Dict[str, float]]:
  """The Task's metrics of a decode job's records, speculative and target alone.

  Args:
    name: the Task the records were read from (each has 'targets' and 'prediction', and
      'target_prediction' when the target alone was compared).

  Returns:
    {'speculative': {metric: value}, 'target': {...}} ('target' only when compared).
  """
  targets = [r['targets'] for r in records]
  out = {'speculative': task_metrics(name, targets, [r['prediction'] for r in records])}
  if records and all('target_prediction' in r for r in records):
    out['target'] = task_metrics(name, targets, [r['target_prediction'] for r in records])
  return out
