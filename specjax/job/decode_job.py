"""The decode job behind `python -m specjax.decode`: load a pair, decode inputs, measure.

`run` is a few named steps: check the config, read the inputs, load the pair, choose gamma,
open the resumable output, decode in units, summarise. Everything here is importable and
tested without the CLI. Shape letters: B batch, S encoder length, L max_decode_len, U the
inputs of one decode call.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, List, Optional

import jax
import numpy as np

from specjax.checkpoints.registry import bundled
from specjax.core import api, proposal
from specjax.job import (calibrate, draft_auto, gamma_choice, memory_check, task_data,
                         tree_auto, tree_checks)
from specjax.job.config import AUTO, DecodeConfig
from specjax.job.fingerprint import run_fingerprint
from specjax.job.inputs import batches, pad_to_bucket, tokenize
from specjax.job.output import JsonlOutput
from specjax.job.pair import job_mesh, job_rules, load_pair, load_target
from specjax.job.reader import read_inputs
from specjax.job.totals import Totals, nonfinite_error
from specjax.parallel import rules as axis_rules

# The config's name in the API (`DecodeJob(...)` and `DecodeConfig(...)` are one class).
DecodeJob = DecodeConfig
__all__ = ['DecodeConfig', 'DecodeJob', 'load_pair', 'run']

# With refill, one decode call streams up to this many batches' worth of inputs.
REFILL_BATCHES = 4
# `--gamma auto` times its choice against the target alone on at least this many inputs.
PROBE_INPUTS = 16
# How a calibrated choice's reason names the cache that keeps it: '...; kept in PATH ...'.
KEPT_IN = '; kept in '


@dataclasses.dataclass
class Inputs:
  """The run's inputs, read and tokenized.

  Attributes:
    examples: one dict per input ('inputs', 'input_line', carried fields).
    digest: sha256 of the input file or task split (the resume fingerprint reads it).
    prefix: the task prefix added to inputs that lacked it.
    ids: [N, S] int32 token ids; truncated: [N] bool, inputs cut to --max-input-len.
    unit: U, the inputs of one decode call (a batch, or with refill up to
      REFILL_BATCHES batches streamed through B rows).
    pad_id, eos_id: the vocabulary's, for the padding rows of a last unit.
  """

  examples: List[dict]
  digest: str
  prefix: str
  ids: np.ndarray
  truncated: np.ndarray
  unit: int
  pad_id: int
  eos_id: int

  def padded(self, rows: np.ndarray, pad_inputs: str, count: Optional[int] = None):
    """[count, W]: the rows, padding rows after them, W the bucket of the longest."""
    count = self.unit if count is None else count
    pad = np.full((count - len(rows), rows.shape[1]), self.pad_id, np.int32)
    pad[:, 0] = self.eos_id
    return pad_to_bucket(np.concatenate([rows, pad]), pad_inputs, self.pad_id)


def _timed(fn):
  start = time.perf_counter()
  out = jax.block_until_ready(fn())
  return out, time.perf_counter() - start


def _read(job: DecodeConfig) -> tuple:
  """(examples, digest, prefix): inputs first, so a bad file fails before any load."""
  pair = bundled(job.target)  # a bundled pair's task prefix and sample inputs
  prefix = job.prefix if job.prefix is not None else (pair.prefix if pair else '')
  if job.task:
    examples, digest = task_data.read_task(job.task, job.split, job.max_examples)
  else:
    examples, digest = read_inputs(job.input or (pair.samples if pair else None), prefix,
                                   job.input_format, job.errors)
  return examples[:job.max_examples], digest, prefix


def _tokenized(job: DecodeConfig, examples, digest, prefix, vocab) -> Inputs:
  ids, truncated = tokenize(vocab, [e['inputs'] for e in examples], job.max_input_len,
                            job.truncate_inputs, [e['input_line'] for e in examples])
  unit = job.batch_size * (REFILL_BATCHES if job.refill else 1)
  unit = min(unit, -(-len(examples) // job.batch_size) * job.batch_size)
  return Inputs(examples, digest, prefix, ids, truncated, unit,
                getattr(vocab, 'pad_id', 0), vocab.eos_id)


def _choose_gamma(job: DecodeConfig, pair, inputs: Inputs, mesh, output,
                  fingerprint: Callable[[object], dict]) -> tuple:
  """(gamma, reason, calibration): a tree's depth (never calibrated), the config's
  gamma, or `--gamma auto`'s choice: the resumed sampled run's, or the one cached for the
  setting when there is one (`gamma_choice`), else calibrated and cached."""
  tree = job.token_tree
  if tree is not None:  # a tree is used as given: its depth is its gamma
    return tree.depth_count, (None if job.gamma != AUTO else
                              tree_checks.given_tree_reason(job, tree)), None
  if job.gamma != AUTO:
    return job.gamma, None, None
  auto = fingerprint(AUTO)
  resumed = gamma_choice.resumed_gamma(
      output.stored_fingerprint() if output is not None else None, auto)
  if resumed is not None:
    return resumed, (f'gamma {resumed}, the choice of the run that wrote {output.path}, '
                     'which this run resumes'), None
  key = gamma_choice.setting_key(auto, job)
  hit = None if job.recalibrate else gamma_choice.cached(key)
  if hit:
    return hit['gamma'], (
        f'gamma {hit["gamma"]}, as calibrated for this setting on {hit["date"]} and kept '
        f'in {gamma_choice.cache_file()}, so that reruns write the same file (--gamma N '
        f'pins one; delete the file to calibrate again): {hit["reason"]}'), hit['calibration']
  target, tp, draft, dp, _ = pair
  probe = _probe(job, inputs)
  most = _most(job, draft)
  gamma, reason, costs = calibrate.choose_gamma(
      target, tp, draft, dp, probe[:job.batch_size], job.sampling, job.max_decode_len,
      max_gamma=most, probe_gamma=min(4, most), mesh=mesh, rules=job_rules(job), probe=probe,
      slots=job.batch_size if job.refill else None, say=job.say,
      least_gamma=proposal.min_depth(draft), **rule_kwargs(job))
  calibration = {'alpha': costs['alpha'], 'c': costs['c'],
                 'v': {str(k): x for k, x in costs['v'].items()},
                 'predicted_best': costs['predicted_best'],
                 'predicted_speedup': costs['predicted_speedup'],
                 'measured_speedup': costs['measured_speedup']}
  kept = gamma_choice.remember(key, gamma, reason, calibration)
  if kept:
    reason += f'{KEPT_IN}{kept} for reruns of this setting'
  return gamma, reason, calibration


def _probe(job: DecodeConfig, inputs: Inputs) -> np.ndarray:
  """[U, W] the inputs `--gamma auto` decodes and times: one unit, or with refill at least
  PROBE_INPUTS inputs, so that a small batch is not timed on a handful of short outputs
  (noise, not speed, would then pick gamma)."""
  count = inputs.unit if not job.refill else max(
      inputs.unit, -(-min(PROBE_INPUTS, len(inputs.examples)) // job.batch_size)
      * job.batch_size)
  return inputs.padded(inputs.ids[:count], job.pad_inputs, count)


def _most(job: DecodeConfig, draft) -> int:
  """The deepest proposal `--gamma auto` considers: --max-gamma, at most L and what the
  draft can propose (Medusa heads: as many as they are)."""
  return min(job.auto_gammas, proposal.max_depth(draft) or job.auto_gammas)


def _choose_tree(job: DecodeConfig, pair, inputs: Inputs, mesh, output,
                 fingerprint: Callable[[DecodeConfig, object], dict]) -> tuple:
  """`--tree auto`: (the config resolved to the choice (`DecodeConfig.with_tree`), gamma,
  reason, calibration): the resumed sampled run's choice, the one cached for the setting,
  or else calibrated (`calibrate.choose_tree`) and cached."""
  auto = fingerprint(job, AUTO)
  resumed = gamma_choice.resumed_choice(
      output.stored_fingerprint() if output is not None else None, auto)
  if resumed is not None:
    gamma, tree = resumed
    return job.with_tree(tree), gamma, (
        f'{tree_auto.describe(gamma, tree_auto.from_json(tree))}, the choice of the run that '
        f'wrote {output.path}, which this run resumes'), None
  key = gamma_choice.setting_key(auto, job)
  hit = None if job.recalibrate else gamma_choice.cached(key)
  if hit and 'tree' in hit:
    try:
      tree = tree_auto.from_json(hit['tree'])
    except ValueError:  # not an entry this code wrote: calibrate again
      hit = None
  if hit and 'tree' in hit:
    return job.with_tree(hit['tree']), hit['gamma'], (
        f'{tree_auto.describe(hit["gamma"], tree)}, as calibrated for this setting on '
        f'{hit["date"]} and kept in {gamma_choice.cache_file()}, so that reruns write the '
        'same file (--gamma N or --tree B1,B2,.. pins one; --recalibrate measures again): '
        f'{hit["reason"]}'), hit['calibration']
  target, tp, draft, dp, _ = pair
  probe = _probe(job, inputs)
  most = _most(job, draft)
  trees = tree_auto.fit(job.auto_tree_candidates,  # no deeper than the draft proposes
                        min(job.max_decode_len, proposal.max_depth(draft) or job.max_decode_len))
  gamma, tree, reason, calibration = calibrate.choose_tree(
      target, tp, draft, dp, probe[:job.batch_size], job.sampling, job.max_decode_len,
      trees, max_gamma=most, probe_gamma=min(4, most), mesh=mesh, rules=job_rules(job),
      probe=probe, slots=job.batch_size if job.refill else None, say=job.say, **rule_kwargs(job))
  chosen = tree_auto.to_json(tree)
  kept = gamma_choice.remember(key, gamma, reason, calibration, tree=chosen, tree_auto=True)
  if kept:
    reason += f'{KEPT_IN}{kept} for reruns of this setting'
  return job.with_tree(chosen), gamma, reason, calibration


def _choose_draft(job: DecodeConfig, loaded, inputs: Inputs, mesh, output, source,
                  fits) -> tuple:
  """`--draft auto`: (the config resolved to the proposer chosen, its draft and params,
  and (gamma, reason, calibration), or None where the usual gamma choice is still to
  come): the proposer of the run being resumed, the choice cached for the setting, or
  else calibrated (`draft_auto.choose`) and cached."""
  (target, tp, vocab), names = loaded, draft_auto.candidates(job)
  resolve = lambda spec: draft_auto.resolve(job, spec, target, vocab)
  stored = (output.stored_fingerprint() or {}) if output is not None else {}
  resumed = (stored.get('draft') or {}).get('name')
  if resumed in names:  # its gamma (and tree) as --gamma auto resumes them
    return draft_auto.resolved(job, resumed), *resolve(resumed), None
  auto = run_fingerprint(job, target, tp, None, {}, *source, vocab, AUTO)
  key = gamma_choice.setting_key({**auto, 'draft auto': names}, job)
  hit = None if job.recalibrate else gamma_choice.cached(key)
  if hit and hit.get('draft') in names:
    one = draft_auto.resolved(job, hit['draft'], hit.get('tree'))
    return one, *resolve(hit['draft']), (hit['gamma'], (
        f'--draft {hit["draft"]}, {tree_auto.describe(hit["gamma"], one.token_tree)}, as '
        f'calibrated for this setting on {hit["date"]} and kept in '
        f'{gamma_choice.cache_file()} (--recalibrate measures again): {hit["reason"]}'),
                                          hit['calibration'])
  spec, gamma, tree, reason, calibration = draft_auto.choose(
      job, target, tp, vocab, _probe(job, inputs), mesh, job_rules(job),
      lambda d: _most(job, d), fits, rule_kwargs(job),
      echo=job.say)
  kept = gamma_choice.remember(key, gamma, reason, calibration, tree=tree, tree_auto=True,
                               draft=spec)
  reason += f'{KEPT_IN}{kept} for reruns of this setting' if kept else ''
  return (draft_auto.resolved(job, spec, tree), *resolve(spec),
          (gamma, reason, calibration))


def run(job: DecodeConfig, on_record: Optional[Callable[[dict], None]] = None,
        output: Optional[JsonlOutput] = None) -> dict:
  """Decodes every input speculatively (and with the target alone, to compare).

  Args:
    job: the run's config.
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
  job.check()
  mesh = job_mesh(job)
  if mesh is not None:
    axis_rules.check_batch(job.batch_size, mesh)  # before loading anything big
  examples, digest, prefix = _read(job)
  auto = job.draft == draft_auto.AUTO  # no draft model: a proposer chosen by calibration
  if auto:
    (target, tp, vocab), draft, dp = load_target(job, mesh), None, None
  else:
    target, tp, draft, dp, vocab = load_pair(job, mesh)
  job.sampling.validate(target.vocab_size)
  inputs = _tokenized(job, examples, digest, prefix, vocab)
  fits = lambda j, d: memory_check.check_fits(target, d, j.batch_size, inputs.ids.shape[1],
                                              j.max_decode_len, _block(j)[0], mesh,
                                              _block(j)[1])
  chosen = None
  if auto:
    job, draft, dp, chosen = _choose_draft(job, (target, tp, vocab), inputs, mesh, output,
                                           (digest, prefix), fits)
  fits(job, draft)
  pair = (target, tp, draft, dp, vocab)
  fingerprint = lambda j, g: run_fingerprint(j, target, tp, draft, dp, digest, prefix,
                                             vocab, g)
  if chosen is not None:
    gamma, gamma_reason, calibration = chosen
  elif job.tree == AUTO:  # the choice resolves the config to the chain or tree it picked
    job, gamma, gamma_reason, calibration = _choose_tree(job, pair, inputs, mesh, output,
                                                         fingerprint)
  else:
    gamma, gamma_reason, calibration = _choose_gamma(
        job, pair, inputs, mesh, output, lambda g: fingerprint(job, g))
  if auto and chosen is None:  # --draft auto resumed: the proposer its file was written with
    gamma_reason = f'--draft {job.draft}, as the run that wrote {output.path} chose; {gamma_reason}'
  skip = output.begin(fingerprint(job, gamma), examples) if output is not None else 0
  totals, identical, widths = _decode(job, gamma, pair, inputs, mesh, skip, output,
                                      on_record)
  tree = job.tree_json()
  return dict(
      target=job.target, draft=job.draft, gamma=gamma, **rule_kwargs(job),
      **(dict(tree=tree, **totals.tree_summary()) if tree else {}),
      temperature=job.temperature, top_k=job.top_k, top_p=job.top_p,
      batch_size=job.batch_size, num_examples=len(examples), resumed=skip,
      **totals.summary(job.compare),
      compile_seconds=sum(widths.values()), input_widths=sorted(widths),
      identical_to_target=(identical if job.compare and job.sampling.greedy
                           and totals.decoded else None),
      gamma_reason=gamma_reason, gamma_calibration=calibration,
      backend=jax.default_backend(), devices=jax.device_count(),
      mesh=dict(mesh.shape) if mesh is not None else None)


