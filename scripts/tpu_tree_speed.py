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

`--compaction PATH` compiles instead, in one run, each tree's whole iteration
(`tree_steps.tree_step`) three times: with the accepted-path move of an earlier version
(`window_compact` below: a per-row slice of the N-slot window, a pick and an update of
the window), with `tree.compact` as it is, and with no move at all, and each move alone on
the target's and the draft's caches; the move's share of the iteration is
(iteration - iteration without the move) / iteration. It writes the rows to PATH (as its
'tree_compaction' where PATH holds a report's rows, docs/tpu_speed.json) and prints a
markdown table.
"""
import argparse
import json
import sys

import jax
import jax.numpy as jnp

from specjax.core import tree
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import cli, programs
from specjax.speed.roofline import cost_of

TPU_V4_BANDWIDTH = 1.2e12  # bytes per second: the roofline ms of docs/tpu_speed.md


def window_compact(cache, axes, base, path, n, num_nodes):
  """The accepted-path move before `tree.compact` wrote D slots in place (kept here to
  compile beside it): per row, a slice of the N-slot window after the root, a pick of the
  D path slots from it and an update of the whole window. Arguments as `tree.compact`."""
  depth = path.shape[1]
  keep = jnp.arange(depth)[None] < n[:, None]  # [B, D]
  source = jnp.where(keep, path, jnp.arange(depth)[None])  # [B, D]

  def leaf(array, names):
    axis = names.index('length')
    moved = jnp.moveaxis(array, axis, -1)  # [B, ..., T]

    def row(r, start, src):
      window = jax.lax.dynamic_slice_in_dim(r, start + 1, num_nodes, -1)  # [..., N]
      picked = jnp.take(window, jnp.clip(src, 0, num_nodes - 1), axis=-1)  # [..., D]
      return jax.lax.dynamic_update_slice_in_dim(r, picked, start + 1, -1)
    return jnp.moveaxis(jax.vmap(row)(moved, base, source), -1, axis)

  is_axes = lambda x: isinstance(x, tuple) and all(isinstance(a, str) for a in x)
  flat_axes = jax.tree.leaves(axes, is_leaf=is_axes)
  leaves, treedef = jax.tree.flatten(cache)
  return jax.tree.unflatten(treedef, [leaf(a, names) for a, names in zip(leaves, flat_axes)])


def no_compact(cache, axes, base, path, n, num_nodes):
  """No move at all (not a decode: the baseline the move's share is taken against)."""
  del axes, base, path, n, num_nodes
  return cache


MOVES = (('before', window_compact), ('after', tree.compact), ('none', no_compact))


def measure_compaction(grid: cli.Grid, backend: cli.Backend, shapes=None) -> list:
  """Each tree iteration (and each cache's move alone) compiled with each of `MOVES`."""
  out = []
  s_len = grid.tasks[0][1]
  real = tree.compact
  for trees in grid.trees:
    target_cfg, draft_cfg = T5_CONFIGS[trees.target], T5_CONFIGS[trees.draft]
    for batch in trees.batches:
      setting = programs.Setting(
          T5(target_cfg.replace(dtype='bfloat16')), T5(draft_cfg.replace(dtype='bfloat16')),
          batch, s_len, grid.max_decode_len, backend.mesh(1), True, 'bfloat16')
      for branching in shapes or trees.shapes:
        shape = tree.TreeShape(tuple(branching))
        num, depth = shape.num_nodes, shape.depth_count
        state = setting.abstract(depth, shape)['run'].state
        index = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=state.pos.sharding)
        path = jax.ShapeDtypeStruct((batch, depth), jnp.int32, sharding=state.pos.sharding)
        for label, move in MOVES:
          tree.compact = move  # tree_steps and the draft's proposer call it through `tree`
          try:
            rows = programs.tree_fns(setting, [branching],
                                     lambda m, p, k: p == 'tree_iteration')
            for _, _, _, fn, args, donate in rows:
              compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
          finally:
            tree.compact = real
          cost = cost_of(compiled)
          item = dict(batch=batch, nodes=num, shape=list(branching), move=label,
                      program='tree_iteration', bytes=cost.bytes, flops=cost.flops)
          out.append(item)
          print(json.dumps(item), file=sys.stderr, flush=True)
          if label == 'none':
            continue
          for who, model, cache, nodes in (
              ('target', setting.target, state.target_cache, num),
              ('draft', setting.draft, state.draft_cache, num)):
            fn = lambda c, b, p, k, model=model, nodes=nodes, move=move: move(
                c, model.cache_axes(), b, p, k, nodes)
            compiled = jax.jit(fn, donate_argnums=(0,)).lower(cache, index, path,
                                                              index).compile()
            cost = cost_of(compiled)
            item = dict(batch=batch, nodes=num, shape=list(branching), move=label,
                        program=f'move {who} cache', bytes=cost.bytes, flops=cost.flops)
            out.append(item)
            print(json.dumps(item), file=sys.stderr, flush=True)
        jax.clear_caches()
  return out


def compaction_table(rows: list) -> str:
  """The markdown table of `measure_compaction`'s rows (roofline ms at TPU v4's HBM
  bandwidth; every program here is memory-bound)."""
  by = {(r['batch'], r['nodes'], r['move'], r['program']): r['bytes'] for r in rows}
  ms = lambda b: b / TPU_V4_BANDWIDTH * 1e3
  lines = ['| B | tree | move | iteration GB | iteration ms | move, target cache GB | '
           'move, draft cache GB | move share of the iteration |',
           '|---|---|---|---|---|---|---|---|']
  for (batch, nodes, move, program), value in sorted(by.items()):
    if program != 'tree_iteration' or move == 'none':
      continue
    base = by[(batch, nodes, 'none', 'tree_iteration')]
    lines.append(
        f'| {batch} | N={nodes} | {move} | {value / 1e9:.3f} | {ms(value):.3f} | '
        f'{by[(batch, nodes, move, "move target cache")] / 1e9:.3f} | '
        f'{by[(batch, nodes, move, "move draft cache")] / 1e9:.4f} | '
        f'{(value - base) / value:.3f} |')
  return '\n'.join(lines)


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
  p.add_argument('--compaction', default='',
                 help='compile the iterations with the move before, after and without '
                 '(nothing else) and write the rows here')
  p.add_argument('--shapes', default='',
                 help="with --compaction: the trees, e.g. '2,1,1,1;4,1,1,1' (default: "
                 "the grid's)")
  args = p.parse_args(argv)
  if not args.cpu:
    cli.prepare_tpu()
  grid = cli.QUICK if args.cpu else cli.FULL
  backend = cli.Backend(args.cpu)
  if args.compaction:
    shapes = [tuple(int(b) for b in part.split(',')) for part in args.shapes.split(';')
              ] if args.shapes else None
    rows = measure_compaction(grid, backend, shapes)
    try:  # a report's rows (docs/tpu_speed.json) take them as their 'tree_compaction'
      with open(args.compaction, encoding='utf-8') as f:
        old = json.load(f)
    except (OSError, ValueError):
      old = None
    data = dict(old, tree_compaction=rows) if isinstance(old, dict) else rows
    with open(args.compaction, 'w', encoding='utf-8') as f:
      json.dump(data, f, indent=1)
    print(compaction_table(rows))
    return 0
  store = cli.Store(args.rows, resume=True)
  if args.check:
    with open(args.check, 'w', encoding='utf-8') as f:
      json.dump(check_chain(grid, backend, store), f, indent=1)
  cli.run_trees(grid, backend, store)
  return 0


if __name__ == '__main__':
  sys.exit(main())
