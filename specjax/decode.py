"""python -m specjax.decode: speculative decoding from the command line.

With no flags it translates the bundled English sample sentences into German with the
bundled demo pair and reports what speculative decoding gained over the target alone.
On Cloud TPU: `python -m specjax.decode --target t5_xxl --draft t5_small --input in.txt`.
"""
from __future__ import annotations

import argparse
import json
import sys

import jax
from tqdm import tqdm

from specjax.parallel import mesh as mesh_lib
from specjax.job import task_data
from specjax.job.decode_job import DecodeJob, run
from specjax.job.output import open_output


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog='python -m specjax.decode',
      description='Exact speculative decoding: a draft proposes gamma tokens, the target '
                  'checks them in one call; the output is the target\'s own.',
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--target', default='demo_target', help='target registry name (demo_target, '
                 't5_xxl, t5_1_0_11b, ...) or checkpoint directory (a Hugging Face Llama, '
                 'GPT-2 or T5 directory, T5X, orbax)')
  p.add_argument('--draft', default='demo_draft', help='draft registry name (demo_draft, '
                 't5_small, ...) or checkpoint directory; copy: copy from the input; bigram: '
                 'the target\'s bigram table (bundled for demo_target, else --draft-checkpoint '
                 'TABLE.npz); copy+NAME: copy where the output repeats the input, the model NAME '
                 'elsewhere')
  p.add_argument('--target-checkpoint', help='T5X, Hugging Face or orbax checkpoint of the '
                 'target (default: bundled for demo_*, the public T5X one on GCS for t5_*)')
  p.add_argument('--draft-checkpoint', help='checkpoint of the draft (defaults as above)')
  p.add_argument('--vocab', help='SentencePiece model or tokenizer.json (default: bundled '
                 'for demo_*, the tokenizer in a checkpoint directory, '
                 'gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model for t5_*)')
  p.add_argument('--draft-vocab', help='the draft\'s vocabulary, if stored apart; it must '
                 'equal the target\'s')
  p.add_argument('--input', help='text file (one input per line, or JSONL with an "inputs" '
                 'field); - for stdin (default: the bundled sample sentences)')
  p.add_argument('--input-format', default='auto', choices=('auto', 'text', 'jsonl'),
                 help='auto: JSONL when every non-empty line is a JSON object with an '
                 '"inputs" string, else one text per line')
  p.add_argument('--errors', default='strict', choices=('strict', 'replace'),
                 help='input bytes that are not UTF-8: stop naming the line, or replace them')
  p.add_argument('--task', help='decode a seqio Task\'s split instead of --input, and '
                 'report its metrics (e.g. specjax_demo_ende; needs seqio)')
  p.add_argument('--split', default='test', help='the --task split to decode')
  p.add_argument('--output', help='write one JSON line per input, in input order, as each '
                 'batch finishes (inputs, input_line, prediction, stats); rerunning the same '
                 'command after an interruption resumes where it stopped')
  p.add_argument('--prefix', help='task prefix added to inputs that lack it (default: '
                 '"translate English to German: " for the demo pair, none otherwise)')
  p.add_argument('--gamma', default='auto', help='draft tokens per target call (an integer, '
                 'or "auto": measure c, v(K) and alpha at this batch size, pick the gamma the '
                 'formula predicts fastest, and fall back to the target alone (gamma 0) when '
                 'that measures slower)')
  p.add_argument('--verification', default='token', choices=('token', 'block'),
                 help='token: the paper\'s rule, each draft token in turn; block: block '
                 'verification, which keeps at least as many tokens per call; both exact')
  p.add_argument('--draft-threshold', type=float, default=0.0, help='per-row dynamic gamma: '
                 'a row stops drafting at its first token the draft gives less than this '
                 'probability (0: always gamma tokens); the target then scores only as far as the '
                 'longest proposal; exact')
  p.add_argument('--threshold-rule', default='token', choices=('token', 'cumulative'),
                 help='what --draft-threshold is compared with: token, each draft token\'s '
                 'own probability (as Hugging Face\'s assistant_confidence_threshold); '
                 'cumulative, their product over the row\'s proposals so far (the draft\'s '
                 'estimate that all are accepted)')
  p.add_argument('--lenience', type=float, default=1.0, help='sampled decoding only: accept '
                 'when r*lenience*q < p; below 1 the output no longer follows the target\'s '
                 'distribution (lossy, faster)')
  p.add_argument('--temperature', type=float, default=0.0, help='0 is greedy')
  p.add_argument('--top-k', type=int, default=0, help='0 keeps every token')
  p.add_argument('--top-p', type=float, default=1.0, help='1 keeps every token')
  p.add_argument('--seed', type=int, default=0, help='sampling seed')
  p.add_argument('--batch-size', type=int, default=8, help='rows decoded at once')
  p.add_argument('--no-refill', action='store_true', help='decode fixed batches, each '
                 'running until its slowest row is done (default: a finished row takes the '
                 'next input at once, on a mesh too)')
  p.add_argument('--max-input-len', type=int, default=64, help='encoder length; longer '
                 'inputs are an error unless --truncate-inputs')
  p.add_argument('--truncate-inputs', action='store_true', help='cut inputs longer than '
                 '--max-input-len instead of failing')
  p.add_argument('--pad-inputs', default='bucket', choices=('bucket', 'max'),
                 help='bucket: pad each batch to the smallest power of two (>= 8) that fits '
                 'its longest input, one compilation per width; max: pad every batch to '
                 '--max-input-len, one compilation (T5X\'s fixed feature lengths)')
  p.add_argument('--max-decode-len', type=int, default=64, help='most tokens per output')
  p.add_argument('--dtype', help='activation and cache dtype, e.g. bfloat16')
  p.add_argument('--param-dtype', default='float32', choices=('float32', 'bfloat16'),
                 help='dtype params are held in; bfloat16 halves their memory (T5-XXL on '
                 'one TPU v4 chip needs it)')
  p.add_argument('--num-partitions', type=int, help='shard over all devices: N-way model '
                 'parallel (T5X num_partitions), data parallel over the rest')
  p.add_argument('--mesh', help='explicit mesh instead, e.g. data=2,model=4 (sizes may use '
                 'fewer than all devices)')
  p.add_argument('--parameter-partitioning-dims', type=int, default=1, choices=(1, 2),
                 help='2 also shards the params\' embed axis over data (T5X 2-D params)')
  p.add_argument('--multihost', action='store_true', help='call jax.distributed.initialize() '
                 'first (automatic on a multi-host TPU pod slice); run on every host')
  p.add_argument('--no-compare', action='store_true', help='skip the target-only decode '
                 '(no speedup and no identity check in the summary)')
  p.add_argument('--json', action='store_true', help='print the summary as one JSON object')
  p.add_argument('--quiet', action='store_true', help='no progress bar, no translations')
  return p.parse_args(argv)


