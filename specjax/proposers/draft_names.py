"""The names of the drafts with no draft model, as `--draft` and the T5X route's
DRAFT_KIND spell them, and lookahead's W, N, G: parsed in one place for both."""
from __future__ import annotations

from typing import Tuple

from specjax.proposers.lookahead import LookaheadDraft

REST, SUFFIX = 'rest', 'suffix'
PLUS_SUFFIX = '+suffix'  # rest[:DIR]+suffix: one trie of both's continuations
LOOKAHEAD = 'lookahead'
# lookahead's W, N and G: their defaults and bounds.
LOOKAHEAD_DEFAULT = (5, 3, 4)
LOOKAHEAD_BOUNDS = {'W': (1, 32), 'N': (2, 8), 'G': (1, 32)}


def is_lookahead(spec: str) -> bool:
  """Whether `spec` is 'lookahead' or 'lookahead:W,N,G'."""
  return spec == LOOKAHEAD or spec.startswith(LOOKAHEAD + ':')


def parse_lookahead(spec: str) -> Tuple[int, int, int]:
  """(W, N, G) of 'lookahead' (the defaults) or 'lookahead:W,N,G'.

  Raises:
    ValueError: another form, or a value out of its range (one line naming them).
  """
  if spec == LOOKAHEAD:
    return LOOKAHEAD_DEFAULT
  ranges = ', '.join(f'{k} in {a}..{b}' for k, (a, b) in LOOKAHEAD_BOUNDS.items())
  form = (f'--draft {spec}: lookahead takes lookahead:W,N,G (window, n-gram size, '
          f'guesses), e.g. lookahead:5,3,4, with {ranges}')
  try:
    values = tuple(int(v) for v in spec[len(LOOKAHEAD) + 1:].split(','))
  except ValueError:
    raise ValueError(form) from None
  if len(values) != 3 or any(not a <= v <= b for v, (a, b) in
                             zip(values, LOOKAHEAD_BOUNDS.values())):
    raise ValueError(form)
  return values


def lookahead(spec: str, target) -> LookaheadDraft:
  """The LookaheadDraft of a spec for `target` (an encoder-decoder's input seeds its pool)."""
  window, ngram, guesses = parse_lookahead(spec)
  return LookaheadDraft(target.vocab_size, window, ngram, guesses,
                        source=bool(target.encoded_axes()), eos_id=target.eos_id,
                        pad_id=target.pad_id)


def lookahead_tree(spec: str):
  """The tree 'lookahead' or 'lookahead:W,N,G' verifies (its `tree_spec`), known before
  any model loads: a DynamicTree of its window and its n-grams' nodes.

  Raises:
    ValueError: as `parse_lookahead`.
  """
  window, ngram, guesses = parse_lookahead(spec)
  return LookaheadDraft(1, window, ngram, guesses).tree_spec()
