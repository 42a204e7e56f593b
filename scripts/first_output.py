"""The time to a user's first output line of `python -m specjax.decode`, cold and warm.

    python scripts/first_output.py --json docs/first_output.json

Runs the main job's first command as a user would (`python -m specjax.decode`, its default
flags: the bundled sample sentences, `--gamma auto`) from a temporary working directory,
with a fresh specjax cache (SPECJAX_CACHE_DIR: a temporary folder) and no compile cache
setting of the user's (JAX_COMPILATION_CACHE_DIR and JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS
unset), and times from starting the process to its first translation line on stdout, and
to its exit. Standard output is unbuffered (PYTHONUNBUFFERED=1), as a terminal shows it
line by line. Each round runs, each in turn:

- first run: both caches empty (the compile cache and `--gamma auto`'s gamma_auto.json);
- second run: the same command again, both caches warm;
- second run, --no-compile-cache: the gamma choice cached, every program compiled again
  (what the compile cache saves, apart from the calibration the gamma cache saves);
- first run, --no-compile-cache (in a cache of its own): what keeping the programs costs
  the first run;
- and, in a cache of their own, a first and a second run with JAX's default minimum
  compile time (1 s) instead of specjax's 0 s (`specjax.compile_cache.MIN_COMPILE_SECONDS`):
  the programs that compile faster than that are not kept.

Writes the rounds, their medians and spreads as JSON and prints a markdown table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

from specjax import reports
from specjax.bench.report import machine_info

COMMAND = [sys.executable, '-m', 'specjax.decode']
# (name, the specjax cache it uses, extra flags, extra environment)
RUNS = (
    ('first run', 'cache', [], {}),
    ('second run', 'cache', [], {}),
    ('second run, --no-compile-cache', 'cache', ['--no-compile-cache'], {}),
    ('first run, --no-compile-cache', 'off', ['--no-compile-cache'], {}),
    ('first run, 1 s minimum compile time', 'jax-default',
     [], {'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '1'}),
    ('second run, 1 s minimum compile time', 'jax-default',
     [], {'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS': '1'}),
)
UNSET = ('JAX_COMPILATION_CACHE_DIR', 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS')


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument('--rounds', type=int, default=3, help='rounds of the six runs')
  p.add_argument('--json', help='write the results here (e.g. docs/first_output.json)')
  return p.parse_args(argv)


def timed_run(cwd: str, specjax_cache: str, flags, extra_env) -> dict:
  """One `python -m specjax.decode` run: seconds to its first stdout line and to its exit,
  and what its compile cache holds after it."""
  env = {k: v for k, v in os.environ.items() if k not in UNSET}
  env.update(SPECJAX_CACHE_DIR=specjax_cache, PYTHONUNBUFFERED='1', **extra_env)
  with open(os.devnull, 'w', encoding='utf-8') as devnull:
    start = time.perf_counter()
    proc = subprocess.Popen(COMMAND + flags, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=devnull, text=True)
    first = None
    lines = []
    for line in proc.stdout:
      if first is None:
        first = time.perf_counter() - start
      lines.append(line)
    code = proc.wait()
    total = time.perf_counter() - start
  if code:
    raise RuntimeError(f'{" ".join(COMMAND + flags)} exited {code}')
  xla = os.path.join(specjax_cache, 'xla')
  entries = [os.path.join(xla, n) for n in os.listdir(xla)] if os.path.isdir(xla) else []
  return {'first_line_seconds': round(first, 3), 'total_seconds': round(total, 3),
          'first_line': lines[0].rstrip('\n'), 'cache_entries': len(entries),
          'cache_bytes': sum(os.path.getsize(e) for e in entries)}


def spread(values) -> dict:
  return {'median': round(statistics.median(values), 2), 'min': round(min(values), 2),
          'max': round(max(values), 2)}


def table(result: dict) -> str:
  lines = ['| run | first output line (s) | total (s) | compile cache entries |',
           '|---|---|---|---|']
  for name, row in result['runs'].items():
    first, total = row['first_line_seconds'], row['total_seconds']
    lines.append(f'| {name} | {first["median"]:.1f} ({first["min"]:.1f}-{first["max"]:.1f}) | '
                 f'{total["median"]:.1f} ({total["min"]:.1f}-{total["max"]:.1f}) | '
                 f'{row["cache_entries"]} |')
  return '\n'.join(lines)


def main(argv=None) -> int:
  args = parse_args(argv)
  rounds = []
  for r in range(args.rounds):
    with tempfile.TemporaryDirectory(prefix='specjax-first-output-') as tmp:
      work = os.path.join(tmp, 'work')
      os.mkdir(work)
      measured = {}
      for name, cache, flags, extra_env in RUNS:
        measured[name] = timed_run(work, os.path.join(tmp, cache), flags, extra_env)
        print(f'round {r + 1}: {name}: first line {measured[name]["first_line_seconds"]:.1f} s, '
              f'total {measured[name]["total_seconds"]:.1f} s', file=sys.stderr)
      rounds.append(measured)
  result = {
      'command': 'python -m specjax.decode (default flags)',
      'machine': machine_info(),
      'rounds': rounds,
      'runs': {name: {'first_line_seconds': spread([m[name]['first_line_seconds']
                                                    for m in rounds]),
                      'total_seconds': spread([m[name]['total_seconds'] for m in rounds]),
                      'cache_entries': rounds[-1][name]['cache_entries'],
                      'cache_bytes': rounds[-1][name]['cache_bytes']}
               for name, *_ in RUNS},
  }
  if args.json:
    reports.write_json(args.json, result)
  print(table(result))
  return 0


if __name__ == '__main__':
  sys.exit(main())