def _job(args: argparse.Namespace) -> DecodeJob:
  if args.gamma != 'auto':
    try:
      gamma = int(args.gamma)
    except ValueError:
      raise ValueError(f'--gamma must be an integer >= 1 or "auto", got {args.gamma!r}') from None
  else:
    gamma = 'auto'
  return DecodeJob(
      target=args.target, draft=args.draft, target_checkpoint=args.target_checkpoint,
      draft_checkpoint=args.draft_checkpoint, vocab=args.vocab, draft_vocab=args.draft_vocab,
      input=args.input, input_format=args.input_format, errors=args.errors,
      task=args.task, split=args.split,
      output=args.output, prefix=args.prefix, gamma=gamma,
      verification=args.verification, draft_threshold=args.draft_threshold,
      threshold_rule=args.threshold_rule,
      lenience=args.lenience,
      temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed,
      batch_size=args.batch_size, max_input_len=args.max_input_len,
      max_decode_len=args.max_decode_len, truncate_inputs=args.truncate_inputs,
      pad_inputs=args.pad_inputs, refill=not args.no_refill,
      compare=not args.no_compare, dtype=args.dtype, param_dtype=args.param_dtype,
      progress=not args.quiet,
      num_partitions=args.num_partitions, mesh=args.mesh,
      parameter_partitioning_dims=args.parameter_partitioning_dims)


