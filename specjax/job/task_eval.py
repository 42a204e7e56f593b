"""`python -m specjax.evaluate`: a seqio Task's metrics through `seqio.Evaluator`, for the
speculative decode and the target alone side by side, with alpha and the speedup.

The Evaluator feeds both the same feature-converted examples (inputs padded to the split's
longest, as T5X's eval does) and computes the Task's own metric functions (BLEU, ROUGE).
At temperature 0 both decodes are the target's greedy output, so their metrics agree.
Shape letters: N examples, B batch, S input length, L decode length.
"""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional

import jax
import numpy as np

from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.job import task_data
from specjax.job.decode_job import DecodeJob
from specjax.job.pair import load_pair
from specjax.job.totals import Totals


def _batched(inputs: np.ndarray, size: int):
  """[N, S] -> ([B, S] rows, real count), the last batch padded with empty inputs (not
  decoded: only the first `real` rows are)."""
  for start in range(0, len(inputs), size):
    rows = inputs[start:start + size]
    real = len(rows)
    if real < size:
      rows = np.concatenate([rows, np.zeros((size - real, rows.shape[1]), rows.dtype)])
    yield rows, real


class Predictor:
  """A predict function for seqio.Evaluator around one decode, with its totals."""

  def __init__(self, decode: Callable, batch_size: int):
    self.decode, self.batch_size = decode, batch_size
    self.totals = Totals()
    self.examples = 0

  def __call__(self, dataset, model_feature_shapes=None):
    del model_feature_shapes
    items = list(dataset.as_numpy_iterator())  # (index, model features)
    indices = [int(i) for i, _ in items]
    self.examples = len(items)
    inputs = np.stack([f['encoder_input_tokens'] for _, f in items]).astype(np.int32)
    length = int(items[0][1]['decoder_input_tokens'].shape[0])
    first, first_real = next(_batched(inputs, self.batch_size))
    jax.block_until_ready(self.decode(first, length, 0, first_real))  # compiles, untimed
    outputs = []
    for start, (rows, real) in zip(range(0, len(inputs), self.batch_size),
                                   _batched(inputs, self.batch_size)):
      begin = time.perf_counter()
      out = jax.block_until_ready(self.decode(rows, length, start, real))
      seconds = time.perf_counter() - begin
      self.totals.add(jax.tree.map(lambda a: np.asarray(a)[:real], out.stats),
                      out.iterations, seconds)
      outputs.extend(np.asarray(out.tokens)[:real].tolist())
    return list(zip(indices, outputs))

  def summary(self) -> dict:
    """seconds, tokens, target_calls, tokens_per_second, alpha and tokens_per_call (generated
    tokens per per-row target call), as the CLI's summary (`Totals.summary`)."""
    s = self.totals.summary(compare=False)
    return dict(seconds=s['seconds'], tokens=s['generated_tokens'],
                target_calls=s['target_calls'], tokens_per_second=s['tokens_per_second'],
                alpha=s['alpha'], tokens_per_call=s['tokens_per_call'])


def evaluate(job: DecodeJob, max_examples: Optional[int] = None) -> Dict[str, object]:
  """Evaluates `job.task`'s `job.split` with the speculative decode and the target alone.

  Args:
    job: the pair, gamma, sampling and batch size (`task` and `split` name the data).
    max_examples: evaluate only the first n examples.

  Returns:
    {'task', 'split', 'num_examples', 'gamma', 'temperature', 'speculative': {metrics...,
    'alpha', 'tokens_per_call', 'target_calls', 'tokens_per_second'}, 'target': {metrics...,
    'tokens_per_second'}, 'speedup'}.

  Raises:
    ValueError: no task, an unknown task or split, or bad settings (one line).
  """
  if not job.task:
    raise ValueError('evaluate needs a seqio task; pass --task NAME')
  if job.batch_size < 1 or job.gamma == 'auto':
    raise ValueError('evaluate needs --batch-size >= 1 and an integer --gamma')
  if job.draft == 'auto':
    raise ValueError('evaluate decodes with the --draft it is given: name one (copy, suffix, '
                     'lookahead, a draft model, ...); --draft auto is python -m '
                     'specjax.decode\'s')
  task = task_data.get_task(job.task)
  if job.split not in task.splits:
    raise ValueError(f'task {job.task} has no split {job.split!r}; pass --split with one of '
                     f'{", ".join(task.splits)}')
  import seqio  # pylint: disable=import-outside-toplevel
  sampling = SamplingConfig(job.temperature, job.top_k, job.top_p)
  target, tp, draft, dp, _ = load_pair(job)
  sampling.validate(target.vocab_size)
  rng = jax.random.PRNGKey(job.seed)
  ids = lambda start: np.arange(start, start + job.batch_size, dtype=np.int32)
  kw = dict(sampling=sampling, rng=rng)
  tree = job.token_tree  # lookahead's own tree (evaluate takes no tree flags), else a chain
  shape = dict(gamma=job.gamma) if tree is None else dict(gamma=tree.depth_count, tree=tree)
  runs = {
      'speculative': Predictor(lambda x, n, start, real: api.speculative_decode(
          target, tp, draft, dp, x, max_decode_len=n, row_ids=ids(start),
          num_inputs=real, **shape, **kw), job.batch_size),
      'target': Predictor(lambda x, n, start, real: api.autoregressive_decode(
          target, tp, x, max_decode_len=n, row_ids=ids(start), num_inputs=real, **kw),
          job.batch_size)}
  evaluator = seqio.Evaluator(
      mixture_or_task_name=job.task, feature_converter=seqio.EncDecFeatureConverter(
          pack=False), eval_split=job.split, num_examples=max_examples, logger_cls=())
  result = dict(task=job.task, split=job.split, gamma=shape['gamma'],
                temperature=job.temperature, target_model=job.target, draft_model=job.draft)
  for name, run in runs.items():
    metrics, _ = evaluator.evaluate(compute_metrics=True, predict_fn=run)
    values = {k: float(getattr(v, 'value', v)) for k, v in metrics.result()[job.task].items()}
    result[name] = {**values, **run.summary()}
  result['num_examples'] = runs['speculative'].examples
  spec, base = result['speculative'], result['target']
  result['speedup'] = spec['tokens_per_second'] / max(base['tokens_per_second'], 1e-9)
  return result