def _block(job: DecodeConfig) -> tuple:
  """(draft tokens a call verifies at most, the flag that sets them or None) for the
  memory check: a tree's N nodes, gamma, or --gamma auto's largest."""
  tree = job.token_tree
  if tree is not None:
    return tree.num_nodes, (f'--tree {job.tree}' if job.tree else
                            f'--tree-nodes {tree.num_nodes}')
  nodes = [t.num_nodes for t in job.auto_tree_candidates]  # --tree auto's
  if nodes and max(nodes) > job.auto_gammas:
    return max(nodes), f'--tree auto (up to {max(nodes)} nodes: {tree_auto.FLAG})'
  if job.gamma == AUTO:
    return job.auto_gammas, f'--gamma auto (up to gamma {job.auto_gammas})'
  return job.gamma, None


def _decode(job: DecodeConfig, gamma: int, pair, inputs: Inputs, mesh, skip: int,
            output: Optional[JsonlOutput], on_record) -> tuple:
  """Decodes the inputs after the first `skip`, unit by unit; writes and reports each
  record. Returns (Totals, identical to the target alone, {width: compile seconds})."""
  target, tp, draft, dp, vocab = pair
  spec, base = _decoders(job, gamma, target, tp, draft, dp, mesh)
  unit, examples = inputs.unit, inputs.examples
  ids = lambda start: np.arange(start, start + unit, dtype=np.int32)  # inputs' run indices
  compile_seconds = {}  # width -> seconds of the first (compiling) speculative call

  def compile_once(x):  # a width's first unit compiles, untimed: it is not decode time
    if x.shape[1] not in compile_seconds:
      compile_seconds[x.shape[1]] = _timed(lambda: spec(x, len(x), ids(0)))[1]
      if job.compare and gamma != 0:
        _timed(lambda: base(x, len(x), ids(0)))

  totals, identical = Totals(), True
  progress = _progress(len(examples), skip, job.progress)
  for rows in batches(len(examples) - skip, unit):
    rows = slice(rows.start + skip, rows.stop + skip)
    x = inputs.padded(inputs.ids[rows], job.pad_inputs)
    compile_once(x)
    real = rows.stop - rows.start
    out, seconds = _timed(lambda: spec(x, real, ids(rows.start)))
    s = jax.tree.map(lambda a: np.asarray(a)[:real], out.stats)
    error = nonfinite_error(s, examples, rows.start)
    if error:
      raise ValueError(error)
    totals.add(s, out.iterations, seconds)
    tokens = ref_tokens = np.asarray(out.tokens)[:real]
    if job.compare and gamma == 0:  # the target alone decoded: it is its own baseline
      totals.add_baseline(s.generated, seconds)
    elif job.compare:
      ref, base_seconds = _timed(lambda: base(x, real, ids(rows.start)))
      totals.add_baseline(np.asarray(ref.lengths)[:real], base_seconds)
      ref_tokens = np.asarray(ref.tokens)[:real]
      if job.sampling.greedy:
        identical &= bool(np.array_equal(ref_tokens, tokens))
    for i, example in enumerate(examples[rows]):
      record = dict(example, truncated=True) if inputs.truncated[rows][i] else dict(example)
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
  return totals, identical, compile_seconds


