"""Writing one section of a generated report: the scripts that measure a part of a report
put their "## ..." section in place (or at the end), leaving the rest as it is."""
from __future__ import annotations

import os
import pathlib


def write_section(path: str, title: str, text: str) -> None:
  """Puts `text` in place of the file's section `title` ('## ...'), where it stands, or
  at the file's end."""
  p = pathlib.Path(path)
  old = p.read_text() if p.exists() else ''
  text = text.rstrip('\n') + '\n'
  at = old.find('\n' + title + '\n')
  if at < 0:
    p.write_text(old.rstrip('\n') + '\n\n' + text)
    return
  end = old.find('\n## ', at + 1)
  after = '\n' + old[end + 1:] if end >= 0 else ''
  p.write_text(old[:at + 1] + text + after)


def speedup_text(p: dict) -> str:
  """A predicted speedup, with its range in brackets where it has one (a cascade's, at the
  most and the fewest draft calls)."""
  text = f'{p["speedup"]:.2f}'
  if 'speedup_most' in p:
    text += f' ({p["speedup_most"]:.2f}-{p["speedup_fewest"]:.2f})'
  return text


def prediction_table(predicted: list, batches: list, temps: list) -> list:
  """The markdown table of predicted TPU speedups: a row per (task, proposer, shape), its
  tokens per call at each temperature, and per batch c + v (at the first temperature)
  and the predicted speedup at each temperature.

  Args:
    predicted: rows {'task', 'proposer', 'shape', 'temperature', 'tokens_per_call', and
      per batch b: {'c', 'v', 'speedup'[, 'speedup_most', 'speedup_fewest']}}.
    batches: the batch keys, in column order; temps: the temperatures, in order.
  """
  tname = ', '.join(f'T={t:g}' for t in temps)
  lines = [f'| task | proposer | shape | tokens per call ({tname}) | '
           + ' | '.join(f'c + v at {b} (T=0) | predicted x at {b} ({tname})' for b in batches)
           + ' |', '|---|---|---|---|' + '---|---|' * len(batches)]
  groups = {}
  for row in predicted:
    groups.setdefault((row['task'], row['proposer'], row['shape']), {})[
        row['temperature']] = row
  for (task, proposer, shape), by_t in groups.items():
    first = by_t[min(by_t)]
    cells = [f'{first[b]["c"] + first[b]["v"]:.3f} | ' + ', '.join(
        speedup_text(by_t[t][b]) if t in by_t else '-' for t in temps) for b in batches]
    per_call = ', '.join(f'{by_t[t]["tokens_per_call"]:.2f}' if t in by_t else '-'
                         for t in temps)
    lines.append(f'| {task} | {proposer} | {shape} | {per_call} | {" | ".join(cells)} |')
  return lines


def add_cost_report_flags(parser, json_default: str, section: str, measured: str,
                          measured_help: str) -> None:
  """The flags every compile-only cost report takes: --json (its results), --markdown (the
  file its `section` goes into), --render (write the section from --json, compile
  nothing), --measured-json (the tokens per call it predicts from, default `measured`
  where it exists), the task-level ones --tasks, --batches and --target."""
  parser.add_argument('--json', default=json_default,
                      help='write the costs and predictions here (with --render: read them)')
  parser.add_argument('--markdown', help=f'write the "{section}" section into this file')
  parser.add_argument('--render', action='store_true',
                      help='only write --markdown (no compile)')
  parser.add_argument('--measured-json', default=measured if os.path.exists(measured) else None,
                      help=f'{measured_help} (default docs/retrieval_drafts.json where it '
                           'exists; without it: no prediction)')
  parser.add_argument('--tasks', default='ende,manpages', help='the measured tasks predicted '
                      '(default: those of the encoder-decoder pairs, as T5-XXL is)')
  parser.add_argument('--batches', default='1,8')
  parser.add_argument('--target', default='t5_xxl', help='the T5 config verifying')
