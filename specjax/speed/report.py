"""docs/tpu_speed.md: the speed plan rendered (method, excess traffic, T5X beside ours, the
paper's table predicted beside measured, v(K), gamma, batch 8 and 32, token trees, what it
leaves out).

`render` returns the markdown and a summary dict (the predictions as numbers, also written
to the .json); the tables of predictions are built in `report_tables`.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS
from specjax.speed import report_tables as tables
from specjax.speed import tree_tables
from specjax.speed import paper, roofline, t5x_peer, traffic
from specjax.speed.programs import ProgramRow, cast_floats
from specjax.speed.roofline import V4_CHIP


@dataclasses.dataclass(frozen=True)
class Context:
  """How the rows were made.

  Attributes:
    command: the command line.
    date: ISO date.
    versions: jax (and libtpu) versions.
    backend: 'tpu' (compile-only TPU v4) or 'cpu'.
    quick: the tiny grid.
    grid: the `cli.Grid` run.
    seconds: compile time of every row, added (parallel or resumed runs included).
    before_path: the .json of the excess-traffic rows of the previous code, or ''.
  """

  command: str
  date: str
  versions: str
  backend: str
  quick: bool
  grid: Any
  seconds: float
  before_path: str = ''


_METHOD = """\
Every number below is a prediction from programs compiled for TPU v4 without a TPU:
`jax.jit(...).lower(ShapeDtypeStruct...).compile()` for compile-only TPU v4 cores (libtpu,
`jax.experimental.topologies`), no weights loaded, and each program's
`cost_analysis()`: bytes accessed and flops per device. The programs are those
`specjax.speculative_decode` runs (`specjax/speed/programs.py`): the target's cached
verify of K = 1..9 tokens (`steps.verify`), each model's one-token step with its pick
(`steps.draft_step`), the draft's first two-token call of a block, the encoders, one whole
loop iteration (`steps.speculative_step`: draft block, verify, accept, commit) at gamma 1
and 7, and one iteration of the target alone (`steps.autoregressive_step`); params,
activations and caches in bfloat16, caches and loop state donated as the loop donates
them, input length S ({inputs}), L = {max_decode_len} decoded tokens (caches of 1 + L + 7 +
1 positions). CNN/DM's articles run at 512 input tokens in tpu/paper_table.sh; planned
at S = 128 here: at 512 its cross-attention K/V would add about 1.3% to a T5-XXL call's
bytes and 5% to a t5_small step's.

- Time of a program: the roofline max(bytes accessed / HBM bandwidth, flops / peak bf16
  FLOP/s) of a TPU v4 chip: {flops:.0f} TFLOP/s and {bandwidth:.0f} GB/s (source: {source}). One
  chip: the program compiled for one compile-only TensorCore, timed with the chip's figures
  (megacore: a chip runs one program on both cores). v4-8 (4 chips): the program sharded
  over the 8 cores with T5X's logical axis rules (model-parallel), each core timed with
  half a chip's figures. XLA's own `optimal_seconds` is shown where it is positive: it
  is the time of one core without megacore, with its own efficiency factors, so it comes
  out about 2.5x the chip's roofline for a memory-bound step.
