"""python -m specjax.bench: measured vs predicted speedup, and peers, in one run.

Measures the target's step time, the verify cost v(K), the draft cost c, then for every
gamma and temperature: alpha, tokens per target call, tokens/s, the speedup over the
jitted autoregressive decode (end to end, and of the decode loops alone: the encoders and
the prefill, timed on their own, are subtracted from both), the speedup the paper's formula
predicts from the measured alpha, c and v, and efficiency = loop speedup / predicted.
Every figure a row divides by another is timed in interleaved rounds (bench_rows), and
each row splits its efficiency into four measured factors: tokens per iteration against
E, the calls timed alone against the same calls run alternating as the loop runs them,
the loop's own work, and the target-alone loop's own work (docs/benchmarks.md, "Where the
time goes"). `--peers hf` adds transformers' greedy and assisted generation on the same
weights and inputs.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys

import jax
import numpy as np

from specjax import flags
from specjax import reports
from specjax.bench import kinds, paper_report, paper_table, peers, report, variant_report, variants
from specjax.bench import trees as bench_trees
from specjax.bench import rows as bench_rows
from specjax.bench.config import BenchConfig, add_bench_flags
from specjax.job.inputs import pad_to_bucket, tokenize
from specjax.checkpoints.registry import bundled
from specjax.job.decode_job import DecodeJob, load_pair
from specjax.job import drafts
from specjax.core.sampling import SamplingConfig
from specjax.speed import timing


def parse_args(argv=None) -> argparse.Namespace:
  """The bench's flags (`specjax.bench.config`), parsed."""
  p = argparse.ArgumentParser(prog='python -m specjax.bench', description=__doc__.split('\n')[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  add_bench_flags(p)
  return p.parse_args(argv)


def _ints(spec: str):
  out = []
  for part in spec.split(','):
    lo, _, hi = part.partition('-')
    out.extend(range(int(lo), int(hi or lo) + 1))
  if not out or min(out) < 1:
    raise ValueError(f'--gammas must list integers >= 1, got {spec!r}')
  return out


def _read_texts(path: str, prefix: str, limit: int, select: str = 'first',
                references: bool = False):
  """The `limit` first (or longest, in file order) texts of a JSONL or plain-text file
  (with `references`: (texts, their "targets" or "de" fields))."""
  texts, refs = [], []
  with open(path, encoding='utf-8') as f:
    for line in f:
      if not line.strip():
        continue
      rec = json.loads(line) if line.lstrip().startswith('{') else {'inputs': line.strip()}
      text = rec.get('inputs') or rec.get('en')
      texts.append(text if text.startswith(prefix) else prefix + text)
      refs.append(rec.get('targets') or rec.get('de') or '')
      if len(texts) == limit and select == 'first':
        break
  if select == 'longest':
    keep = sorted(sorted(range(len(texts)), key=lambda i: -len(texts[i]))[:limit])
    texts, refs = [texts[i] for i in keep], [refs[i] for i in keep]
  return (texts, refs) if references else texts


def _setup(args):
  if args.quick:
    from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
    from specjax.models.t5_config import t5_tiny, t5_tiny_draft  # pylint: disable=import-outside-toplevel
    target, draft = T5(t5_tiny), T5(t5_tiny_draft)
    tp, dp = target.init(jax.random.PRNGKey(0)), draft.init(jax.random.PRNGKey(1))
    rows = np.array(jax.random.randint(jax.random.PRNGKey(2), (4, 8), 3, 32), np.int32)
    rows[:, -1] = 1
    args.context = dict(vocab=None, texts=None, references=None, load=lambda name: (draft, dp))
    return target, tp, draft, dp, rows
  job = DecodeJob(target=args.target, draft=args.draft, target_checkpoint=args.target_checkpoint,
                  draft_checkpoint=args.draft_checkpoint, vocab=args.vocab)
  target, tp, draft, dp, vocab = load_pair(job)
  pair = bundled(args.target)
  prefix = args.prefix if args.prefix is not None else (pair.prefix if pair else '')
  path = args.input or (pair.test if pair else None)
  if path is None:
    raise ValueError(f'--target {args.target} has no bundled test split; pass --input FILE')
  texts, refs = _read_texts(path, prefix, args.num_examples, args.select, True)
  args.context = dict(vocab=vocab, texts=texts, references=refs,
                      load=lambda name: load_pair(dataclasses.replace(job, draft=name))[2:4])
  return target, tp, draft, dp, tokenize(vocab, texts, args.max_input_len, False)[0]


def run_bench(args) -> dict:
  """The whole benchmark as one JSON-ready dict (see the module docstring)."""
  bench_trees.parse_trees(args.trees)  # a bad --trees fails before anything runs
  gammas = [1, 2] if args.quick else _ints(args.gammas)
  temperatures = [float(t) for t in args.temperatures.split(',')]
  max_len = 8 if args.quick else args.max_decode_len
  _check_drafts(args, max_len)  # a bad --drafts too
  target, tp, draft, dp, inputs = _setup(args)
  # The other drafts loaded before anything is timed: one that does not fit the target
  # (a table or datastore of another vocabulary) fails now, not after the rows.
  others = {spec: drafts.resolve_draft(spec, target, args.target, args.context['load'],
                                       vocab=args.context['vocab'])
            for spec in kinds.parse_drafts(args.drafts)}
  size = args.batch_size
  inputs = inputs[:len(inputs) // size * size]
  if len(inputs) == 0:
    raise ValueError(f'fewer examples than --batch-size {size}; lower it or add inputs')
  slots = size if args.refill else None
  pad = target.pad_id  # 0 for T5; a decoder-only model's own
  batches = ([pad_to_bucket(inputs, args.pad_inputs, pad)] if args.refill else
             [pad_to_bucket(inputs[i:i + size], args.pad_inputs, pad)
              for i in range(0, len(inputs), size)])
  repeats = 4 if args.quick else 32
  cache_len = max_len + max(gammas) + 2
  costs = timing.step_costs(target, tp, draft, dp, batches[0][:size], max(gammas) + 1,
                               repeats=repeats, cache_len=cache_len)
  rows, baselines = [], {}
  for temperature in temperatures:
    sampling = SamplingConfig(temperature=temperature)
    base = bench_rows.baseline_run(target, tp, batches, sampling, max_len, args.seed, slots)
    baselines[temperature] = {k: base[k] for k in ('seconds', 'num_tokens', 'tokens_per_second',
                                                   'compile_seconds', 'prefill_seconds')}
    for gamma in gammas:
      row = bench_rows.speculative_row(target, tp, draft, dp, batches, gamma, sampling, max_len,
                                       args.seed, args.rounds, repeats, cache_len, slots)
      rows.append(row)
      print(report.format_row(row), file=sys.stderr)
    if temperature == 0.0:
      greedy_tokens = base['tokens']
  result = {
      'target': 't5_tiny' if args.quick else args.target,
      'draft': 't5_tiny_draft' if args.quick else args.draft,
      'quick': args.quick,
      'num_examples': len(inputs), 'select': 'first' if args.quick else args.select,
      'batch_size': size, 'refill': args.refill, 'max_decode_len': max_len,
      'rounds': args.rounds,
      'c': costs['c'], 'v': {str(k): x for k, x in costs['v'].items()},
      'target_step_seconds': costs['target_step_seconds'],
      'draft_step_seconds': costs['draft_step_seconds'],
      'compile_seconds': max(r['compile_seconds'] for r in rows),
      'traces': max(r['traces'] for r in rows), 'shapes': max(r['shapes'] for r in rows),
      'input_widths': sorted({b.shape[1] for b in batches}), 'baselines': baselines,
      'rows': rows,
      'machine': report.machine_info(),
  }
  greedy = [r for r in rows if r['temperature'] == 0.0] or rows
  best = max(greedy, key=lambda r: r['speedup'])
  result['draft_after_sweep'] = {'gamma': best['gamma'], **timing.draft_after_sweep(
      draft, dp, batches[0][:size], best['gamma'], timing.params_bytes(tp), repeats,
      cache_len, args.rounds, target_params=tp)}
  if args.peers == 'hf':
    result['peers'] = peers.peer_summary(target, tp, draft, dp, inputs, max_len,
                                          best['gamma'], greedy_tokens, args.seed,
                                          args.pad_inputs)
  result.update(_beyond_the_draft(args, target, tp, draft, dp, others, batches, temperatures,
                                  max_len, repeats, slots))
  return result


def _check_drafts(args, max_len: int) -> None:
  """--drafts checked before any model loads: each a draft `python -m specjax.decode
  --draft` takes, and a horizontal cascade's K below one of --variant-gammas.

  Raises:
    ValueError, FileNotFoundError: one line naming the draft.
  """
  specs = kinds.parse_drafts(args.drafts)
  kinds.check_drafts(specs, args.target, max_len, args.vocab, args.target_checkpoint,
                     args.quick)
  gammas = _ints(args.variant_gammas)
  for spec in specs:
    if spec.startswith(drafts.CASCADE) and not kinds.chain_gammas(spec, None, gammas):
      k = drafts.parse_cascade(spec).count
      raise ValueError(f'--drafts {spec} drafts its first {k} tokens with the model: pass '
                       f'--variant-gammas with a gamma above {k} (now {args.variant_gammas})')


def _beyond_the_draft(args, target, tp, draft, dp, others, batches, temperatures, max_len,
                      repeats, slots) -> dict:
  """The rows of --drafts (others: {spec: (draft, params)}), --verifications,
  --thresholds, --trees, --lenience and --gamma-auto-batches."""
  out = {}
  ctx = args.context
  kw = dict(max_len=max_len, seed=args.seed, rounds=args.rounds, repeats=repeats, slots=slots)
  verifications = [v for v in args.verifications.split(',') if v]
  label = args.draft if not args.quick else 't5_tiny_draft'
  if others or verifications != ['token'] or args.thresholds:
    gammas = _ints(args.variant_gammas)
    thresholds = [float(t) for t in args.thresholds.split(',') if t]
    threshold_gammas = _ints(args.threshold_gamma) if thresholds else []
    cache_len = max_len + max(gammas + threshold_gammas) + 2
    out['variants'] = variants.variant_rows(
        target, tp, {label: (draft, dp), **others}, batches, gammas=gammas,
        temperatures=temperatures,
        verifications=verifications, thresholds=thresholds,
        threshold_gammas=threshold_gammas,
        threshold_rules=[r for r in args.threshold_rules.split(',') if r],
        cache_len=cache_len, **kw)
  trees = bench_trees.parse_trees(args.trees)
  tree_kw = dict(seed=args.seed, rounds=args.rounds, slots=slots)
  tree_rows = (bench_trees.tree_rows(target, tp, draft, dp, batches, trees, temperatures,
                                     max_len, draft_label=label, **tree_kw) if trees else [])
  tree_rows += bench_trees.draft_tree_rows(target, tp, others, batches, trees, temperatures,
                                           max_len, args.target, **tree_kw)
  if tree_rows:
    out['trees'] = tree_rows
  if args.lenience:
    if ctx['vocab'] is None:
      raise ValueError('--lenience reports BLEU against references: not with --quick')
    out['lenience'] = variants.lenience_rows(
        target, tp, draft, dp, batches, ctx['references'], ctx['vocab'].decode,
        gamma=_ints(args.variant_gammas)[-1],
        lenience=[float(x) for x in args.lenience.split(',')],
        cache_len=max_len + max(_ints(args.variant_gammas)) + 2, **kw)
  if args.gamma_auto_batches:
    if ctx['texts'] is None:
      raise ValueError('--gamma-auto-batches decodes the input file: not with --quick')
    out['gamma_auto'] = variants.gamma_auto_runs(
        ctx['texts'], _ints(args.gamma_auto_batches), dict(
            target=args.target, draft=args.draft, target_checkpoint=args.target_checkpoint,
            draft_checkpoint=args.draft_checkpoint, vocab=args.vocab, prefix='',
            max_input_len=args.max_input_len, max_decode_len=max_len,
            pad_inputs=args.pad_inputs, seed=args.seed))
  return out


def run_paper_table(args) -> dict:
  """The paper's table (specjax.bench.paper_table) for the tasks and drafts of args."""
  runs = paper_table.runs_from_args(args)
  return paper_table.run_table(
      runs, [2] if args.quick else _ints(args.paper_gammas),
      [float(t) for t in args.temperatures.split(',')],
      8 if args.quick else args.max_decode_len, args.batch_size, args.seed, args.rounds,
      4 if args.quick else 32, args.pad_inputs)


def _write(args, result, reporter, text: str) -> None:
  """Prints `text` and writes the --json, --plot and --markdown of `result` asked for,
  through `reporter` (`report` for the gamma sweep, `paper_report` for --paper-table)."""
  print(text)
  if args.json_path:
    reports.write_json(args.json_path, result)
  if args.plot:
    reporter.plot(result, args.plot)
  if args.markdown:
    reporter.write_markdown(result, args.markdown, args.plot)


def main(argv=None) -> int:
  args = parse_args(argv)
  try:  # a row timed zero times, or of no input, has no figure to report
    flags.check_bounds(args, BenchConfig)
  except ValueError as e:
    print(f'error: {e}', file=sys.stderr)
    return 2
  for flag, path in (('--json', args.json_path), ('--plot', args.plot),
                     ('--markdown', args.markdown)):
    problem = reports.unwritable(path) if path else None
    if problem:  # before the run, not after it
      print(f'error: {flag} {path}: {problem}', file=sys.stderr)
      return 2
  try:
    result = run_paper_table(args) if args.paper_table else run_bench(args)
  except (ValueError, FileNotFoundError) as e:
    print(f'error: {" ".join(str(e).split())}', file=sys.stderr)
    return 2
  if args.paper_table:
    _write(args, result, paper_report, paper_report.format_text(result))
  else:
    tables = (report.format_table(result), variant_report.format_variants(result),
              variant_report.format_trees(result))
    _write(args, result, report, '\n\n'.join(t for t in tables if t))
  return 0


if __name__ == '__main__':
  sys.exit(main())
