"""The reported figures of a decode, reduced from its counters: the one definition of each.

alpha, the acceptance rate, tokens, accepted and drafted tokens per target call, and the
acceptance per draft position are ratios of `DecodeStats` counters. The CLI's summary, the
bench, `evaluate`, the T5X aux outputs, the calibration and `DecodeStats`' own properties
all call `decode_figures` (or `per_example_figures`), so a figure has the same meaning
wherever it is reported. The histogram of accepted depths is one more such ratio (a tree
decode's summary reports it).

Shape letters: B rows, G gamma, E examples (T5X: each holds B / E consecutive rows).
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional

import jax
import jax.numpy as jnp
import numpy as np


class Figures(NamedTuple):
  """The figures of a decode, scalars (or [E] per example, [E, G] per position).

  Every ratio is 0.0 where its denominator is 0 (nothing decoded, or no draft position
  verified): a decode that made no call reports no acceptance rather than a NaN.

  Attributes:
    alpha: beta_sum / beta_count: the mean of beta = sum_x min(p(x), q(x)) over the draft
      positions the target verified on the output's own prefix (the paper's estimate of
      the acceptance rate).
    acceptance_rate: accepted / beta_count: the same positions' acceptance counted instead
      of estimated.
    tokens_per_call: generated / target_calls: output tokens (EOS included) per per-row
      target call. Nothing past a row's EOS or max_decode_len counts, so the call in which
      a row ends inside its accepted drafts adds no bonus token.
    accepted_per_call: accepted / target_calls: accepted draft tokens in the output per
      per-row target call.
    drafted_per_call: drafted / target_calls: draft tokens proposed per per-row target
      call (G at a fixed gamma, fewer under a draft threshold).
    accepted_per_position: [G] (or [E, G]) accepted_per_position / target_calls, both
      summed over rows: the share of target calls whose accepted prefix reached past draft
      position i (0-based), so element i is the chance that at least i + 1 drafts of a
      call are accepted (alpha^(i + 1) when acceptances are independent with rate alpha),
      and the elements sum to accepted_per_call. Every call counts in the denominator,
      not only those that verified position i: the counters do not record how far each
      call verified. None when the counters have no accepted_per_position.
    accepted_depths: [G + 1] (or [E, G + 1]): the share of target calls whose accepted
      prefix in the output (with a tree: the accepted root path) is exactly k drafts deep,
      k = 0 .. G, from the same counts (target_calls, then accepted_per_position, then 0,
      each minus the next, over target_calls): a histogram of the accepted depth, summing
      to 1 where any call was made. None when the counters have no accepted_per_position.
  """

  alpha: Any
  acceptance_rate: Any
  tokens_per_call: Any
  accepted_per_call: Any
  drafted_per_call: Any
  accepted_per_position: Any
  accepted_depths: Any = None


def decode_figures(stats: Any) -> Figures:
  """The figures of a decode, over all its rows.

  Args:
    stats: a `DecodeStats` (counters [B], accepted_per_position [B, G]), or anything with
      its counter attributes already summed over rows and decode calls (scalars,
      accepted_per_position [G]): target_calls, accepted, generated, beta_sum, beta_count,
      and optionally drafted and accepted_per_position. numpy arrays or Python numbers
      give numpy arrays (0-d for a scalar); jax arrays (traced ones too) give jax arrays.

  Returns:
    Figures of scalars (accepted_per_position [G], or None).
  """
  xp = _array_module(stats)
  rows = lambda x: x if x is None or xp.ndim(x) == 0 else xp.sum(x, axis=0)
  per_row = xp.ndim(stats.target_calls) > 0
  position = _get(stats, 'accepted_per_position')
  if position is not None and per_row:
    position = xp.sum(position, axis=0)  # [B, G] -> [G]
  return _ratios(xp, {name: rows(_get(stats, name)) for name in _COUNTERS}, position)


def per_example_figures(stats: Any, num_examples: int) -> Figures:
  """The figures of each example when its decodes are consecutive rows (T5X's N decodes).

  Args:
    stats: a `DecodeStats` of E * N rows (counters [E * N], accepted_per_position
      [E * N, G]), example e holding rows e * N .. e * N + N - 1.
    num_examples: E.

  Returns:
    Figures of [E] arrays (accepted_per_position [E, G], or None).
  """
  xp = _array_module(stats)
  group = lambda x: x if x is None else xp.sum(xp.reshape(x, (num_examples, -1)), axis=1)
  position = _get(stats, 'accepted_per_position')
  if position is not None:
    position = xp.sum(xp.reshape(position, (num_examples, -1, position.shape[-1])), axis=1)
  return _ratios(xp, {name: group(_get(stats, name)) for name in _COUNTERS}, position)


_COUNTERS = ('target_calls', 'drafted', 'accepted', 'generated', 'beta_sum', 'beta_count')


def _ratios(xp, c: dict, position: Optional[Any]) -> Figures:
  """The figures of counters summed over rows ([] or [E]; position [G] or [E, G])."""
  calls = c['target_calls']
  drafted = None if c['drafted'] is None else _ratio(xp, c['drafted'], calls)
  depths = None
  if position is not None:
    reached = xp.concatenate([xp.expand_dims(xp.asarray(calls), -1), position,
                              xp.zeros_like(position[..., :1])], axis=-1)  # [G + 2]
    depths = _ratio(xp, reached[..., :-1] - reached[..., 1:], xp.expand_dims(calls, -1))
    position = _ratio(xp, position, xp.expand_dims(calls, -1))  # [G] or [E, G]
  return Figures(alpha=_ratio(xp, c['beta_sum'], c['beta_count']),
                 acceptance_rate=_ratio(xp, c['accepted'], c['beta_count']),
                 tokens_per_call=_ratio(xp, c['generated'], calls),
                 accepted_per_call=_ratio(xp, c['accepted'], calls),
                 drafted_per_call=drafted, accepted_per_position=position,
                 accepted_depths=depths)


def _ratio(xp, num, den):
  """num / den, 0.0 where den is 0."""
  return xp.where(den > 0, num / xp.maximum(den, 1), 0.0)


def _get(stats: Any, name: str) -> Optional[Any]:
  """A counter of `stats`, or None when it has none."""
  return getattr(stats, name, None)


def _array_module(stats: Any):
  """jax.numpy when any counter is a jax array (traced included), else numpy."""
  names = _COUNTERS + ('accepted_per_position',)
  if any(isinstance(_get(stats, n), jax.Array) for n in names):
    return jnp
  return np
