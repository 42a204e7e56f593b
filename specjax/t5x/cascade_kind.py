"""The T5X route's cascades: DRAFT_KIND 'cascade:model/CHEAP[/K[/C]]' (vertical) or
'cascade:model:K,CHEAP' (horizontal), `--draft cascade:NAME/...` with NAME the draft model
of DRAFT_CHECKPOINT_PATH or DRAFT_MODULE, spelled 'model'. Their forms and spelling (the
proposer and its params: `specjax.proposers.cascade.of_parts`, `params_of`);
`specjax.t5x.draft_kind` parses them and their CHEAP part. Imports no t5x.
"""
from __future__ import annotations

from typing import Optional

from specjax.proposers import draft_names as drafts

MODEL = 'model'  # the cascade's draft model: DRAFT_CHECKPOINT_PATH's or DRAFT_MODULE's
FORMS = ("pass 'cascade:model/CHEAP' (the draft model's chain drafted by CHEAP, 3 tokens per "
         "call of the draft model), 'cascade:model/CHEAP/K' (K per call), "
         "'cascade:model/CHEAP/K/C' (in at most C calls), or 'cascade:model:K,CHEAP' (the "
         "draft model's first K drafts, then CHEAP's), K and C >= 1, CHEAP one of copy, "
         "suffix, bigram:TABLE, rest:DIR or rest:DIR+suffix, 'model' the draft model of "
         "DRAFT_CHECKPOINT_PATH or DRAFT_MODULE")


def parts(kind: str) -> Optional[drafts.Cascade]:
  """The parts of a cascade's DRAFT_KIND, or None where it is not one of FORMS' shapes (its
  CHEAP is checked by the caller)."""
  try:
    parsed = drafts.parse_cascade(kind)
  except ValueError:
    return None
  return None if parsed.model != MODEL else parsed


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