def _decoders(job: DecodeConfig, gamma: int, target, tp, draft, dp, mesh):
  """(speculative, target alone): functions of (inputs [U, W], inputs used, their run
  indices [U]). Each input's randomness is fold_in(seed, its index), so a sampled output
  does not depend on the batch, refill or the mesh."""
  kw = dict(max_decode_len=job.max_decode_len, sampling=job.sampling,
            rng=jax.random.PRNGKey(job.seed), slots=job.batch_size if job.refill else None,
            mesh=mesh, rules=job_rules(job) if mesh is not None else None)
  alone = lambda x, num, ids: api.autoregressive_decode(target, tp, x, num_inputs=num,
                                                        row_ids=ids, **kw)
  if gamma == 0:  # --gamma auto found the target alone faster
    return alone, alone
  return (lambda x, num, ids: api.speculative_decode(target, tp, draft, dp, x, gamma=gamma,
                                                     num_inputs=num, row_ids=ids, **kw,
                                                     tree=job.token_tree, **rule_kwargs(job)),
          alone)


def rule_kwargs(job: DecodeConfig) -> dict:
  """The verification rule of `job`, as speculative_decode's keyword arguments."""
  return dataclasses.asdict(job.rule)


def _progress(total: int, done: int, enabled: bool):
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  return tqdm(total=total, initial=done, unit='ex', desc='decoding', disable=not enabled,
              file=sys.stderr, leave=False)
