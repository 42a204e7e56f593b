"""Exact enumeration of Markov sequence probabilities and a chi-square check."""

import numpy as np
from scipy import stats

EOS, PAD = 1, 0


def enumerate_markov(trans: np.ndarray, start: int, length: int) -> dict:
  """Exact probability of every first-`length` output of a Markov chain from `start`.

  EOS ends a sequence: later positions are PAD, as the decoders write them.
  """
  probs = {}
  vocab = trans.shape[0]

  def walk(prefix, state, prob):
    if len(prefix) == length:
      probs[tuple(prefix)] = probs.get(tuple(prefix), 0.0) + prob
      return
    if EOS in prefix:
      walk(prefix + [PAD], state, prob)
      return
    for tok in range(vocab):
      if trans[state, tok] > 0:
        walk(prefix + [tok], tok, prob * trans[state, tok])

  walk([], start, 1.0)
  return probs


def chi_square_pvalue(samples: np.ndarray, expected: dict, min_count: float = 5.0) -> float:
  """p-value of observed rows of `samples` [N, length] against `expected` probabilities.

  Outcomes with expected count < min_count are pooled; an outcome of probability 0 that
  occurs makes the p-value 0.
  """
  n = samples.shape[0]
  observed = {}
  for row in map(tuple, samples.tolist()):
    observed[row] = observed.get(row, 0) + 1
  if any(k not in expected for k in observed):
    return 0.0
  obs, exp, pool_obs, pool_exp = [], [], 0, 0.0
  for key, p in expected.items():
    if p * n >= min_count:
      obs.append(observed.get(key, 0))
      exp.append(p * n)
    else:
      pool_obs += observed.get(key, 0)
      pool_exp += p * n
  if pool_exp > 0:
    obs.append(pool_obs)
    exp.append(pool_exp)
  exp = np.asarray(exp) * (n / np.sum(exp))
  return float(stats.chisquare(obs, exp).pvalue)
