"""The names of the drafts with no draft model and of cascades, as `--draft` and the T5X
route's DRAFT_KIND spell them, lookahead's W, N, G and a cascade's parts: parsed in one
place for both."""
from __future__ import annotations

import re
from typing import NamedTuple, Optional, Tuple

from specjax.proposers.copy import CopyDraft
from specjax.proposers.lookahead import LookaheadDraft
from specjax.proposers.suffix import SuffixDraft

REST, SUFFIX = 'rest', 'suffix'
PLUS_SUFFIX = '+suffix'  # rest[:DIR]+suffix: one trie of both's continuations
LOOKAHEAD = 'lookahead'
COPY, BIGRAM, CASCADE = 'copy', 'bigram', 'cascade:'
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


def copy_draft(target) -> CopyDraft:
  """The copy draft for `target`: it searches the encoder input of an encoder-decoder (a
  decoder-only target's prompt is in the output history already)."""
  return CopyDraft(target.vocab_size, source=bool(target.encoded_axes()),
                   eos_id=target.eos_id, pad_id=target.pad_id)


def suffix_draft(target) -> SuffixDraft:
  """The suffix draft for `target`: the row's own output, and an encoder-decoder's input."""
  return SuffixDraft(target.vocab_size, source=bool(target.encoded_axes()),
                     eos_id=target.eos_id, pad_id=target.pad_id)


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


def is_bigram(spec: str) -> bool:
  """Whether `spec` is 'bigram' or 'bigram:TABLE' (a table `python -m specjax.datastore
  bigram` wrote)."""
  return spec == BIGRAM or spec.startswith(BIGRAM + ':')


def table_path(spec: str) -> Optional[str]:
  """TABLE of 'bigram:TABLE', None for 'bigram' (the table given apart, or bundled).

  Raises:
    ValueError: 'bigram:' with no path (one line).
  """
  if spec == BIGRAM:
    return None
  if not spec[len(BIGRAM) + 1:]:
    raise ValueError(f'--draft {spec}: pass bigram:TABLE.npz, a table '
                     'python -m specjax.datastore bigram wrote, or bigram')
  return spec[len(BIGRAM) + 1:]


def is_retrieval(spec: str) -> bool:
  """Whether `spec` names a retrieval draft (rest, rest:DIR, suffix): it proposes the
  trie of what it retrieved, as a chain or a dynamic tree."""
  if spec.endswith(PLUS_SUFFIX) and spec != PLUS_SUFFIX[1:]:
    spec = spec[:-len(PLUS_SUFFIX)]
  return spec in (REST, SUFFIX) or spec.startswith(REST + ':')


# The proposers a cascade's cheaper part may be: they read only the sequence.
CHEAP = "bigram, bigram:TABLE, copy, suffix, rest or rest:DIR"


class Cascade(NamedTuple):
  """A parsed cascade spec.

  Attributes:
    vertical: True for NAME/CHEAP[/K], False for NAME:K,CHEAP.
    model: NAME, the draft model.
    cheap: CHEAP, the proposer that reads only the sequence.
    count: K: the cheap proposer's drafts per call of the model (vertical), or the
      model's drafts before the cheap one takes over (horizontal).
    calls: C, the model's calls per chain at most (vertical; None: no cap).
  """

  vertical: bool
  model: str
  cheap: str
  count: int
  calls: Optional[int] = None


def parse_cascade(spec: str) -> Cascade:
  """The Cascade of 'cascade:NAME/CHEAP[/K[/C]]' or 'cascade:NAME:K,CHEAP'.

  Raises:
    ValueError: another form, K < 1, C < 1, or a CHEAP part that is not one of CHEAP (one
      line naming the forms).
  """
  body = spec[len(CASCADE):]
  horizontal = re.fullmatch(r'([^,/:]+):(\d+),(.+)', body)
  vertical = re.fullmatch(r'([^,/:]+)/(.+?)(?:/(\d+)(?:/(\d+))?)?', body)
  if horizontal:
    parsed = Cascade(False, horizontal[1], horizontal[3], int(horizontal[2]))
  elif vertical:
    parsed = Cascade(True, vertical[1], vertical[2], int(vertical[3] or 3),
                     None if vertical[4] is None else int(vertical[4]))
  else:
    raise ValueError(f'--draft {spec}: a cascade is cascade:NAME/CHEAP (NAME\'s chain drafted '
                     'by CHEAP, 3 tokens per call of NAME; cascade:NAME/CHEAP/K for K, '
                     'cascade:NAME/CHEAP/K/C for at most C calls of NAME), or '
                     'cascade:NAME:K,CHEAP (NAME\'s first K drafts, then CHEAP\'s), NAME a '
                     f'draft model, CHEAP one of {CHEAP}')
  if parsed.count < 1:
    raise ValueError(f'--draft {spec}: K must be >= 1')
  if parsed.calls is not None and parsed.calls < 1:
    raise ValueError(f'--draft {spec}: C, the calls of {parsed.model} per chain at most, '
                     'must be >= 1')
  if not (parsed.cheap == COPY or is_bigram(parsed.cheap) or is_retrieval(parsed.cheap)):
    raise ValueError(f'--draft {spec}: the cheaper part {parsed.cheap!r} must read only the '
                     f'sequence: one of {CHEAP}')
  return parsed
