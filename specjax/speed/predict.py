"""From the programs' roofline times to the paper's quantities: c, v(K), the loop's own
share of an iteration, and the predicted speedup at any alpha and gamma.

The time of one speculative iteration of gamma G is the time of what it runs:
  t_spec(G) = t(first) + (G - 1) t(step_q) + t(verify G + 1) + t(loop G),
where `first` is the draft's two-token call that opens a block, `step_q` its one-token
step, and `loop G` what the iteration compiles beyond those three (accept, commit, the
statistics): the 'iteration' program's cost less theirs, measured at the gammas compiled
(`programs.ITERATION_GAMMAS`) and interpolated in bytes and flops in between. The target
alone runs `alone` (one token, its pick and commit) per token. With
  c = t(step_q) / t(alone)  and  v_it(G) = (t_spec(G) - G t(step_q)) / t(alone)
the predicted speedup is `theory.speedup(alpha, G, c, v_it(G))` = E(alpha, G) t(alone) /
t_spec(G). The paper's own c and v(K) (draft step over target step, K-token verify over
one-token verify) are reported beside.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, Mapping, Optional, Sequence, Tuple

from specjax.core import theory
from specjax.speed.programs import ITERATION_GAMMAS, ProgramRow
from specjax.speed.roofline import Cost, Device

GAMMAS = tuple(range(1, 9))


@dataclasses.dataclass(frozen=True)
class PairCosts:
  """The costs of one pair's programs at one (B, S, L, mesh, sampling mode).

  Attributes:
    verify: {K: Cost} of the target's K-token verify.
    target_step: the target's one-token step (decode and pick).
    draft_step: the draft's one-token step.
    draft_first: the draft's first call of a block (two tokens and a pick).
    alone: one iteration of the target alone.
    iterations: {G: Cost} of one speculative iteration (the scan body counted once).
    target_encode: the target's encoder (once per input).
    draft_encode: the draft's.
    scan_counted_once: the iterations count one of the draft's G - 1 scan steps (XLA's
      cost analysis); False for measured times, which hold all of them.
  """

  verify: Mapping[int, Cost]
  target_step: Cost
  draft_step: Cost
  draft_first: Cost
  alone: Cost
  iterations: Mapping[int, Cost]
  target_encode: Cost
  draft_encode: Cost
  scan_counted_once: bool = True

  @classmethod
  def from_rows(cls, rows: Mapping[tuple, ProgramRow], target: str, draft: str, batch: int,
                input_len: int, max_decode_len: int, mesh: Tuple[int, int],
                greedy: bool, scan_counted_once: bool = True) -> 'PairCosts':
    """Picks a setting's programs out of `rows` (keyed by `ProgramRow.key`; any row with a
    `cost`: compiled costs, or `measure.TimedRow`s with scan_counted_once False).

    Raises:
      KeyError: one line naming the first program missing (rerun the grid with --resume).
    """
    def get(model, program, tokens, mode=greedy):
      key = (model, program, tokens, batch, input_len, max_decode_len, tuple(mesh), mode)
      if key not in rows:
        raise KeyError(f'no measured program {key}; rerun python -m specjax.plan --speed '
                       '--resume')
      return rows[key].cost
    verify = {k: rows[key].cost for key, k in (
        ((target, 'verify', k, batch, input_len, max_decode_len, tuple(mesh), True), k)
        for k in range(1, 10)) if key in rows}
    pair = f'{target}+{draft}'
    return cls(verify=verify, target_step=get(target, 'step', 1),
               draft_step=get(draft, 'step', 1), draft_first=get(draft, 'first', 2),
               alone=get(target, 'alone', 0),
               iterations={g: get(pair, 'iteration', g) for g in ITERATION_GAMMAS},
               target_encode=get(target, 'encode', 0, True),
               draft_encode=get(draft, 'encode', 0, True),
               scan_counted_once=scan_counted_once)

  def loop_cost(self, gamma: int) -> Cost:
    """What an iteration of gamma G runs beyond draft, verify: accept, commit, stats.

    Measured at the compiled gammas (the iteration less its first draft call, its draft
    steps, one where XLA counts the scan body once, and the verify of G + 1), linear in G
    in between and beyond.
    """
    measured = {}
    for g, cost in self.iterations.items():
      parts = self.draft_first + self.verify[g + 1]
      steps = min(g - 1, 1) if self.scan_counted_once else g - 1
      if steps:
        parts = parts + self.draft_step.scaled(steps)
      measured[g] = cost - parts
    (g0, c0), (g1, c1) = sorted(measured.items())[0], sorted(measured.items())[-1]
    if g1 == g0:
      return c0.clipped()
    slope = (c1 - c0).scaled(1.0 / (g1 - g0))
    return (c0 + slope.scaled(gamma - g0)).clipped()


@dataclasses.dataclass(frozen=True)
class Prediction:
  """The paper's quantities for one setting on one device.

  Attributes:
    costs: the programs' costs.
    device: the hardware a device of the programs stands for.
  """

  costs: PairCosts
  device: Device

  def seconds(self, cost: Cost) -> float:
    """The roofline time of a cost on this device."""
    return cost.seconds(self.device)

  @property
  def alone_seconds(self) -> float:
    """Time per token of the target alone (one iteration of the loop without a draft)."""
    return self.seconds(self.costs.alone)

  @property
  def c(self) -> float:
    """The paper's c: the draft's one-token step over the target's."""
    return self.seconds(self.costs.draft_step) / self.seconds(self.costs.target_step)

  def v(self, tokens: int) -> float:
    """v(K): the target's K-token verify over its one-token one."""
    return self.seconds(self.costs.verify[tokens]) / self.seconds(self.costs.verify[1])

  def iteration_seconds(self, gamma: int) -> float:
    """t_spec(G): one speculative iteration (see the module docstring)."""
    c = self.costs
    return (self.seconds(c.draft_first) + (gamma - 1) * self.seconds(c.draft_step) +
            self.seconds(c.verify[gamma + 1]) + self.seconds(c.loop_cost(gamma)))

  def loop_share(self, gamma: int) -> float:
    """The loop's own share of an iteration of gamma G (accept, commit, statistics)."""
    return self.seconds(self.costs.loop_cost(gamma)) / self.iteration_seconds(gamma)

  @property
  def c_iteration(self) -> float:
    """c as the formula S = E / (G c + v) takes it: draft step over the target alone."""
    return self.seconds(self.costs.draft_step) / self.alone_seconds

  def v_iteration(self, gamma: int) -> float:
    """v as the formula takes it: the rest of an iteration over the target alone."""
    draft = gamma * self.seconds(self.costs.draft_step)
    return (self.iteration_seconds(gamma) - draft) / self.alone_seconds

  def speedup(self, alpha: float, gamma: int) -> float:
    """Predicted walltime speedup over the target alone: theory.speedup with c and v."""
    return theory.speedup(alpha, gamma, self.c_iteration, self.v_iteration(gamma))

  def best_gamma(self, alpha: float, gammas: Sequence[int] = GAMMAS) -> int:
    """The gamma in `gammas` with the highest predicted speedup."""
    return theory.best_gamma(alpha, self.c_iteration,
                             verify_cost=lambda k: self.v_iteration(k - 1), gammas=gammas)

  def seconds_per_token(self, alpha: float, gamma: int) -> float:
    """Predicted time per generated token of the speculative decode."""
    return self.iteration_seconds(gamma) / theory.expected_tokens_per_call(alpha, gamma)


def speedup_over(prediction: Prediction, baseline_seconds: float, alpha: float,
                 gamma: int) -> float:
  """Predicted speedup of the speculative decode over another decoder's time per token
  (e.g. T5X's own decode step)."""
  return baseline_seconds / prediction.seconds_per_token(alpha, gamma)


def table(prediction: Prediction, alphas: Sequence[float],
          gammas: Sequence[int] = GAMMAS) -> Dict[float, Dict[int, float]]:
  """{alpha: {gamma: predicted speedup}}."""
  return {a: {g: prediction.speedup(a, g) for g in gammas} for a in alphas}


def break_even(prediction: Prediction, alpha: float,
               gammas: Sequence[int] = GAMMAS) -> Optional[int]:
  """The best gamma if speculation pays at alpha (speedup > 1), else None."""
  best = prediction.best_gamma(alpha, gammas)
  return best if prediction.speedup(alpha, best) > 1.0 else None
