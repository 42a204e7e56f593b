"""The verification rule of a speculative decode: one frozen value inside `LoopConfig`.

Every entry point (`speculative_decode`, `traced_decode` inside T5X's jitted step, the
command line's config) builds it here and checks it here, so no route can drop a part of it.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

VERIFICATIONS = ('token', 'block', 'typical')
THRESHOLD_RULES = ('token', 'cumulative')
# Typical acceptance's (epsilon, delta) by default: Medusa's posterior threshold and alpha.
TYPICAL_DEFAULTS = (0.09, 0.3)


def typical_parameters(verification: str) -> Optional[Tuple[float, float]]:
  """(epsilon, delta) of 'typical' (the defaults) or 'typical:EPS:DELTA'; None for another
  rule.

  Raises:
    ValueError: a 'typical:...' that is not two numbers, epsilon outside (0, 1] or delta
      <= 0 (one line naming the form).
  """
  if verification != 'typical' and not verification.startswith('typical:'):
    return None
  if verification == 'typical':
    return TYPICAL_DEFAULTS
  try:
    epsilon, delta = (float(v) for v in verification.split(':')[1:])
  except ValueError:
    raise ValueError(f'verification {verification!r}: pass typical or typical:EPS:DELTA '
                     '(e.g. typical:0.09:0.3)') from None
  if not 0.0 < epsilon <= 1.0 or not delta > 0.0:
    raise ValueError(f'verification {verification!r}: typical acceptance needs 0 < EPS <= 1 '
                     'and DELTA > 0')
  return epsilon, delta


@dataclasses.dataclass(frozen=True)
class VerificationRule:
  """How the target checks the draft's proposals (hashable: part of the static config).

  Attributes:
    verification: 'token' (the paper's rule, each draft token in turn) or 'block' (block
      verification: the draft verified as a whole, at least as many tokens accepted in
      expectation); both exact, and identical for greedy rows. Or 'typical' /
      'typical:EPS:DELTA', Medusa's typical acceptance, which is NOT exact (sampled rows
      only): a draft token x is kept while p(x) > min(EPS, DELTA exp(-H(p))), H the
      entropy of the target's warped distribution p, and the token after the kept ones
      is drawn from p (defaults `TYPICAL_DEFAULTS`).
    draft_threshold: per-row dynamic gamma: a row stops proposing once its confidence
      falls under it (see threshold_rule); 0 drafts G always.
    threshold_rule: what the threshold is compared with: 'token', each draft token's own
      confidence (the draft's largest probability, as Hugging Face's
      assistant_confidence_threshold), or 'cumulative', the product of the row's
      confidences so far (the draft's estimate that every token it proposed is accepted).
    lenience: l in (0, 1]: accept when r * l * q(x) < p(x) (docs/algorithm.md, lenience);
      1 is exact, below 1 sampled outputs are no longer the target's.
  """

  verification: str = 'token'
  draft_threshold: float = 0.0
  threshold_rule: str = 'token'
  lenience: float = 1.0

  @property
  def typical(self) -> Optional[Tuple[float, float]]:
    """(epsilon, delta) of typical acceptance, or None for an exact rule."""
    return typical_parameters(self.verification)

  @property
  def exact(self) -> bool:
    """Whether outputs follow the target's distribution (every rule but a lenience < 1 and
    typical acceptance)."""
    return self.lenience >= 1.0 and self.typical is None

  def checked(self, greedy: bool) -> 'VerificationRule':
    """This rule with its numbers as floats, once checked against the decode's mode.

    Args:
      greedy: whether every row decodes greedily.

    Raises:
      ValueError: an unknown verification or threshold rule, a threshold outside [0, 1], a
        lenience outside (0, 1], a lenience with greedy decoding or block verification, or
        typical acceptance with greedy decoding or a lenience.
    """
    typical = self.typical  # a malformed typical:EPS:DELTA raises here
    if self.verification not in VERIFICATIONS and typical is None:
      raise ValueError(f'verification must be one of {", ".join(VERIFICATIONS)} (or '
                       f'typical:EPS:DELTA), got {self.verification!r}')
    if typical is not None and (greedy or self.lenience < 1.0):
      raise ValueError('typical acceptance changes the rule of sampled decoding only, in '
                       'place of the token rule: pass a temperature > 0 and lenience 1')
    if self.threshold_rule not in THRESHOLD_RULES:
      raise ValueError(f'the threshold rule must be one of {", ".join(THRESHOLD_RULES)}, '
                       f'got {self.threshold_rule!r}')
    if not 0.0 <= self.draft_threshold <= 1.0:
      raise ValueError(f'the draft confidence threshold must be in [0, 1] (0 drafts gamma '
                       f'tokens always), got {self.draft_threshold}')
    if not 0.0 < self.lenience <= 1.0:
      raise ValueError(f'lenience must be in (0, 1] (1 is exact), got {self.lenience}')
    if self.lenience < 1.0 and (greedy or self.verification == 'block'):
      raise ValueError('lenience changes the token rule of sampled decoding only; pass a '
                       'temperature > 0 and token verification, or lenience 1')
    return dataclasses.replace(self, draft_threshold=float(self.draft_threshold),
                               lenience=float(self.lenience))
