"""Turning benchmark results into a table, a plot, a markdown report, and the peer runs."""
from __future__ import annotations

import datetime
import os
import platform
from typing import List

import jax
import numpy as np

from specjax import reports
from specjax.bench import variant_report
from specjax.bench.variant_report import fmt
from specjax.core import theory

_COLUMNS = ('gamma', 'temperature', 'alpha', 'tokens_per_call', 'tokens_per_second',
            'speedup', 'loop_speedup', 'predicted_speedup', 'efficiency',
            'efficiency_at_lengths')
# The efficiency's factors (bench_rows.efficiency_factors), shown after the columns.
_FACTORS = ('tokens', 'calls', 'loop', 'baseline')
_REFILLED = ' (one stream: a finished row takes the next input)'


def machine_info() -> dict:
  """Machine and versions, for the record next to every number."""
  import flax  # pylint: disable=import-outside-toplevel
  device = jax.devices()[0]
  return {'date': datetime.date.today().isoformat(), 'platform': platform.platform(),
          'processor': platform.processor() or platform.machine(),
          'cpu_count': os.cpu_count(), 'backend': jax.default_backend(),
          'device_kind': device.device_kind, 'device_count': jax.device_count(),
          'python': platform.python_version(), 'jax': jax.__version__,
          'flax': flax.__version__}


def format_row(row: dict) -> str:
  return (f'gamma {row["gamma"]:2d}  T {row["temperature"]:.1f}  alpha {row["alpha"]:.3f}  '
          f'tok/call {row["tokens_per_call"]:.2f}  {row["tokens_per_second"]:8.1f} tok/s  '
          f'speedup {row["speedup"]:.2f}x  loop {fmt(row["loop_speedup"])}x  '
          f'predicted {row["predicted_speedup"]:.2f}x  efficiency {fmt(row["efficiency"])}'
          + ('  = ' + ' x '.join(f'{k} {x:.2f}' for k, x in row['factors'].items())
             if row.get('factors') else ''))


# The figures whose noise the report names (keys of a row's 'spread').
_NOISE = (('t_1', 't_1'), ('seconds', 'the speculative decodes'),
          ('baseline_seconds', 'the target-alone decodes'))


def noise(result: dict) -> str:
  """One line on timing noise: how much slower a figure's slowest round was than its
  fastest, as a median over the rows ('' when the rows have no rounds to compare)."""
  spreads = [r['spread'] for r in result['rows'] if r.get('spread')]
  if not spreads or result.get('rounds', 1) < 2:
    return ''
  median = lambda values: float(np.median(values))
  overall = median([x for s in spreads for x in s.values()])
  named = ', '.join(f'{label} {median([s[k] for s in spreads if k in s]):.0%}'
                    for k, label in _NOISE)
  return (f'timing noise: the slowest of a figure\'s {result["rounds"]} rounds was slower '
          f'than its fastest by {overall:.0%} (median over {len(spreads)} rows and every '
          f'figure; {named}); a ratio of two figures can move by as much from run to run')


QUICK_NOTE = ('--quick: tiny random models whose steps take microseconds, so their timings '
              'and every figure made of them (speedups, c, v, efficiency, its factors) test '
              'that the bench runs; they measure nothing')


def format_table(result: dict) -> str:
  """The rows as a markdown table (what the terminal and the report show)."""
  header = list(_COLUMNS) + [f'x {f}' for f in _FACTORS] + ['identical']
  lines = ['| ' + ' | '.join(header) + ' |', '|' + '---|' * len(header)]
  for row in result['rows']:
    cells = [fmt(row.get(c), 3) if isinstance(row.get(c), float) or row.get(c) is None
             else str(row[c]) for c in _COLUMNS]
    factors = row.get('factors') or {}
    cells += [fmt(factors.get(f)) for f in _FACTORS]
    same = row.get('identical_to_target')
    lines.append('| ' + ' | '.join(cells) + f' | {"" if same is None else same} |')
  lines.append('')
  v = ', '.join(f'v({k})={x:.2f}' for k, x in result['v'].items())
  lines.append(f'c = {result["c"]:.3f} (draft step {result["draft_step_seconds"] * 1e3:.3f} ms'
               f' / target step {result["target_step_seconds"] * 1e3:.3f} ms); {v}')
  for t, base in result['baselines'].items():
    lines.append(f'target alone, T={t}: {base["tokens_per_second"]:.1f} tokens/s')
  noise_line = noise(result)
  if noise_line:
    lines.append(noise_line)
  if result.get('quick'):
    lines.append(QUICK_NOTE)
  if 'peers' in result:
    p = result['peers']
    lines.append(f'peers (greedy, batch 1, gamma {p["gamma"]}): ' + ', '.join(
        (f'{name} failed: {x["error"][:120]}' if 'error' in x else
         f'{name} {x["tokens_per_second"]:.1f} tok/s (identical: {x["identical"]})')
        for name, x in p['runs'].items()))
  return '\n'.join(lines)