- Programs are compiled with `LIBTPU_INIT_ARGS={flags}`: with libtpu's default, weights
  are staged through CMEM (v4's 128 MiB on-chip memory) by async copies that the cost
  analysis counts as accesses too, and `optimal_seconds` comes back negative. Without CMEM
  every byte counted is an HBM byte.
- XLA's cost analysis counts a loop body once: an iteration of gamma G is costed as the
  draft's first call + (G - 1) draft steps + the verify of G + 1 + the loop's own work,
  the latter being what the compiled iteration holds beyond its parts (measured at gamma
  1 and 7, linear in between). c = t(draft step) / t(target step) is the paper's c; v(K)
  = t(K-token verify) / t(1-token verify). The predicted speedup is
  `theory.speedup(alpha, G, c', v')` with c' = t(draft step) / t(target alone) and
  v' = (t(iteration) - G t(draft step)) / t(target alone): E(alpha, G) t(target alone) /
  t(iteration), against the target alone in the same loop.
"""

_LEAVES_OUT = """\
## What the cost model leaves out

The roofline is an ideal bound per program: every byte at full HBM bandwidth and every
flop at peak, nothing else. It leaves out the time between programs and around them (the
launch of each compiled call and the host's part, zero inside the one jitted loop the
decode is, but not so for a loop driven from Python like T5X's), the while loop's own
control flow (its condition, the carried state's copies at the loop boundary), collective
communication on v4-8 (two all-reduces of [B, K, D] per layer under model parallelism:
latency that a memory-bound batch-1 step does not hide), the overlap the real schedule
does or does not reach between memory and compute inside a program, the CMEM that could
keep a small draft's weights on chip across its G steps (t5_small's 77 M bfloat16 decoder
weights fit its 128 MiB), and the fact that real outputs end inside their last block (the
formula's E assumes outputs without end). `python -m specjax.bench` measures these
factors on a CPU (docs/benchmarks.md): x tokens (E lost to outputs ending inside a block,
0.74-0.95 there, a property of the outputs, not of the chip, so it carries over), x calls
and x loop (calls run alternating in the loop vs alone, and the loop's own work: 0.7-1.0
on a CPU whose caches the two models evict from each other). The CPU's efficiency (0.6-0.8)
is therefore a pessimistic correction for a TPU: multiply a prediction here by the x tokens
of the task's output lengths (`theory.tokens_per_iteration_at_lengths`) for a first
correction, and measure the rest on a TPU (`bash tpu/speed_bench.sh`, below).
"""

_MEASURED = """\
## The measured counterpart

`bash tpu/speed_bench.sh` runs `python -m specjax.speed` on the TPU VM and copies
`results/tpu_speed_measured.json` back: the same programs (`programs.program_fns`), timed
on the chip with random weights and caches (`--init random`), and from those times the
same columns (c, v(K) for K = 1..9, the loop's share at gamma 1 and 7, the target alone's
time per token and the speedup over gamma 1..8 at the paper's alphas), keyed like the rows
here (target, draft, B, S, temperature), so that a prediction and its measurement sit side
by side. `bash
tpu/paper_table.sh` measures the end-to-end speedups of the table above.
"""


def _gb(n: float) -> str:
  return f'{n / 1e9:.3f}'


def _ms(seconds: Optional[float]) -> str:
  return '' if seconds is None else f'{seconds * 1e3:.3f}'


def _traffic_section(before: Sequence[traffic.StepTraffic],
                     after: Sequence[traffic.StepTraffic], before_path: str) -> str:
  old = {(t.model, t.tokens, t.batch): t for t in before}
  lines = ['## 1. Excess traffic: what one decode step reads', '',
           'A cached decode call of K tokens must read the decoder weights once (all but the '
           'cross-attention key/value kernels, used once per input by `encode`; the embedding '
           'only where the logits are tied to it), the self-attention caches and the '
           'cross-attention K/V, and write its float32 logits (`specjax/speed/traffic.py`). '
           'Bytes accessed of `T5.decode` compiled for one device, cache donated, '
           'bfloat16, batch B' + (f', input {after[0].input_len}, cache {after[0].cache_len}'
                                  if after else '') + ':', '']
  head = ('| model | K | B | must access GB | accessed GB | ratio | GFLOP |'
          + (' before: accessed GB | before: ratio |' if old else ''))
  lines += [head, '|' + '---|' * (head.count('|') - 1)]
  for t in after:
    cells = [t.model, str(t.tokens), str(t.batch), _gb(t.needed), _gb(t.accessed),
             f'{t.ratio:.3f}', f'{t.flops / 1e9:.2f}']
    prev = old.get((t.model, t.tokens, t.batch))
    if old:
      cells += [_gb(prev.accessed), f'{prev.ratio:.3f}'] if prev else ['', '']
    lines.append('| ' + ' | '.join(cells) + ' |')
  if old:
    lines += ['', f'"Before" is the same extraction run on the products as they were before '
              f'this change (`{before_path}`): the logits table promoted to float32 in every '
              'step, the query/key/value kernels reshaped to [D, N, H] (TPU relayouted them '
              'each step), the decoder bias gathered from its table, and one row\'s K-token '
              'cache write vmapped into a scatter. After: every product reads its weight as '
              'stored and accumulates in float32 (`preferred_element_type`), the heads split '
              'off the product\'s output, the bias built by comparisons and a one-hot '
              'product, one dynamic-update-slice per cache leaf; the new keys and values '
              'projected T-minor on TPU ([N*H, K] products) so that they enter the cache '
              'without a relayout copy, the attention output contracted with the out kernel as '
              '[B, N, K, H] (two relayouts of it per call fewer), the decoder bias kept in the '
              'table\'s dtype (exact: each entry is one table entry).']
  lines += ['', 'What remains above 1.0 is mostly the caches: TPU stores [B, N, H, T] '
            'caches in (8, 128) tiles, so a cache of 137 positions occupies 256. In t5_small\'s '
            'K = 8 step (the optimised HLO read op by op, and each part removed in turn) the '
            '16 cache writes cost about 5 MB of its 11 MB excess: a dynamic-update-slice of 8 '
            'positions at an unknown offset is charged the two 128-position tiles it may '
            'straddle (here the whole padded leaf) plus its update padded to 128 positions. '
            'The attention\'s reads of the padded caches add about 1.5 MB, the float32 scores '
            '(written once, read twice by the softmax) about 2 MB, the rest is the query\'s '
            'split into heads and small activations. Against weights of gigabytes (T5-XXL) '
            'this is a few percent; against t5_small\'s 80 MB it is more.', '']
  return '\n'.join(lines)


def weight_bytes(name: str, dtype: str = 'bfloat16') -> Tuple[int, int]:
  """(bytes of all the model's weights, bytes a decode step must read) in dtype."""
  cfg = T5_CONFIGS[name]
  shapes = cast_floats(jax.eval_shape(T5(cfg).init, jax.random.PRNGKey(0)), dtype)
  total = sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(shapes))
  return total, traffic.needed_weights(shapes, cfg)


def _alone_section(ctx: Context, rows: Mapping[tuple, ProgramRow],
                   summary: Dict[str, Any]) -> str:
  grid = ctx.grid
  lines = ['## 2. The target alone on one v4 chip: time per token against weight streaming',
           '', 'The weight-streaming bound is the bytes of the bfloat16 weights a decode step '
           'must read over one chip\'s HBM bandwidth; "ours" is one iteration of the target '
           'alone in our loop (greedy, batch 1, EnDe input), "T5X" real T5X\'s decode step '
           'at the same shapes (below).', '',
           '| target | all weights GB | step weights GB | bound ms/token | ours ms/token | '
           'ours / bound | T5X ms/token | T5X / ours |', '|---|---|---|---|---|---|---|---|']
  s = grid.tasks[0][1]
  for target, _, _ in grid.pairs:
    total, step = weight_bytes(target)
    bound = step / roofline.V4_CHIP_HBM_BYTES_PER_S
    alone = rows.get((target, 'alone', 0, 1, s, grid.max_decode_len, (1, 1), True))
    if alone is None:
      continue
    ours = alone.cost.seconds(V4_CHIP)
    peer = t5x_peer.measured(rows, target, 1, s, grid.max_decode_len, (1, 1))
    theirs = peer.cost.seconds(V4_CHIP) if peer else None
    summary.setdefault('alone', {})[target] = dict(
        weights_bytes=total, step_weight_bytes=step, bound_seconds=bound,
        ours_seconds=ours, t5x_seconds=theirs)
    lines.append(f'| {target} | {_gb(total)} | {_gb(step)} | {_ms(bound)} | {_ms(ours)} | '
                 f'{ours / bound:.3f} | {_ms(theirs)} | '
                 f'{"" if theirs is None else f"{theirs / ours:.2f}"} |')
  return '\n'.join(lines) + '\n'


def _peer_section(ctx: Context, rows: Mapping[tuple, ProgramRow]) -> str:
  grid = ctx.grid
  lines = ['## 3. Real T5X\'s decode step beside ours (one chip)', '',
           'T5X\'s `EncoderDecoderModel._compute_logits_from_slice` (the `tokens_to_logits` of '
           'its `temperature_sample`) over the examples/t5 network of real T5X, bfloat16, '
           f'its cache of L = {grid.max_decode_len} positions, compiled the same way '
           '(`specjax/speed/t5x_peer.py`). T5X recomputes the cross-attention K/V from the '
           'encoder output in every step; ours projects them once per input.', '',
           '| model | B | S | program | GB accessed | GFLOP | roofline ms | XLA ms (one core) | '
           'bound |',
           '|---|---|---|---|---|---|---|---|---|']
  found = False
  for model, batch, s in grid.peers:
    peer = t5x_peer.measured(rows, model, batch, s, grid.max_decode_len, (1, 1))
    ours = [(name, rows.get((model, program, tokens, batch, s, grid.max_decode_len, (1, 1),
                              True)))
            for name, program, tokens in (('ours: step', 'step', 1),
                                          ('ours: target alone', 'alone', 0))]
    for name, row in [('T5X: step', peer)] + ours:
      if row is None:
        continue
      found = found or name.startswith('T5X')
      c = row.cost
      lines.append(f'| {model} | {batch} | {s} | {name} | {_gb(c.bytes)} | '
                   f'{c.flops / 1e9:.2f} | {_ms(c.seconds(V4_CHIP))} | '
                   f'{_ms(c.optimal_seconds)} | {c.bound(V4_CHIP)} |')
  if not found:
    lines += ['', 'Real T5X was not installed when this ran: rerun with it installed (`bash '
              '../shared/t5x/install.sh`, or T5X\'s own instructions) to fill its rows.']
  return '\n'.join(lines) + '\n'


def render(ctx: Context, rows: Mapping[tuple, ProgramRow],
           steps: Sequence[traffic.StepTraffic],
           before: Sequence[traffic.StepTraffic],
           recompiled: Optional[Mapping[tuple, ProgramRow]] = None
           ) -> Tuple[str, Dict[str, Any]]:
  """The markdown of docs/tpu_speed.md and the summary of its predictions.

  Args:
    ctx: how the rows were made.
    rows: the programs' rows by `ProgramRow.key` (T5X's included).
    steps: the excess-traffic rows.
    before: the same rows of the previous code (may be empty).
    recompiled: the target's chain calls compiled again beside token-tree rows added to
      an earlier run (section 8 compares the trees with these), by key; may be None.
  """
  grid = ctx.grid
  summary: Dict[str, Any] = {}
  grid_text = '; '.join(
      [f'{t}: ' + ', '.join(f'{"1 chip" if s.chips == 1 else "v4-8"} B={s.batch}'
                            for s in settings) for t, _, settings in grid.pairs] +
      [f'token trees {t.target} + {t.draft}: ' + ', '.join(f'1 chip B={b}' for b in t.batches)
       for t in grid.trees])
  backend = ('compile-only TPU v4 (libtpu)' if ctx.backend == 'tpu' else
             'this machine\'s CPU (XLA:CPU cost analysis, timed with TPU v4 figures: '
             'a check of the arithmetic, not a TPU prediction)')
  parts = [
      f'# TPU v4 speed predicted from the compiled programs\n\n'
      f'Generated by `{ctx.command}` on {ctx.date} with {ctx.versions}, for {backend} '
      f'({"quick" if ctx.quick else "full"} grid: '
      f'{grid_text}; '
      f'{ctx.seconds / 60:.0f} min of compiling, all rows added). Do not edit by '
      'hand: rerun the '
      'command (add --resume to keep the rows already measured).\n',
      _METHOD.format(max_decode_len=grid.max_decode_len,
                     inputs=(f'{grid.tasks[0][1]} for every task' if len(
                         {n for _, n in grid.tasks}) == 1 else ', '.join(
                             f'{n} for {paper.TASKS[t]}' for t, n in grid.tasks)), flops=roofline.V4_CHIP_FLOPS / 1e12,
                     bandwidth=roofline.V4_CHIP_HBM_BYTES_PER_S / 1e9,
                     source=roofline.FIGURES_SOURCE, flags='"--xla_tpu_cmem_memory_space_'
                     'assignment=false"'),
      _traffic_section(before, steps, ctx.before_path),
      _alone_section(ctx, rows, summary),
      _peer_section(ctx, rows),
      tables.table2_section(grid, rows, summary),
      tables.costs_section(grid, rows, summary),
      tables.gamma_section(grid, rows, summary),
      tables.batch_section(grid, rows, summary),
      tree_tables.tree_section(grid, rows, summary, recompiled or {}),
      _LEAVES_OUT,
      _MEASURED]
  return '\n'.join(p.rstrip('\n') + '\n' for p in parts if p), summary
