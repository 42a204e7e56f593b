"""What speculation did in a `t5x.infer` or `t5x.eval` run: logged per batch, written beside
the outputs.

T5X's loops see only per-example aux values. The speculative model sends each batch's
counter sums (padding examples excluded) to `RunStats.add` from inside its jitted predict
(`jax.debug.callback`); the host logs one line per batch (alpha, tokens per target call,
target calls, wall time, and the run's totals so far) and rewrites `STATS_FILE` in the
run's output directory (gin's INFER_OUTPUT_DIR or EVAL_OUTPUT_DIR) after each batch.
"""
from __future__ import annotations

import json
import os
import time
import types
from typing import Dict, List, Optional

import numpy as np
from absl import logging

from specjax.core.figures import decode_figures

STATS_FILE = 'speculative_stats.json'
# The counter sums a batch reports (`specjax.core.state.DecodeStats` names, plus examples).
COUNTERS = ('examples', 'generated', 'target_calls', 'accepted', 'drafted', 'beta_sum',
            'beta_count')
OUTPUT_DIR_MACROS = ('INFER_OUTPUT_DIR', 'EVAL_OUTPUT_DIR')


def output_dir() -> Optional[str]:
  """The run's output directory from gin (infer's, else eval's), or None outside gin."""
  try:
    import gin  # pylint: disable=import-outside-toplevel
  except ImportError:
    return None
  for macro in OUTPUT_DIR_MACROS:
    try:
      value = gin.query_parameter(f'%{macro}')
    except ValueError:
      continue
    if isinstance(value, str) and value:
      return value
  return None


def figures(counts: Dict[str, float], seconds: float) -> dict:
  """The reported figures of summed counters over `seconds` of wall time."""
  f = decode_figures(types.SimpleNamespace(**counts))
  return dict(examples=int(counts['examples']), alpha=float(f.alpha),
              tokens_per_call=float(f.tokens_per_call),
              accepted_per_call=float(f.accepted_per_call),
              target_calls=int(counts['target_calls']), tokens=int(counts['generated']),
              seconds=seconds)


class RunStats:
  """The counters of a run's batches, summed on the host as the batches finish."""

  def __init__(self, directory: Optional[str] = None):
    """`directory`: where STATS_FILE goes (default: gin's output directory, if any)."""
    self.directory = directory
    self.batches: List[dict] = []
    self.total = {k: 0.0 for k in COUNTERS}
    self.started = self.last = time.perf_counter()

  def add(self, counts: Dict[str, np.ndarray]) -> None:
    """Adds one batch's counter sums (host numpy scalars), logs it, writes the file."""
    import jax  # pylint: disable=import-outside-toplevel
    now = time.perf_counter()
    if not self.batches:
      self.started = self.last  # the first batch's time includes its compilation
    counts = {k: float(np.asarray(counts[k])) for k in COUNTERS}
    for k in COUNTERS:
      self.total[k] += counts[k]
    batch = figures(counts, now - self.last)
    self.last = now
    self.batches.append(batch)
    total = figures(self.total, now - self.started)
    logging.info('speculative decoding, batch %d: %d examples, alpha %.3f, %.2f tokens per '
                 'target call, %d target calls, %.1f s; run so far: %d examples, alpha %.3f, '
                 '%.2f tokens per target call, %d target calls, %.1f s', len(self.batches),
                 batch['examples'], batch['alpha'], batch['tokens_per_call'],
                 batch['target_calls'], batch['seconds'], total['examples'],
                 total['alpha'], total['tokens_per_call'], total['target_calls'],
                 total['seconds'])
    directory = self.directory or output_dir()
    if directory and jax.process_index() == 0:
      self.write(directory, total)

  def write(self, directory: str, total: dict) -> str:
    """Writes {'total', 'batches'} to directory/STATS_FILE (whole, then renamed)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, STATS_FILE)
    with open(path + '.tmp', 'w', encoding='utf-8') as f:
      json.dump({'total': total, 'batches': self.batches}, f, indent=1)
    os.replace(path + '.tmp', path)
    return path
