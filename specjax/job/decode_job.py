"""The decode job behind `python -m specjax.decode`: load a pair, decode inputs, measure.

Everything here is importable and tested without the CLI. Shape letters: B batch,
S encoder length, L max_decode_len.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, Optional

import jax
import numpy as np

from specjax.checkpoints.registry import bundled
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.job import calibrate, task_data
from specjax.job.fingerprint import run_fingerprint
from specjax.job.inputs import batches, pad_to_bucket, tokenize
from specjax.job.output import JsonlOutput
from specjax.job.pair import job_mesh, job_rules, load_pair
from specjax.job.reader import read_inputs
from specjax.job.totals import Totals, nonfinite_error
from specjax.parallel import rules as axis_rules

# With refill, one decode call streams up to this many batches' worth of inputs.
REFILL_BATCHES = 4
# `--gamma auto` times its choice against the target alone on at least this many inputs.
PROBE_INPUTS = 16


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
  input_format: str = 'auto'  # or 'text', 'jsonl' (specjax.job.reader.INPUT_FORMATS)
  errors: str = 'strict'  # or 'replace': non-UTF-8 input bytes
  task: Optional[str] = None  # a seqio Task's split instead of --input (needs seqio)
  split: str = 'test'
  output: Optional[str] = None
  prefix: Optional[str] = None
  gamma: object = 'auto'  # an int >= 1, or 'auto' (which may pick 0: the target alone)
  verification: str = 'token'  # or 'block' (specjax.core.api.speculative_decode)
  draft_threshold: float = 0.0  # per-row dynamic gamma; 0 drafts gamma tokens always
  threshold_rule: str = 'token'  # or 'cumulative' (api.speculative_decode)
  lenience: float = 1.0  # < 1 accepts more sampled drafts: lossy
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


def run(job: DecodeJob, on_record: Optional[Callable[[dict], None]] = None,
        output: Optional[JsonlOutput] = None) -> dict:
  """Decodes every input speculatively (and with the target alone, to compare).

  Args:
    job: the run's settings.
    on_record: called with each output record, in input order, as soon as its batch is
      done (after it is written to `output`).
    output: the resumable `--output` file: inputs it already holds are skipped.

  Returns:
    The summary dict: gamma, alpha, acceptance_rate, tokens_per_call (generated tokens per
    per-row target call), target_calls (per row, summed), batched_target_calls (model
    calls, each serving a batch), generated_tokens, tokens_per_second, speedup,
    identical_to_target, num_examples, resumed (inputs already in the output) and more.

  Raises:
    ValueError: a bad setting, a bad input, or logits that were not finite (the line and
      the likely cause named; the records before its batch are kept).
  """
  if job.batch_size < 1:
    raise ValueError(f'--batch-size must be >= 1, got {job.batch_size}')
  if job.max_input_len < 1:
    raise ValueError(f'--max-input-len must be >= 1, got {job.max_input_len}')
  if job.gamma != 'auto' and (not isinstance(job.gamma, int) or job.gamma < 1):
    raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), got '
                     f'{job.gamma!r}; or --gamma auto, which may pick 0 (the target alone)')
  sampling = SamplingConfig(job.temperature, job.top_k, job.top_p)
  api.check_rule(job.verification, job.draft_threshold, job.lenience, sampling.greedy,
                 job.threshold_rule)
  mesh = job_mesh(job)
  if mesh is not None:
    axis_rules.check_batch(job.batch_size, mesh)  # before loading anything big
  pair = bundled(job.target)  # a bundled pair's task prefix and sample inputs
  prefix = job.prefix if job.prefix is not None else (pair.prefix if pair else '')
  # Inputs first: a bad input file fails at once, not after minutes of loading weights.
  examples, input_sha256 = (
      task_data.read_task(job.task, job.split) if job.task else
      read_inputs(job.input or (pair.samples if pair else None), prefix, job.input_format,
                  job.errors))
  target, tp, draft, dp, vocab = load_pair(job, mesh)
  sampling.validate(target.vocab_size)
  inputs, truncated = tokenize(vocab, [e['inputs'] for e in examples], job.max_input_len,
                               job.truncate_inputs, [e['input_line'] for e in examples])
  refill = job.refill
  # A unit is one decode call: a batch of B rows, or with refill a stream of up to
  # REFILL_BATCHES * B inputs through B rows (inputs padded to a fixed count: one
  # compilation per width).
  unit = job.batch_size * (REFILL_BATCHES if refill else 1)
  unit = min(unit, -(-len(examples) // job.batch_size) * job.batch_size)

  def padded(rows, count=unit):  # [count, W]: W the bucket of the longest input
    pad = np.full((count - len(rows), rows.shape[1]), getattr(vocab, 'pad_id', 0), np.int32)
    pad[:, 0] = vocab.eos_id
    return pad_to_bucket(np.concatenate([rows, pad]), job.pad_inputs,
                         getattr(vocab, 'pad_id', 0))

  gamma_reason = calibration = None
  if job.gamma == 'auto':
    job = dataclasses.replace(job)
    # With refill the probe streams at least PROBE_INPUTS inputs, so that a small batch is
    # not timed on a handful of short outputs (noise, not speed, would then pick gamma).
    count = unit if not refill else max(
        unit, -(-min(PROBE_INPUTS, len(examples)) // job.batch_size) * job.batch_size)
    probe = padded(inputs[:count], count)
    job.gamma, gamma_reason, costs = calibrate.choose_gamma(
        target, tp, draft, dp, probe[:job.batch_size], sampling, job.max_decode_len,
        mesh=mesh, rules=job_rules(job), probe=probe,
        slots=job.batch_size if refill else None, **_rule(job))
    calibration = {'alpha': costs['alpha'], 'c': costs['c'],
                   'v': {str(k): x for k, x in costs['v'].items()},
                   'predicted_best': costs['predicted_best'],
                   'predicted_speedup': costs['predicted_speedup'],
                   'measured_speedup': costs['measured_speedup']}
  skip = 0
  if output is not None:
    skip = output.begin(run_fingerprint(job, target, tp, draft, dp, input_sha256, prefix,
                                        vocab), len(examples))
  spec, base = _decoders(job, target, tp, draft, dp, sampling, mesh, refill)
  ids = lambda start: np.arange(start, start + unit, dtype=np.int32)  # inputs' run indices
  compile_seconds = {}  # width -> seconds of the first (compiling) speculative call

  def compile_once(x):  # a width's first unit compiles, untimed: it is not decode time
    if x.shape[1] not in compile_seconds:
      compile_seconds[x.shape[1]] = _timed(lambda: spec(x, len(x), ids(0)))[1]
      if job.compare and job.gamma != 0:
        _timed(lambda: base(x, len(x), ids(0)))

  totals, identical = Totals(), True
  progress = _progress(len(examples), skip, job.progress)
  for rows in batches(len(examples) - skip, unit):
    rows = slice(rows.start + skip, rows.stop + skip)
    x = padded(inputs[rows])
    compile_once(x)
    real = rows.stop - rows.start
    out, seconds = _timed(lambda: spec(x, real, ids(rows.start)))
    s = jax.tree.map(lambda a: np.asarray(a)[:real], out.stats)
    error = nonfinite_error(s, examples, rows.start)
    if error:
      raise ValueError(error)
    totals.add(s, out.iterations, seconds)
    tokens = ref_tokens = np.asarray(out.tokens)[:real]
    if job.compare and job.gamma == 0:  # the target alone decoded: it is its own baseline
      totals.add_baseline(s.generated, seconds)
    elif job.compare:
      ref, base_seconds = _timed(lambda: base(x, real, ids(rows.start)))
      totals.add_baseline(np.asarray(ref.lengths)[:real], base_seconds)
      ref_tokens = np.asarray(ref.tokens)[:real]
      if sampling.greedy:
        identical &= bool(np.array_equal(ref_tokens, tokens))
    for i, example in enumerate(examples[rows]):
      record = dict(example, truncated=True) if truncated[rows][i] else dict(example)
      record.update(prediction=vocab.decode(tokens[i]), num_tokens=int(s.generated[i]),
                    target_calls=int(s.target_calls[i]), accepted=int(s.accepted[i]),
                    drafted=int(s.drafted[i]))
      if job.compare and job.task:  # the task's metrics of the target alone read it
        record['target_prediction'] = vocab.decode(ref_tokens[i])
      if output is not None:
        output.write(record)
      if on_record:
        on_record(record)
    progress.update(real)
  progress.close()
  return dict(
      target=job.target, draft=job.draft, gamma=job.gamma, **_rule(job),
      temperature=job.temperature,
      top_k=job.top_k, top_p=job.top_p, batch_size=job.batch_size,
      num_examples=len(examples), resumed=skip, **totals.summary(job.compare),
      compile_seconds=sum(compile_seconds.values()), input_widths=sorted(compile_seconds),
      identical_to_target=(identical if job.compare and sampling.greedy and totals.decoded
                           else None),
      gamma_reason=gamma_reason, gamma_calibration=calibration,
      backend=jax.default_backend(), devices=jax.device_count(),
      mesh=dict(mesh.shape) if mesh is not None else None)


def _decoders(job: DecodeJob, target, tp, draft, dp, sampling, mesh, refill: bool):
  """(speculative, target alone): functions of (inputs [U, W], inputs used, their run
  indices [U]). Each input's randomness is fold_in(seed, its index), so a sampled output
  does not depend on the batch, refill or the mesh."""
  kw = dict(max_decode_len=job.max_decode_len, sampling=sampling,
            rng=jax.random.PRNGKey(job.seed), slots=job.batch_size if refill else None,
            mesh=mesh, rules=job_rules(job) if mesh is not None else None)
  alone = lambda x, num, ids: api.autoregressive_decode(target, tp, x, num_inputs=num,
                                                        row_ids=ids, **kw)
  if job.gamma == 0:  # --gamma auto found the target alone faster
    return alone, alone
  return (lambda x, num, ids: api.speculative_decode(target, tp, draft, dp, x,
                                                     gamma=job.gamma, num_inputs=num,
                                                     row_ids=ids, **kw, **_rule(job)),
          alone)


def _rule(job: DecodeJob) -> dict:
  """The verification rule of `job`, as speculative_decode's keyword arguments."""
  return dict(verification=job.verification, draft_threshold=job.draft_threshold,
              threshold_rule=job.threshold_rule, lenience=job.lenience)


def _progress(total: int, done: int, enabled: bool):
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  return tqdm(total=total, initial=done, unit='ex', desc='decoding', disable=not enabled,
              file=sys.stderr, leave=False)
