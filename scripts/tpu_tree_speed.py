"""Adds the token-tree rows of `python -m specjax.plan --speed` (section 8 of
docs/tpu_speed.md) to a finished run's rows without rerunning its grid, and checks that the
chain's programs still compile to the costs that run recorded.

    mkdir -p specjax_reports && cp docs/tpu_speed.json specjax_reports/
    python scripts/tpu_tree_speed.py --check chain_check.json   # needs libtpu, no TPU
    python -m specjax.plan --speed --resume --render
    cp specjax_reports/tpu_speed.md specjax_reports/tpu_speed.json docs/

The tree rows (`cli.run_trees` over the full grid's `trees`) go to
specjax_reports/tpu_speed.partial.json, which `--resume --render` reads. `--check PATH`
also recompiles the target's verify of K = 1..9 and its step at each tree batch, keeps
them as the rows' 'recompiled' kind (section 8 sets the trees beside these, compiled by the
same code; sections 1-7 keep the run's own rows) and writes each beside the recorded row
(bytes, flops and their ratios) to PATH.
"""
import argparse
import json
import sys

from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import cli, programs


def check_chain(grid: cli.Grid, backend: cli.Backend, store: cli.Store) -> list:
  """The target's chain verify (K = 1..9) and step recompiled beside the stored rows."""
  recorded = store.programs()
  out = []
  s = grid.tasks[0][1]
  for trees in grid.trees:
    for batch in trees.batches:
      rows = programs.measure_pair(
          T5_CONFIGS[trees.target], T5_CONFIGS[trees.draft], batch=batch, input_len=s,
          max_decode_len=grid.max_decode_len, mesh=backend.mesh(1), greedy=True,
          done=store.recompiled(),
          only=lambda m, p, k, t=trees.target: m == t and p in ('verify', 'step'))
      for row in rows:
        store.add(cli.RECOMPILED, row)
        old = recorded.get(row.key)
        item = dict(model=row.model, program=row.program, tokens=row.tokens, batch=batch,
                    bytes=row.bytes, flops=row.flops,
                    recorded_bytes=None if old is None else old.bytes,
                    recorded_flops=None if old is None else old.flops)
        if old is not None:
          item.update(bytes_ratio=row.bytes / old.bytes, flops_ratio=row.flops / old.flops)
        out.append(item)
        print(f'check B={batch} {row.program} K={row.tokens}: {row.bytes / 1e9:.6f} GB '
              f'{row.flops / 1e9:.3f} GFLOP; recorded '
              + ('none' if old is None else f'{old.bytes / 1e9:.6f} GB {old.flops / 1e9:.3f} '
                 f'GFLOP (bytes x{row.bytes / old.bytes:.4f})'), file=sys.stderr, flush=True)
  return out


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--rows', default='specjax_reports/tpu_speed.json',
                 help='the finished run\'s rows (its .partial.json is written beside)')
  p.add_argument('--check', default='', help='also recompile the chain and write it here')
  p.add_argument('--cpu', action='store_true', help='compile on this CPU (a dry run)')
  args = p.parse_args(argv)
  if not args.cpu:
    cli.prepare_tpu()
  grid = cli.QUICK if args.cpu else cli.FULL
  backend = cli.Backend(args.cpu)
  store = cli.Store(args.rows, resume=True)
  if args.check:
    with open(args.check, 'w', encoding='utf-8') as f:
      json.dump(check_chain(grid, backend, store), f, indent=1)
  cli.run_trees(grid, backend, store)
  return 0


if __name__ == '__main__':
  sys.exit(main())
