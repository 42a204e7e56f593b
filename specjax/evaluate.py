"""python -m specjax.evaluate: a seqio Task's metrics (BLEU, ROUGE) through seqio.Evaluator,
speculative and target alone side by side, with alpha and the speedup.

`python -m specjax.evaluate --task specjax_demo_ende --split test` evaluates the bundled demo
pair on the bundled demo test split. Needs seqio (and TensorFlow).
"""
from __future__ import annotations

from specjax import interrupt

if __name__ == '__main__':  # before the imports below, which take seconds
  interrupt.exit_at_once(lambda: 'nothing was written (evaluate prints its metrics at the end)')

import argparse  # pylint: disable=wrong-import-position
import json  # pylint: disable=wrong-import-position

from specjax import compile_cache, flags  # pylint: disable=wrong-import-position
from specjax.job.config import DecodeConfig  # pylint: disable=wrong-import-position
from specjax.job.task_eval import evaluate  # pylint: disable=wrong-import-position

_STATS = ('alpha', 'tokens_per_call', 'target_calls', 'tokens', 'seconds',
          'tokens_per_second')


# The decode config's fields evaluate reads; its other fields keep their defaults.
FIELDS = ('task', 'split', 'max_examples', 'target', 'draft', 'target_checkpoint',
          'draft_checkpoint', 'vocab', 'gamma', 'temperature', 'top_k', 'top_p', 'seed',
          'batch_size', 'dtype', 'compile_cache', 'use_compile_cache', 'json')


# evaluate decodes with the draft and gamma it is given: no --gamma auto, --draft auto or
# tree flags (python -m specjax.decode's).
HELPS = {
    'gamma': 'draft tokens per target call, an integer (--gamma auto is python -m '
             'specjax.decode\'s)',
    'draft': 'draft registry name (demo_draft, t5_small, manlm_draft, ...) or checkpoint '
             'directory, or a proposer with no draft model as python -m specjax.decode '
             '--help lists them (copy, bigram, copy+NAME, layerskip:M, medusa[:PATH], '
             'eagle[:PATH], rest[:DIR], suffix, rest+suffix, lookahead[:W,N,G], cascades), '
             'each verifying its chain of --gamma (lookahead its own tree, whose depth is '
             'the gamma); not auto'}


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog='python -m specjax.evaluate',
      description='A seqio Task\'s metrics for the speculative decode and the target alone.',
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, DecodeConfig, only=FIELDS, defaults={'gamma': 4}, required=('task',),
                  helps=HELPS)
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
  job = flags.from_args(DecodeConfig, parse_args(argv))
  try:
    with compile_cache.for_command(job.compile_cache, job.use_compile_cache):
      result = evaluate(job, job.max_examples)
  except (ValueError, FileNotFoundError, OSError) as e:
    interrupt.error_line(f'error: {" ".join(str(e).split())}')
    return 2
  if job.json:
    print(json.dumps(result))
  else:
    _print(result)
  return 0


if __name__ == '__main__':
  interrupt.finish(main())
