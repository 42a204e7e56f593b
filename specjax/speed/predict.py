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
# E, tokens per target call, at which a tree's speedup is predicted (what a tree reaches on
# a task is measured by the decode's own tokens_per_call).
TREE_TOKENS_PER_CALL = (2.5, 3.0, 3.5, 4.0)


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


@dataclasses.dataclass(frozen=True)
class TreePrediction:
  """A static token tree of N nodes beside the chain, on one device, at one (B, S, L, mesh).

  The tree's iteration is the draft growing it (its D calls), the target's ONE verify of
  the N + 1 tokens, and the loop's own work (the tree rule, the accepted path moved into
  place in both caches, the commit). With E tokens per target call, the speedup over the
  target alone is S = E / (d + v), the paper's E / (G c + v) with G c replaced by
  d = t(the draft's calls of one tree) / t(target step) and v = t(tree verify) / t(one-token
  verify); the chain's at gamma G by the same formula takes d = (t(first) + (G - 1)
  t(step_q)) / t(target step) and v = v(G + 1). `speedup_with_loop` divides by the whole
  compiled iteration instead (the tree's: no loop inside it, every call counted).

  Attributes:
    nodes: N.
    verify: the target's tree verify of N + 1 tokens.
    draft: the draft's calls that grow the tree (one iteration).
    iteration: one whole tree iteration, or None where it was not compiled.
    chain: the chain pair's prediction at the same setting (its target step, one-token
      verify, draft step and first call, verify of K = 1..9, target alone).
  """

  nodes: int
  verify: Cost
  draft: Cost
  iteration: Optional[Cost]
  chain: Prediction

  @classmethod
  def from_rows(cls, rows: Mapping[tuple, ProgramRow], chain: Prediction, target: str,
                draft: str, nodes: int, batch: int, input_len: int, max_decode_len: int,
                mesh: Tuple[int, int]) -> Optional['TreePrediction']:
    """The tree of N nodes out of `rows` (keyed by `ProgramRow.key`), or None where its
    verify or its draft calls were not measured."""
    get = lambda model, program: rows.get((model, program, nodes, batch, input_len,
                                           max_decode_len, tuple(mesh), True))
    verify, grow = get(target, 'tree_verify'), get(draft, 'tree_draft')
    if verify is None or grow is None:
      return None
    it = get(f'{target}+{draft}', 'tree_iteration')
    return cls(nodes, verify.cost, grow.cost, None if it is None else it.cost, chain)

  def _step_units(self, cost: Cost) -> float:
    return self.chain.seconds(cost) / self.chain.seconds(self.chain.costs.target_step)

  @property
  def v(self) -> float:
    """The tree verify over the one-token verify (the chain's v(K) at K = N + 1)."""
    return self.chain.seconds(self.verify) / self.chain.seconds(self.chain.costs.verify[1])

  @property
  def d(self) -> float:
    """The draft's calls of one tree over the target's step (the chain's G c)."""
    return self._step_units(self.draft)

  def speedup(self, tokens_per_call: float) -> float:
    """S = E / (d + v) at E tokens per target call."""
    return tokens_per_call / (self.d + self.v)

  @property
  def loop_share(self) -> Optional[float]:
    """What the compiled iteration costs beyond its draft calls and its verify, as a share
    of its time (0 where XLA shares reads between them); None without the iteration."""
    if self.iteration is None:
      return None
    parts = self.chain.seconds(self.draft) + self.chain.seconds(self.verify)
    whole = self.chain.seconds(self.iteration)
    return max(whole - parts, 0.0) / max(whole, parts)

  def speedup_with_loop(self, tokens_per_call: float) -> Optional[float]:
    """E t(target alone) / t(tree iteration): over the target alone in the same loop, the
    loop's own work included; None without the iteration."""
    if self.iteration is None:
      return None
    return tokens_per_call * self.chain.alone_seconds / self.chain.seconds(self.iteration)


def chain_draft_units(chain: Prediction, gamma: int) -> float:
  """The chain's draft calls of one iteration over the target's step: (t(first) + (G - 1)
  t(step_q)) / t(target step), the G c of S = E / (G c + v)."""
  c = chain.costs
  return (chain.seconds(c.draft_first) + (gamma - 1) * chain.seconds(c.draft_step)) / (
      chain.seconds(c.target_step))


def chain_speedup(chain: Prediction, gamma: int, tokens_per_call: float) -> float:
  """S = E / (G c + v(G + 1)) of the chain at gamma G (the tree's formula)."""
  return tokens_per_call / (chain_draft_units(chain, gamma) + chain.v(gamma + 1))


def chain_best(chain: Prediction, alpha: float,
               gammas: Sequence[int] = GAMMAS) -> Tuple[int, float]:
  """(gamma, S) of the chain's best S = E(alpha, G) / (G c + v(G + 1)) over gammas."""
  return max(((g, chain_speedup(chain, g, theory.expected_tokens_per_call(alpha, g)))
              for g in gammas), key=lambda x: x[1])
