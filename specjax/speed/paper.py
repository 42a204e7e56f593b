"""The paper's measured table (Leviathan et al. 2023, Table 2, with Table 4's c and
expected speedups): T5-XXL target, batch 1, one TPU v4 chip, against T5X."""
from __future__ import annotations

import dataclasses
from typing import Tuple

TASKS = {'ende': 'EnDe (WMT)', 'cnndm': 'CNN/DM'}
DRAFTS = ('t5_small', 't5_base', 't5_large')


@dataclasses.dataclass(frozen=True)
class PaperCell:
  """One row of the paper's Table 2.

  Attributes:
    task: 'ende' or 'cnndm'.
    draft: the draft's registry name (T5 1.1 small, base or large).
    temperature: 0 (argmax) or 1 (sampling).
    gamma: the gamma the paper ran.
    alpha: the acceptance rate it measured.
    speedup: its measured walltime speedup over T5X.
    c: Table 4's draft cost ratio (from profiler traces).
    expected: Table 4's speedup expected from alpha, gamma and c.
  """

  task: str
  draft: str
  temperature: float
  gamma: int
  alpha: float
  speedup: float
  c: float
  expected: float


def _cells() -> Tuple[PaperCell, ...]:
  rows = [  # task, draft, T, gamma, alpha, speedup, c, expected
      ('ende', 't5_small', 0, 7, 0.75, 3.4, 0.02, 3.2),
      ('ende', 't5_base', 0, 7, 0.80, 2.8, 0.04, 3.3),
      ('ende', 't5_large', 0, 7, 0.82, 1.7, 0.11, 2.5),
      ('ende', 't5_small', 1, 7, 0.62, 2.6, 0.02, 2.3),
      ('ende', 't5_base', 1, 5, 0.68, 2.4, 0.04, 2.4),
      ('ende', 't5_large', 1, 3, 0.71, 1.4, 0.11, 2.0),
      ('cnndm', 't5_small', 0, 5, 0.65, 3.1, 0.02, 2.4),
      ('cnndm', 't5_base', 0, 5, 0.73, 3.0, 0.04, 2.6),
      ('cnndm', 't5_large', 0, 3, 0.74, 2.2, 0.11, 2.0),
      ('cnndm', 't5_small', 1, 5, 0.53, 2.3, 0.02, 1.9),
      ('cnndm', 't5_base', 1, 3, 0.55, 2.2, 0.04, 1.8),
      ('cnndm', 't5_large', 1, 3, 0.56, 1.7, 0.11, 1.6)]
  return tuple(PaperCell(t, d, float(temp), g, a, s, c, e) for t, d, temp, g, a, s, c, e in rows)


TABLE2 = _cells()
