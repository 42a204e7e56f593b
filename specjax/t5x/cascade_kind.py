"""The T5X route's cascades: DRAFT_KIND 'cascade:model/CHEAP[/K[/C]]' (vertical) or
'cascade:model:K,CHEAP' (horizontal), `--draft cascade:NAME/...` with NAME the draft model
of DRAFT_CHECKPOINT_PATH or DRAFT_MODULE, spelled 'model'. Their forms, the proposer built
around the draft model, its params and its spelling; `specjax.t5x.draft_kind` parses them
and their CHEAP part. Imports no t5x.
"""
from __future__ import annotations

from typing import Any, Optional

from specjax.core.model_proposer import as_proposer
from specjax.proposers import draft_names as drafts
from specjax.proposers.cascade import HorizontalCascade, VerticalCascade

MODEL = 'model'  # the cascade's draft model: DRAFT_CHECKPOINT_PATH's or DRAFT_MODULE's
FORMS = ("pass 'cascade:model/CHEAP' (the draft model's chain drafted by CHEAP, 3 tokens per "
         "call of the draft model), 'cascade:model/CHEAP/K' (K per call), "
         "'cascade:model/CHEAP/K/C' (in at most C calls), or 'cascade:model:K,CHEAP' (the "
         "draft model's first K drafts, then CHEAP's), K and C >= 1, CHEAP one of copy, "
         "suffix, rest:DIR or rest:DIR+suffix, 'model' the draft model of "
         "DRAFT_CHECKPOINT_PATH or DRAFT_MODULE")


def parts(kind: str) -> Optional[drafts.Cascade]:
  """The parts of a cascade's DRAFT_KIND, or None where it is not one of FORMS' shapes (its
  CHEAP is checked by the caller)."""
  try:
    parsed = drafts.parse_cascade(kind)
  except ValueError:
    return None
  return None if parsed.model != MODEL or parsed.cheap == drafts.BIGRAM else parsed


def around(cascade: drafts.Cascade, draft: Any, cheap: Any) -> Any:
  """The cascade of the draft model `draft` (a `specjax.models.base.Model`) and the
  proposer `cheap`."""
  if cascade.vertical:
    return VerticalCascade(draft, cheap, cascade.count, cascade.calls)
  return HorizontalCascade(as_proposer(draft), cheap, cascade.count)


def params(cascade: drafts.Cascade, stored: Any, cheap: Any) -> dict:
  """The cascade's params: {'draft': the draft model's, 'inner': CHEAP's} (vertical) or
  {'first': ..., 'rest': ...} (horizontal)."""
  return {'draft': stored, 'inner': cheap} if cascade.vertical else {'first': stored,
                                                                     'rest': cheap}


def spell(cascade: drafts.Cascade, cheap: str) -> str:
  """The DRAFT_KIND of `cascade`, its CHEAP part spelled `cheap`."""
  if not cascade.vertical:
    return f'{drafts.CASCADE}{MODEL}:{cascade.count},{cheap}'
  calls = '' if cascade.calls is None else f'/{cascade.calls}'
  return f'{drafts.CASCADE}{MODEL}/{cheap}/{cascade.count}{calls}'


def check_gamma(cascade: drafts.Cascade, kind: str, gamma: int) -> None:
  """Refuses a GAMMA that a horizontal cascade's draft model would draft alone.

  Raises:
    ValueError: 'cascade:model:K,CHEAP' with GAMMA <= K (one line).
  """
  if not cascade.vertical and gamma <= cascade.count:
    raise ValueError(f'DRAFT_KIND {kind!r} drafts its first {cascade.count} tokens with the '
                     f'draft model and the rest with {cascade.cheap}: set GAMMA above '
                     f'{cascade.count}')
