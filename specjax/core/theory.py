"""The paper's formulas: tokens per target call, walltime speedup, best gamma
(docs/algorithm.md).

alpha is the acceptance rate E[beta], c the draft step cost over the target step cost,
and v(K) the cost of a K-token target call over a 1-token call (1 in the paper's ideal).
"""
from __future__ import annotations

import collections
from typing import Callable, Optional, Sequence


def _check(alpha: float, gamma: int) -> None:
  if not 0.0 <= alpha <= 1.0:
    raise ValueError(f'alpha must be in [0, 1], got {alpha}')
  if not isinstance(gamma, int) or gamma < 1:
    raise ValueError(f'gamma must be an integer >= 1, got {gamma!r}')


def expected_tokens_per_call(alpha: float, gamma: int) -> float:
  """E = (1 - alpha^(G+1)) / (1 - alpha): mean tokens produced per target call."""
  _check(alpha, gamma)
  if alpha == 1.0:
    return float(gamma + 1)
  return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speedup(alpha: float, gamma: int, c: float, v: float = 1.0) -> float:
  """S = E / (G * c + v): walltime speedup over the target alone.

  Args:
    alpha: acceptance rate in [0, 1].
    gamma: G >= 1, draft tokens per target call.
    c: draft step time / target step time.
    v: time of the (G+1)-token verify call / time of a 1-token target call.

  Returns:
    The predicted speedup factor.
  """
  if c < 0 or v <= 0:
    raise ValueError(f'c must be >= 0 and v > 0, got c={c}, v={v}')
  return expected_tokens_per_call(alpha, gamma) / (gamma * c + v)


def arithmetic_factor(alpha: float, gamma: int, c_hat: float) -> float:
  """Total arithmetic relative to the target alone: (1-a)(G c_hat + G + 1) / (1 - a^(G+1))."""
  return (gamma * c_hat + gamma + 1) / expected_tokens_per_call(alpha, gamma)


def best_gamma(alpha: float, c: float, verify_cost: Optional[Callable[[int], float]] = None,
               gammas: Sequence[int] = tuple(range(1, 33))) -> int:
  """The gamma that maximises the predicted speedup.

  Args:
    alpha: acceptance rate.
    c: draft cost ratio.
    verify_cost: v(K) for a K-token target call (K = G + 1); 1 for every K when None.
    gammas: the candidates.

  Returns:
    The best gamma (the smallest among equals).
  """
  v = verify_cost or (lambda k: 1.0)
  return max(gammas, key=lambda g: (speedup(alpha, g, c, v(g + 1)), -g))


def expected_iterations(alpha: float, gamma: int, length: int) -> float:
  """Mean loop iterations to produce an output of `length` tokens (EOS included).

  The formula's E assumes outputs without end. A real output ends inside its last block,
  and the drafts past its end are lost: with every draft token accepted independently
  with probability alpha, an iteration yields j + 1 tokens with probability
  alpha^j (1 - alpha) for j < G and alpha^G for j = G, but never more than remain.

  Args:
    alpha: acceptance rate in [0, 1].
    gamma: G >= 1, draft tokens per iteration.
    length: n >= 0, the output's tokens.

  Returns:
    N(n), from N(0) = 0 and N(m) = 1 + sum_j P(j) N(max(m - j - 1, 0)).
  """
  _check(alpha, gamma)
  probs = [alpha ** j * (1.0 - alpha) for j in range(gamma)] + [alpha ** gamma]
  n = [0.0] * (max(int(length), 0) + 1)
  for m in range(1, len(n)):
    n[m] = 1.0 + sum(p * n[max(m - j - 1, 0)] for j, p in enumerate(probs))
  return n[-1]


def tokens_per_iteration_at_lengths(alpha: float, gamma: int,
                                    lengths: Sequence[int]) -> float:
  """E for outputs of these lengths: their tokens over their mean iterations.

  The formula's E is the limit for long outputs; short ones fall below it because each
  one ends inside a block (see `expected_iterations`).

  Args:
    alpha: acceptance rate in [0, 1].
    gamma: G >= 1.
    lengths: [N] tokens of each output (EOS included).

  Returns:
    sum(lengths) / sum(N(length)), or E when there are no tokens.
  """
  counts = collections.Counter(int(n) for n in lengths)
  total = sum(k * expected_iterations(alpha, gamma, n) for n, k in counts.items())
  tokens = float(sum(n * k for n, k in counts.items()))
  return tokens / total if total > 0 else expected_tokens_per_call(alpha, gamma)


def tree_speedup(tokens_per_call: float, draft_cost: float, verify_cost: float) -> float:
  """S = E / (draft cost + v): the speedup of a proposal of any shape (a chain or a token
  tree) over the target alone, the formula's `speedup` with its parts measured apart.

  Args:
    tokens_per_call: E, tokens produced per target call (e.g. a probe decode's).
    draft_cost: the proposal's draft calls over one target step (a chain's G c).
    verify_cost: its verify call over a one-token target call (v(N + 1) for N nodes).

  Returns:
    The predicted speedup factor.
  """
  if tokens_per_call < 0 or draft_cost < 0 or verify_cost <= 0:
    raise ValueError(f'tokens_per_call and draft_cost must be >= 0 and verify_cost > 0, got '
                     f'{tokens_per_call}, {draft_cost}, {verify_cost}')
  return tokens_per_call / (draft_cost + verify_cost)
