"""python -m specjax.evaluate: a seqio Task's metrics (BLEU, ROUGE) through seqio.Evaluator,
speculative and target alone side by side, with alpha and the speedup.

`python -m specjax.evaluate --task specjax_demo_ende --split test` evaluates the bundled demo
pair on the bundled demo test split. Needs seqio (and TensorFlow).
"""
from __future__ import annotations

import argparse
import json
import sys

from specjax.job.decode_job import DecodeJob
from specjax.job.task_eval import evaluate

_STATS = ('alpha', 'tokens_per_call', 'target_calls', 'tokens', 'seconds',
          'tokens_per_second')


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog='python -m specjax.evaluate',
      description='A seqio Task\'s metrics for the speculative decode and the target alone.',
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--task', required=True, help='a registered seqio Task (specjax_demo_ende, '
                 'wmt_t2t_ende_v003, cnn_dailymail_v002, or one your module registers)')
  p.add_argument('--split', default='test', help='the split to evaluate')
  p.add_argument('--max-examples', type=int, help='evaluate only the first n examples')
  p.add_argument('--target', default='demo_target', help='target registry name')
  p.add_argument('--draft', default='demo_draft', help='draft registry name')
  p.add_argument('--target-checkpoint', help='the target\'s checkpoint (any format)')
  p.add_argument('--draft-checkpoint', help='the draft\'s checkpoint (any format)')
  p.add_argument('--vocab', help='SentencePiece model (default: as python -m specjax.decode)')
  p.add_argument('--gamma', type=int, default=4, help='draft tokens per target call')
  p.add_argument('--temperature', type=float, default=0.0, help='0 is greedy')
  p.add_argument('--top-k', type=int, default=0, help='0 keeps every token')
  p.add_argument('--top-p', type=float, default=1.0, help='1 keeps every token')
  p.add_argument('--seed', type=int, default=0, help='sampling seed')
  p.add_argument('--batch-size', type=int, default=8, help='rows decoded at once')
  p.add_argument('--dtype', help='activation and cache dtype, e.g. bfloat16')
  p.add_argument('--json', action='store_true', help='print the result as one JSON object')
  return p.parse_args(argv)


def _print(r: dict) -> None:
  spec, base = r['speculative'], r['target']
  print(f'{r["task"]} {r["split"]}: {r["num_examples"]} examples, target {r["target_model"]}, '
        f'draft {r["draft_model"]}, gamma {r["gamma"]}, temperature {r["temperature"]}')
  for name in sorted(k for k in spec if k not in _STATS):
    print(f'  {name} {spec[name]:.2f} speculative, {base[name]:.2f} target alone')
  print(f'  alpha {spec["alpha"]:.3f}, {spec["tokens_per_call"]:.2f} tokens per target call')
  print(f'  {spec["tokens_per_second"]:.1f} tokens/s speculative vs '
        f'{base["tokens_per_second"]:.1f} tokens/s target alone: speedup '
        f'{r["speedup"]:.2f}x (both compiled before timing)')


def main(argv=None) -> int:
  args = parse_args(argv)
  job = DecodeJob(target=args.target, draft=args.draft,
                  target_checkpoint=args.target_checkpoint,
                  draft_checkpoint=args.draft_checkpoint, vocab=args.vocab, task=args.task,
                  split=args.split, gamma=args.gamma, temperature=args.temperature,
                  top_k=args.top_k, top_p=args.top_p, seed=args.seed,
                  batch_size=args.batch_size, dtype=args.dtype)
  try:
    result = evaluate(job, args.max_examples)
  except (ValueError, FileNotFoundError, OSError) as e:
    print(f'error: {" ".join(str(e).split())}', file=sys.stderr)
    return 2
  if args.json:
    print(json.dumps(result))
  else:
    _print(result)
  return 0


if __name__ == '__main__':
  sys.exit(main())
