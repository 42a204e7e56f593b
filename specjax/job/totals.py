"""The counters of a decode run and the summary `python -m specjax.decode` prints.

Every count is of the outputs actually produced (`DecodeStats`): tokens per target call is
generated tokens / per-row target calls, and the batched target calls (one model call
serves every row of a batch) are reported beside the per-row ones.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Optional

import numpy as np

from specjax.core.figures import decode_figures


@dataclasses.dataclass
class Totals:
  """Sums over the decoded inputs (speculative, and the target alone when compared): the
  `DecodeStats` counters summed over rows and calls, under their names, so that
  `decode_figures` reduces them like a decode's own."""

  seconds: float = 0.0
  generated: int = 0
  target_calls: int = 0
  batched_calls: int = 0
  accepted: int = 0
  drafted: int = 0
  beta_sum: float = 0.0
  beta_count: int = 0
  base_seconds: float = 0.0
  base_tokens: int = 0
  decoded: int = 0
  # [G]: accepted_per_position summed over rows and calls; named apart, so that only
  # `tree_summary` reduces it (a chain's summary is as before)
  reached: Optional[np.ndarray] = None

  def add(self, stats, iterations, seconds: float) -> None:
    """Adds one decode call: stats of its real rows (numpy), its loop iterations."""
    self.seconds += seconds
    self.generated += int(stats.generated.sum())
    self.target_calls += int(stats.target_calls.sum())
    self.batched_calls += int(iterations)
    self.accepted += int(stats.accepted.sum())
    self.drafted += int(stats.drafted.sum())
    self.beta_sum += float(stats.beta_sum.sum())
    self.beta_count += int(stats.beta_count.sum())
    self.decoded += len(stats.generated)
    reached = np.sum(np.asarray(stats.accepted_per_position), axis=0)
    self.reached = reached if self.reached is None else self.reached + reached

  def add_baseline(self, lengths, seconds: float) -> None:
    """Adds the target alone's decode of the same rows."""
    self.base_seconds += seconds
    self.base_tokens += int(np.sum(lengths))

  def summary(self, compare: bool) -> dict:
    """The measured part of the run's summary (see `decode_job.run`)."""
    speedup = None
    if compare and self.base_seconds > 0:
      # A ratio of tokens per second: sampled outputs of the two decodes differ in length.
      speedup = (self.generated * self.base_seconds
                 / max(self.base_tokens * self.seconds, 1e-12))
    f = decode_figures(self)
    return dict(
        alpha=float(f.alpha), acceptance_rate=float(f.acceptance_rate),
        tokens_per_call=float(f.tokens_per_call),
        target_calls=self.target_calls, batched_target_calls=self.batched_calls,
        generated_tokens=self.generated, drafted_tokens=self.drafted,
        accepted_tokens=self.accepted,
        tokens_per_second=self.generated / max(self.seconds, 1e-9), seconds=self.seconds,
        baseline_tokens=self.base_tokens if compare else None,
        baseline_tokens_per_second=(self.base_tokens / self.base_seconds
                                    if compare and self.base_seconds > 0 else None),
        speedup=speedup, decoded=self.decoded)

  def tree_summary(self) -> dict:
    """What a tree decode adds to the summary (`decode_figures`): nodes_per_call, the
    nodes the target verified per per-row call (drafted / target_calls), and
    accepted_depths, the share of calls whose accepted path was 0 .. D nodes deep."""
    counters = dict(dataclasses.asdict(self), accepted_per_position=(
        self.reached if self.reached is not None else np.zeros(0, np.int64)))
    f = decode_figures(types.SimpleNamespace(**counters))
    return dict(nodes_per_call=float(f.drafted_per_call),
                accepted_depths=[float(x) for x in f.accepted_depths])


def nonfinite_error(stats, examples, first_index: int) -> Optional[str]:
  """The one-line error for the first row whose logits were not finite, or None."""
  bad = np.flatnonzero(np.asarray(stats.nonfinite) > 0)
  if not len(bad):
    return None
  example = examples[first_index + int(bad[0])]
  line = example.get('input_line', first_index + int(bad[0]) + 1)
  return (f'input line {line}: the model\'s logits were NaN or infinite in '
          f'{int(stats.nonfinite[bad[0]])} of its calls, so its output would not be the '
          'model\'s; likely a float overflow (T5 1.1 in bfloat16 or float16: pass --dtype '
          'float32) or corrupt weights (check the checkpoint)')
