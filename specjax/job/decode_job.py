"""The decode job behind `python -m specjax.decode`: load a pair, decode inputs, measure.

Everything here is importable and tested without the CLI. Shape letters: B batch,
S encoder length, L max_decode_len.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Optional

import jax
import numpy as np

from specjax.checkpoints.registry import DEMO_PREFIX
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.job import calibrate
from specjax.job.inputs import batches, pad_to_bucket, read_inputs, tokenize
from specjax.job.pair import job_mesh, job_rules, load_pair
from specjax.parallel import rules as axis_rules

# With refill, one decode call streams up to this many batches' worth of inputs.
REFILL_BATCHES = 4


@dataclasses.dataclass
class DecodeJob:
  """Everything one decode run needs (the CLI's flags)."""

  target: str = 'demo_target'
  draft: str = 'demo_draft'
  target_checkpoint: Optional[str] = None
  draft_checkpoint: Optional[str] = None
  vocab: Optional[str] = None
  draft_vocab: Optional[str] = None
  input: Optional[str] = None
  output: Optional[str] = None
  prefix: Optional[str] = None
  gamma: object = 4  # an int >= 1, or 'auto'
  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0
  seed: int = 0
  batch_size: int = 8
  max_input_len: int = 64
  max_decode_len: int = 64
  truncate_inputs: bool = False
  pad_inputs: str = 'bucket'  # or 'max' (specjax.job.inputs.PAD_MODES)
  refill: bool = True  # a finished row takes the next input at once (on a mesh too)
  compare: bool = True
  dtype: Optional[str] = None
  param_dtype: str = 'float32'
  progress: bool = True
  num_partitions: Optional[int] = None  # model-parallel size; data takes the other devices
  mesh: Optional[str] = None  # or an explicit 'data=D,model=M'
  parameter_partitioning_dims: int = 1  # 2 also shards params' embed over data


def _timed(fn):
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return out, time.perf_counter() - start


def run(job: DecodeJob, on_record=None) -> dict:
  """Decodes every input speculatively (and with the target alone, to compare).

  Args:
    job: the run's settings.
    on_record: called with each output record as soon as its batch is done.

  Returns:
    The summary dict: gamma, alpha, tokens_per_call, target_calls, tokens_per_second,
    speedup, identical_to_target, num_examples and more.
  """
  if job.batch_size < 1:
    raise ValueError(f'--batch-size must be >= 1, got {job.batch_size}')
  if job.max_input_len < 1:
    raise ValueError(f'--max-input-len must be >= 1, got {job.max_input_len}')
  sampling = SamplingConfig(job.temperature, job.top_k, job.top_p)
  mesh = job_mesh(job)
  if mesh is not None:
    axis_rules.check_batch(job.batch_size, mesh)  # before loading anything big
  target, tp, draft, dp, vocab = load_pair(job, mesh)
  sampling.validate(target.vocab_size)
  prefix = job.prefix if job.prefix is not None else (
      DEMO_PREFIX if job.target.startswith('demo_') else '')
  examples = read_inputs(job.input, prefix)
  inputs = tokenize(vocab, [e['inputs'] for e in examples], job.max_input_len,
                    job.truncate_inputs)  # [N, S]
  refill = job.refill
  # A unit is one decode call: a batch of B rows, or with refill a stream of up to
  # REFILL_BATCHES * B inputs through B rows (inputs padded to a fixed count: one
  # compilation per width).
  unit = job.batch_size * (REFILL_BATCHES if refill else 1)
  unit = min(unit, -(-len(examples) // job.batch_size) * job.batch_size)

  def padded(rows):  # [unit, W]: W the bucket of the unit's longest input
    pad = np.zeros((unit - len(rows), rows.shape[1]), np.int32)
    pad[:, 0] = vocab.eos_id
    return pad_to_bucket(np.concatenate([rows, pad]), job.pad_inputs)

  warm = padded(inputs[:unit])
  gamma_reason = None
  if job.gamma == 'auto':
    job = dataclasses.replace(job)
    job.gamma, gamma_reason, _ = calibrate.choose_gamma(
        target, tp, draft, dp, warm[:job.batch_size], sampling, job.max_decode_len,
        mesh=mesh, rules=job_rules(job))
  spec, base = _decoders(job, target, tp, draft, dp, sampling, mesh, refill)
  ids = lambda start: np.arange(start, start + unit, dtype=np.int32)  # inputs' run indices
  compile_seconds = {}  # width -> seconds of the first (compiling) speculative call

  def compile_once(x):  # a width's first unit compiles, untimed: it is not decode time
    if x.shape[1] not in compile_seconds:
      compile_seconds[x.shape[1]] = _timed(lambda: spec(x, len(x), ids(0)))[1]
      if job.compare:
        _timed(lambda: base(x, len(x), ids(0)))

  compile_once(warm)

  totals = dict(spec_seconds=0.0, base_seconds=0.0, tokens=0, base_tokens=0, calls=0,
                accepted=0, drafted=0, beta_sum=0.0, beta_count=0)
  identical = True
  progress = _progress(len(examples), job.progress)
  for rows in batches(len(examples), unit):
    x = padded(inputs[rows])
    compile_once(x)
    real = rows.stop - rows.start
    out, seconds = _timed(lambda: spec(x, real, ids(rows.start)))
    totals['spec_seconds'] += seconds
    s = jax.tree.map(lambda a: np.asarray(a)[:real], out.stats)
    tokens, lengths = np.asarray(out.tokens)[:real], np.asarray(out.lengths)[:real]
    totals['tokens'] += int(lengths.sum())
    totals['calls'] += int(s.target_calls.sum())
    totals['accepted'] += int(s.accepted.sum())
    totals['drafted'] += int(s.drafted.sum())
    totals['beta_sum'] += float(s.beta_sum.sum())
    totals['beta_count'] += int(s.beta_count.sum())
    if job.compare:
      ref, base_seconds = _timed(lambda: base(x, real, ids(rows.start)))
      totals['base_seconds'] += base_seconds
      totals['base_tokens'] += int(np.asarray(ref.lengths)[:real].sum())
      if sampling.greedy:
        identical &= bool(np.array_equal(np.asarray(ref.tokens)[:real], tokens))
    for i, example in enumerate(examples[rows]):
      record = dict(example)
      record.update(prediction=vocab.decode(tokens[i]), num_tokens=int(lengths[i]),
                    target_calls=int(s.target_calls[i]), accepted=int(s.accepted[i]),
                    drafted=int(s.drafted[i]))
      if on_record:
        on_record(record)
    progress.update(real)
  progress.close()

  t = totals
  summary = dict(
      target=job.target, draft=job.draft, gamma=job.gamma, temperature=job.temperature,
      top_k=job.top_k, top_p=job.top_p, batch_size=job.batch_size, num_examples=len(examples),
      alpha=t['beta_sum'] / max(t['beta_count'], 1),
      acceptance_rate=t['accepted'] / max(t['drafted'], 1),
      tokens_per_call=(t['accepted'] + t['calls']) / max(t['calls'], 1),
      target_calls=t['calls'], generated_tokens=t['tokens'],
      tokens_per_second=t['tokens'] / max(t['spec_seconds'], 1e-9),
      seconds=t['spec_seconds'], compile_seconds=sum(compile_seconds.values()),
      input_widths=sorted(compile_seconds),
      baseline_tokens=t['base_tokens'] if job.compare else None,
      baseline_tokens_per_second=(t['base_tokens'] / t['base_seconds']
                                  if job.compare else None),
      # A ratio of tokens per second: sampled outputs of the two decodes differ in length.
      speedup=(t['tokens'] * t['base_seconds'] / max(t['base_tokens'] * t['spec_seconds'],
                                                      1e-12) if job.compare else None),
      identical_to_target=(identical if job.compare and sampling.greedy else None),
      gamma_reason=gamma_reason,
      backend=jax.default_backend(), devices=jax.device_count(),
      mesh=dict(mesh.shape) if mesh is not None else None)
  return summary


def _decoders(job: DecodeJob, target, tp, draft, dp, sampling, mesh, refill: bool):
  """(speculative, target alone): functions of (inputs [U, W], inputs used, their run
  indices [U]). Each input's randomness is fold_in(seed, its index), so a sampled output
  does not depend on the batch, refill or the mesh."""
  kw = dict(max_decode_len=job.max_decode_len, sampling=sampling,
            rng=jax.random.PRNGKey(job.seed), slots=job.batch_size if refill else None,
            mesh=mesh, rules=job_rules(job) if mesh is not None else None)
  return (lambda x, num, ids: api.speculative_decode(target, tp, draft, dp, x,
                                                     gamma=job.gamma, num_inputs=num,
                                                     row_ids=ids, **kw),
          lambda x, num, ids: api.autoregressive_decode(target, tp, x, num_inputs=num,
                                                        row_ids=ids, **kw))


def _progress(total: int, enabled: bool):
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  return tqdm(total=total, unit='ex', desc='decoding', disable=not enabled, file=sys.stderr,
              leave=False)
