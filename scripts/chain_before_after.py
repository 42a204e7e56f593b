"""The chain's speed before and after a change of the decode's contract, measured in one
run: the bench's chain rows (`python -m specjax.bench`) of an earlier revision and of this
tree, alternating round by round on the same machine, so that a slow spell spoils both.

    python scripts/chain_before_after.py --before a9276bf --json docs/chain_before_after.json

The earlier revision is exported with `git archive` into a temporary folder and run from
there (`python -m` puts the working directory first on the path, so its own package is
the one imported). Per chain row (gamma, temperature): tokens per second after / before
in each round, their median and spread, and the speedup over the target alone that each
side measured in the same process.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ['--num-examples', '16', '--gammas', '2,4', '--temperatures', '0,1', '--rounds', '1',
         '--batch-size', '8']


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--before', required=True, help='the earlier git revision')
  p.add_argument('--rounds', type=int, default=3, help='alternating rounds of both benches')
  p.add_argument('--json', required=True, help='the results')
  return p.parse_args(argv)


def export(revision: str, into: str) -> str:
  """The tree of `revision`, exported into the folder `into`."""
  archive = subprocess.run(['git', '-C', str(ROOT), 'archive', revision], check=True,
                           capture_output=True).stdout
  subprocess.run(['tar', '-x', '-C', into], input=archive, check=True)
  return into


def bench(tree: str, out: str) -> dict:
  """One bench run from `tree`: {(gamma, temperature): row}."""
  env = dict(os.environ, PYTHONPATH=tree)
  subprocess.run([sys.executable, '-m', 'specjax.bench', '--json', out] + BENCH, cwd=tree,
                 env=env, check=True, stdout=subprocess.DEVNULL)
  rows = json.loads(pathlib.Path(out).read_text())['rows']
  return {f'gamma {r["gamma"]} T {r["temperature"]:g}': r for r in rows}


def main(argv=None) -> int:
  args = parse_args(argv)
  runs = {'before': [], 'after': []}
  with tempfile.TemporaryDirectory() as tmp:
    trees = {'before': export(args.before, tempfile.mkdtemp(dir=tmp)), 'after': str(ROOT)}
    for r in range(args.rounds):
      order = ('before', 'after') if r % 2 == 0 else ('after', 'before')
      for side in order:
        runs[side].append(bench(trees[side], os.path.join(tmp, f'{side}{r}.json')))
        print(f'round {r + 1}/{args.rounds}: {side} done', file=sys.stderr, flush=True)
  result = {'before': args.before, 'bench_args': BENCH, 'rounds': args.rounds, 'rows': {}}
  for key in runs['after'][0]:
    ratios = [a[key]['tokens_per_second'] / b[key]['tokens_per_second']
              for a, b in zip(runs['after'], runs['before'])]
    result['rows'][key] = {
        'ratio_median': statistics.median(ratios), 'ratio_min': min(ratios),
        'ratio_max': max(ratios),
        'tokens_per_second_before': [b[key]['tokens_per_second'] for b in runs['before']],
        'tokens_per_second_after': [a[key]['tokens_per_second'] for a in runs['after']],
        'speedup_before': [b[key]['speedup'] for b in runs['before']],
        'speedup_after': [a[key]['speedup'] for a in runs['after']],
        'tokens_per_call': [runs['before'][0][key]['tokens_per_call'],
                            runs['after'][0][key]['tokens_per_call']]}
    row = result['rows'][key]
    print(f'{key}: after/before tokens/s {row["ratio_median"]:.3f} '
          f'({row["ratio_min"]:.3f}-{row["ratio_max"]:.3f} over {args.rounds} rounds)')
  pathlib.Path(args.json).write_text(json.dumps(result, indent=1) + '\n')
  return 0


if __name__ == '__main__':
  sys.exit(main())