def plot(result: dict, path: str) -> None:
  """PNG: measured and predicted speedup against gamma, one colour per temperature; with
  rows of other drafts (--drafts, --trees), a second panel of theirs: each draft's chain
  rows against gamma (measured, and predicted where the formula applies) and its tree rows
  at their depth (stars)."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  others = _other_drafts(result)
  fig, axes = plt.subplots(1, 2 if others else 1, figsize=(12 if others else 6, 4),
                           squeeze=False)
  ax = axes[0][0]
  for i, t in enumerate(sorted({r['temperature'] for r in result['rows']})):
    rows = sorted((r for r in result['rows'] if r['temperature'] == t), key=lambda r: r['gamma'])
    g = [r['gamma'] for r in rows]
    loop = [r.get('loop_speedup') for r in rows]
    if None not in loop:
      ax.plot(g, loop, 'o-', color=f'C{i}', label=f'measured, decode loops, T={t:g}')
    ax.plot(g, [r['speedup'] for r in rows], '^:', color=f'C{i}', alpha=0.6,
            label=f'measured, end to end, T={t:g}')
    ax.plot(g, [r['predicted_speedup'] for r in rows], 's--', color=f'C{i}',
            label=f'predicted, T={t:g}')
  ax.axhline(1.0, color='grey', lw=0.8)
  ax.set_xlabel('gamma (draft tokens per target call)')
  ax.set_ylabel('speedup over the target alone')
  ax.set_title(f'{result["target"]} + {result["draft"]}, batch {result["batch_size"]}'
               + (', refilled' if result.get('refill') else ''))
  ax.legend(fontsize=8)
  if others:
    _plot_others(axes[0][1], others)
  fig.tight_layout()
  with reports.replacing(path) as tmp:  # whole or not at all
    fig.savefig(tmp, dpi=120)
  plt.close(fig)


def _other_drafts(result: dict) -> dict:
  """{(draft, temperature): (its chain rows by gamma, its tree rows)} of the drafts of
  --drafts (token rule, fixed gamma) and the tree rows of any draft."""
  out = {}
  for r in result.get('variants') or []:
    if (r['draft'] != result['draft'] and r['verification'] == 'token'
        and r['draft_threshold'] == 0):
      out.setdefault((r['draft'], r['temperature']), ([], []))[0].append(r)
  for r in result.get('trees') or []:
    out.setdefault((r.get('draft', result['draft']), r['temperature']), ([], []))[1].append(r)
  return out


def _plot_others(ax, others: dict) -> None:
  """The second panel of `plot`: one colour per (draft, temperature)."""
  for i, ((name, t), (chains, trees)) in enumerate(others.items()):
    colour = f'C{i % 10}'
    chains = sorted(chains, key=lambda r: r['gamma'])
    if chains:
      g = [r['gamma'] for r in chains]
      ax.plot(g, [r['speedup'] for r in chains], 'o-', color=colour,
              label=f'{name}, T={t:g}, measured')
      ax.plot(g, [r['predicted_speedup'] for r in chains], 's--', color=colour, alpha=0.6,
              label=f'{name}, T={t:g}, predicted')
    for r in trees:
      ax.plot([r['depth']], [r['speedup']], '*', color=colour, markersize=11,
              label=f'{name}, T={t:g}, tree {r["tree"]} ({r["nodes"]} nodes)')
  ax.axhline(1.0, color='grey', lw=0.8)
  ax.set_xlabel('gamma, or a tree\'s depth (stars)')
  ax.set_ylabel('measured speedup over the target alone')
  ax.set_title('other drafts (--drafts) and trees (--trees), end to end')
  ax.legend(fontsize=6)


def reading(result: dict) -> str:
  """A short, generated account of where the time goes at the best greedy gamma.

  Uses the best row's own interleaved timings (bench_rows.speculative_row) and the four
  factors whose product is its efficiency.
  """
  greedy = [r for r in result['rows'] if r['temperature'] == 0.0] or result['rows']
  best = max(greedy, key=lambda r: r['speedup'])
  f = best.get('factors')
  if not f:
    return (f'At the best greedy gamma ({best["gamma"]}) the decode loops were too short to '
            'time apart from their prefill; no split of the efficiency.')
  g, t_1, c, v = best['gamma'], best['t_1'], best['c'], best['v']
  iterations = max(best['iterations'], 1)
  per_iteration = (best['seconds'] - best['prefill_seconds']) / iterations
  batch = best.get('batch_size', 1)
  per_token = ((best['baseline_seconds'] - best['baseline_prefill_seconds'])
               / best['baseline_tokens'] * batch)  # per token of each of B rows
  draft, verify, together = g * c * t_1, v * t_1, best['model_calls_seconds']
  tokens = best['tokens'] / iterations / batch  # per row
  expected = theory.expected_tokens_per_call(min(best['alpha'], 1.0), g)
  rest = per_iteration - together
  split = best.get('tokens_split')
  idle = ('' if batch == 1 else '; slots idle at the stream\'s end' if result.get('refill')
          else '; rows that are done idle until their batch\'s last row is')
  lengths = ('' if not split else
             f' The formula assumes outputs without end; on outputs of these lengths, each '
             f'ending inside its last block, the same alpha yields '
             f'{best["tokens_per_iteration_at_lengths"]:.2f} tokens per iteration (x'
             f'{split["lengths"]:.2f}, lengths), and acceptance that varies from token to '
             f'token, rather than being one alpha, loses the rest (x{split["variation"]:.2f}'
             f'{"" if batch == 1 else ", idle rows included"}).')
  redone = ('' if not split else
            f' With the formula redone for these lengths the prediction is '
            f'{best["predicted_speedup_at_lengths"]:.2f}x and the efficiency '
            f'{fmt(best.get("efficiency_at_lengths"))}.')
  cold = result.get('draft_after_sweep')
  cold = ('' if not cold or cold['gamma'] != g else
          f' A draft block (the {g} draft calls) takes {cold["draft_block_seconds"] * 1e3:.2f}'
          f' ms back to back, and {cold["penalty_seconds"] * 1e3:.2f} ms more when a read of '
          f'{cold["sweep_bytes"] / 1e6:.0f} MB, as many bytes as the target\'s weights, runs '
          f'between blocks as each verify call does: the draft\'s weights and caches are '
          f'then read from memory again. The calls run alternating measure '
          f'{(together - draft - verify) * 1e3:.2f} ms more than alone.')
  work = (f'the loop\'s own work (acceptance, commit, and the start of each short decode) '
          f'the remaining {rest * 1e3:.2f} ms (x{f["loop"]:.2f})' if rest >= 0 else
          f'the loop\'s own work is below the timing noise (the calls measured '
          f'{-rest * 1e3:.2f} ms more than a whole iteration, x{f["loop"]:.2f})')
  return (
      f'At the best greedy gamma ({g}), with every figure of the row timed in '
      f'{result.get("rounds", 1)} interleaved rounds, one loop iteration measures '
      f'{per_iteration * 1e3:.2f} ms. The model calls timed alone account for '
      f'{(draft + verify) * 1e3:.2f} ms ({g} draft steps {draft * 1e3:.2f} ms, c = {c:.3f}; '
      f'one {g + 1}-token verify {verify * 1e3:.2f} ms = v({g + 1}) {v:.2f} steps of '
      f't_1 = {t_1 * 1e3:.3f} ms). Run alternating in one jitted loop with nothing else, as '
      f'the decode runs them, the same calls take {together * 1e3:.2f} ms '
      f'(x{f["calls"]:.2f}: the draft\'s first call carries two tokens, and its weights '
      f'and caches do not stay cached across the target\'s calls), and {work}.'
      f'{cold} '
      f'The target-alone loop spends {f["baseline"]:.2f} t_1 per '
      f'{"token" if batch == 1 else f"{batch} tokens"} ({per_token * 1e3:.2f} ms, '
      f'x{f["baseline"]:.2f}, credited to specjax). An iteration yields {tokens:.2f} tokens '
      f'{"" if batch == 1 else "per row "}against the formula\'s E = {expected:.2f} at '
      f'alpha {best["alpha"]:.3f} (x{f["tokens"]:.2f}: outputs end inside a block, and the '
      f'drafts past EOS are lost{idle}).'
      f'{lengths} '
      f'The loops run {fmt(best["loop_speedup"])}x faster than the target alone; the formula '
      f'predicts {best["predicted_speedup"]:.2f}x, so the efficiency is '
      f'{fmt(best["efficiency"])} = {f["tokens"]:.2f} x {f["calls"]:.2f} x {f["loop"]:.2f} x '
      f'{f["baseline"]:.2f}. Against the model calls as the loop runs them, it is '
      f'{fmt(best.get("efficiency_in_loop"))}.{redone} Before the loop, the encoders and the '
      f'prefill '
      f'take {best["prefill_seconds"] / best["seconds"]:.0%} of the speculative decode time '
      f'(target and draft encoders) and '
      f'{best["baseline_prefill_seconds"] / best["baseline_seconds"]:.0%} of the target-alone '
      f'time; with them the end-to-end speedup is {best["speedup"]:.2f}x.')


def write_markdown(result: dict, path: str, plot_path: str = None) -> None:
  """docs/benchmarks.md: generated by the bench, never typed by hand."""
  m = result['machine']
  lines = [
      '# Benchmarks', '',
      f'Generated by `python -m specjax.bench` on {m["date"]}. Do not edit by hand; rerun it.',
      '', f'- machine: {m["processor"]}, {m["cpu_count"]} CPU cores, {m["platform"]}',
      f'- backend: {m["backend"]} ({m["device_kind"]} x{m["device_count"]}); python '
      f'{m["python"]}, jax {m["jax"]}, flax {m["flax"]}',
      f'- pair: target {result["target"]}, draft {result["draft"]}; {result["num_examples"]} '
      f'examples ({result.get("select", "first")} lines of the input), batch '
      f'{result["batch_size"]}{_REFILLED if result.get("refill") else ""}, '
      f'max decode length {result["max_decode_len"]}',
      f'- compile time of the first call: {result["compile_seconds"]:.1f} s; traces per '
      f'(gamma, temperature): {result["traces"]}, one per input shape: inputs padded to '
      f'width {", ".join(map(str, result.get("input_widths", [])))}',
      f'- every figure of a row (both decodes, their prefills, t_1, the verify, the draft '
      f'step, the model calls of one iteration) is timed in {result.get("rounds", 1)} '
      'interleaved rounds and keeps its fastest; c and v in a row are its own',
      '- how c and v are timed: with the functions the decode loop runs '
      '(`specjax.core.steps`), each inside a jitted loop of its own with tokens and '
      'positions varying as in a decode, at the row\'s batch size and cache length: t_K is '
      'one `verify` call of K tokens (t_1 the target alone\'s step), v(K) = t_K / t_1; c '
      'is one `draft_step` (a one-token draft call and its argmax) over t_1; the model '
      'calls of one iteration are `draft_block` (the two-token catch-up call, then G - 1 '
      'scanned draft steps) and a `verify` of G + 1 tokens, alternating',
      '- efficiency = x tokens (tokens per iteration / E) x calls (calls timed alone / '
      'the same calls alternating) x loop (alternating calls / iteration) x baseline '
      '(target-alone time per token / t_1)',
      '- efficiency_at_lengths: the same with the formula redone for outputs of the lengths '
      'produced (each ends inside its last block), where E assumes outputs without end', '',
      format_table(result), '']
  if plot_path:
    rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(path)))
    lines += [f'![measured and predicted speedup]({rel})', '']
  lines += ['## Where the time goes', '', reading(result), '']
  lines += variant_report.beyond_the_draft(result)
  text = '\n'.join(lines)
  reports.write_text(path, text + kept_section(path, text))


# The sections the bench writes on some runs only (its flags ask for them). A rerun keeps
# every other section of the report (those scripts/*.py wrote), at the end.
OWN = ('## Where the time goes', '## Other drafts, block verification, dynamic gamma',
       '## Token-tree rows (--trees)', '## Lenience: ', '## --gamma auto at several batch')


def kept_section(path: str, text: str) -> str:
  """The sections of the report already at `path` that the bench does not write, to
  append to its `text` ('' when none)."""
  return reports.other_sections(path, text, OWN)