def _print_summary(s: dict) -> None:
  print(f'\n{s["num_examples"]} examples, target {s["target"]}, draft {s["draft"]}, '
        f'gamma {s["gamma"]}, temperature {s["temperature"]}')
  if s.get('gamma_reason'):
    print(f'  gamma: {s["gamma_reason"]}')
  rule = [f'{s["verification"]} verification'] + (
      [f'draft threshold {s["draft_threshold"]} ({s.get("threshold_rule", "token")})']
      if s['draft_threshold'] else [])
  if s['gamma'] != 0:  # gamma 0: the target alone decoded, no rule applied
    print(f'  {", ".join(rule)}')
  if s['lenience'] < 1:
    print(f'  lenience {s["lenience"]}: NOT exact, the outputs do not follow the target\'s '
          'distribution (lenience 1 is exact)')
  if s.get('resumed'):
    print(f'  resumed: {s["resumed"]} inputs were already in the output, {s["decoded"]} '
          'decoded now')
  if not s['decoded']:
    return
  if s['gamma'] == 0:
    print(f'  the target alone decoded (gamma 0): {s["generated_tokens"]} tokens from '
          f'{s["batched_target_calls"]} batched calls of the model')
  else:
    print(f'  alpha {s["alpha"]:.3f}, {s["tokens_per_call"]:.2f} tokens per target call: '
          f'{s["generated_tokens"]} tokens from {s["target_calls"]} per-row target calls '
          f'({s["batched_target_calls"]} batched calls of the model)')
  if s['gamma'] == 0:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s, the target alone\'s (speedup 1.00x: '
          'speculation was not faster here)')
  elif s['speedup'] is None:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s speculative')
  else:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s speculative vs '
          f'{s["baseline_tokens_per_second"]:.1f} tokens/s target alone: speedup '
          f'{s["speedup"]:.2f}x (both compiled before timing)')
  widths = s.get('input_widths') or []
  print(f'  inputs padded to width {", ".join(map(str, widths))}: {len(widths)} '
        f'compilation{"s" if len(widths) > 1 else ""}, {s["compile_seconds"]:.1f} s')
  if s['identical_to_target'] is not None:
    print(f'  identical to the target\'s own greedy output: {s["identical_to_target"]}')
  for name, value in (s.get('metrics') or {}).get('speculative', {}).items():
    alone = s['metrics'].get('target', {}).get(name)
    print(f'  {name} {value:.2f} speculative, '
          f'{"n/a" if alone is None else format(alone, ".2f")} target alone')


def main(argv=None) -> int:
  args = parse_args(argv)
  # Before anything touches a device; then only host 0 of a pod writes and prints.
  primary = not mesh_lib.init_distributed(args.multihost) or jax.process_index() == 0
  output = None
  try:
    job = _job(args)
    job.progress = job.progress and primary
    output = open_output(job.output) if primary else None

    records = []

    def on_record(record):
      if job.task:
        records.append(record)
      if not args.json and not args.quiet and primary:
        tqdm.write(f'{record["inputs"]}\n  -> {record["prediction"]}')  # above the bar

    summary = run(job, on_record, output)
    if job.task and primary:
      summary['metrics'] = task_data.record_metrics(job.task, records)
  except (ValueError, FileNotFoundError, OSError) as e:
    print(f'error: {" ".join(str(e).split())}', file=sys.stderr)
    return 2
  except KeyboardInterrupt:
    where = (f'{output.written} inputs are in {output.path}; rerun the same command to resume'
             if output is not None else 'nothing was written (no --output)')
    print(f'interrupted: {where}', file=sys.stderr)
    return 130
  finally:
    if output is not None:
      output.close()
  if not primary:
    return 0
  if args.json:
    print(json.dumps(summary))
  else:
    _print_summary(summary)
  return 0


if __name__ == '__main__':
  sys.exit(main())
