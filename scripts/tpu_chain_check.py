"""The compile-only TPU v4 cost of the T5-XXL chain's verify and whole iteration, to compare
two revisions of the decode: run it under each (the earlier one exported with `git
archive` and put first on PYTHONPATH) and compare the JSON files.

    python scripts/tpu_chain_check.py --json after.json           # needs libtpu, no TPU
    PYTHONPATH=/tmp/before python scripts/tpu_chain_check.py --json before.json
    python scripts/tpu_chain_check.py --compare before.json after.json

One chip (one compile-only core), greedy, S = 128, L = 128, bfloat16, the programs of
`specjax.speed.programs.program_fns` (as `python -m specjax.plan --speed` compiles them).
"""
import argparse
import json
import sys

from specjax.speed import cli

PROGRAMS = {('verify', 4), ('verify', 9), ('iteration', 7)}


def measure(args) -> dict:
  cli.prepare_tpu()
  import jax  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import T5_CONFIGS  # pylint: disable=import-outside-toplevel
  from specjax.speed import programs  # pylint: disable=import-outside-toplevel
  from specjax.speed.roofline import cost_of  # pylint: disable=import-outside-toplevel
  mesh = cli.Backend(cpu=False).mesh(1)
  model = lambda name: T5(T5_CONFIGS[name].replace(dtype='bfloat16'))
  s = programs.Setting(model('t5_xxl'), model('t5_small'), args.batch, 128, 128, mesh, True,
                       'bfloat16')
  want = lambda m, p, k: (p, k) in PROGRAMS and (p == 'iteration' or m == 't5_xxl')
  out = {}
  for name, program, tokens, fn, fn_args, donate in programs.program_fns(s, want):
    cost = cost_of(jax.jit(fn, donate_argnums=donate).lower(*fn_args).compile())
    out[f'{name} {program} {tokens} B={args.batch}'] = {'bytes': cost.bytes,
                                                         'flops': cost.flops}
    print(f'{name} {program} {tokens}: {cost.bytes / 1e9:.4f} GB', file=sys.stderr, flush=True)
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  p.add_argument('--json', help='write the costs here')
  p.add_argument('--batch', type=int, default=1)
  p.add_argument('--compare', nargs=2, metavar=('BEFORE', 'AFTER'),
                 help='print after / before of each program\'s bytes and flops')
  args = p.parse_args(argv)
  if args.compare:
    before, after = (json.load(open(path, encoding='utf-8')) for path in args.compare)
    for key in sorted(set(before) & set(after)):
      b, a = before[key], after[key]
      print(f'{key}: bytes {a["bytes"] / b["bytes"]:.4f}, flops {a["flops"] / b["flops"]:.4f} '
            '(after / before)')
    return 0
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump(measure(args), f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
