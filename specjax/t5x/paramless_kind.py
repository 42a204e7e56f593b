"""The T5X route's draft kinds with no draft model and no params (`specjax.t5x.draft_kind`):
'copy', 'suffix', 'lookahead[:W,N,G]', 'bigram:TABLE', 'rest:DIR' and 'rest:DIR+suffix'.
Their names, their settings read and checked when gin builds the model, and their
proposers and the constants they decode with. Imports no t5x.

A bigram table's arrays (next ids [V', k] int32, log-probabilities [V', k] float32) and a
datastore's (the corpus [L], its suffix array [L'] and document starts [S], int32) are
constants of the decode, not params: module doc of `specjax.t5x.draft_kind`.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

from specjax.datastore import store as datastore
from specjax.proposers import bigram as bigram_lib
from specjax.proposers import draft_names as drafts
from specjax.proposers import rest as rest_lib
from specjax.proposers.trie import Mixture

SUFFIX, LOOKAHEAD, REST, COPY = drafts.SUFFIX, drafts.LOOKAHEAD, drafts.REST, drafts.COPY
BIGRAM = drafts.BIGRAM
REST_SUFFIX = REST + drafts.PLUS_SUFFIX  # 'rest+suffix': the name of 'rest:DIR+suffix'
# The kinds that retrieve continuations and verify a chain or their trie (a dynamic tree).
RETRIEVAL = (SUFFIX, REST, REST_SUFFIX)
# The kinds with no draft model, no checkpoint and no params.
NAMES = RETRIEVAL + (COPY, LOOKAHEAD, BIGRAM)
TABLE_FORM = ("pass 'bigram:TABLE', TABLE the .npz file python -m specjax.datastore bigram "
              "wrote with the model's vocabulary")
_READS = {SUFFIX: 'the row\'s own text', COPY: 'the row\'s input',
          LOOKAHEAD: 'the target\'s own guesses', BIGRAM: 'its bigram table',
          REST: 'its datastore', REST_SUFFIX: 'its datastore and the row\'s own text'}


def name_of(kind: str) -> Optional[str]:
  """'copy', 'suffix', 'lookahead', 'bigram', 'rest' or 'rest+suffix' for a DRAFT_KIND of
  those (with or without its settings: 'lookahead:W,N,G', 'bigram:TABLE', 'rest:DIR',
  'rest:DIR+suffix'), else None."""
  if kind in (COPY, SUFFIX):
    return kind
  if drafts.is_lookahead(kind):
    return LOOKAHEAD
  if drafts.is_bigram(kind):
    return BIGRAM
  if kind in (REST, REST_SUFFIX) or kind.startswith(REST + ':'):
    return REST_SUFFIX if kind.endswith(drafts.PLUS_SUFFIX) else REST
  return None


def spell(name: str, path: Optional[str], lookahead: Tuple[int, ...]) -> str:
  """The DRAFT_KIND of a kind with no params, given its settings."""
  if name == LOOKAHEAD:
    return f'{LOOKAHEAD}:{",".join(map(str, lookahead))}'
  if name in (REST, BIGRAM):
    return f'{name}:{path}'
  if name == REST_SUFFIX:
    return f'{REST}:{path}{drafts.PLUS_SUFFIX}'
  return name


def read(kind: str, name: str, draft_module, draft_checkpoint_path: Optional[str],
         vocabulary=None, vocab_size: Optional[int] = None) -> dict:
  """The settings of a kind `name_of` names, read and checked: {'path', 'lookahead',
  'datastore', 'table'} (`DraftKind`'s fields of those names).

  Raises:
    ValueError: bad W,N,G of 'lookahead:W,N,G'; 'bigram' or 'rest' with no file; a module
      or checkpoint bound; a table or datastore that is missing, damaged, built with
      another vocabulary or with more ids than vocab_size (one line naming the binding).
  """
  values, path, store, table = (), None, None, None
  if name == LOOKAHEAD:
    try:
      values = drafts.parse_lookahead(kind)
    except ValueError:
      ranges = ', '.join(f'{k} in {a}..{b}' for k, (a, b) in drafts.LOOKAHEAD_BOUNDS.items())
      raise ValueError(f'DRAFT_KIND {kind!r}: pass \'lookahead\' or \'lookahead:W,N,G\' '
                       f'(window, n-gram size, guesses), e.g. \'lookahead:5,3,4\', with '
                       f'{ranges}') from None
  if name == BIGRAM:
    path = kind[len(BIGRAM) + 1:]
    if not path:
      raise ValueError(f'DRAFT_KIND {kind!r} needs its table: {TABLE_FORM}')
  if name in (REST, REST_SUFFIX):
    path = kind[len(REST) + 1:] if kind.startswith(REST + ':') else ''
    path = path[:-len(drafts.PLUS_SUFFIX)] if name == REST_SUFFIX else path
    if not path:
      raise ValueError(f'DRAFT_KIND {kind!r} needs its datastore: pass \'rest:DIR\' (or '
                       f'\'rest:DIR+suffix\'), DIR what {datastore.BUILD_COMMAND} --output '
                       'DIR wrote')
  for binding, value in (('DRAFT_MODULE', draft_module),
                         ('DRAFT_CHECKPOINT_PATH', draft_checkpoint_path)):
    if value is not None:
      raise ValueError(f'DRAFT_KIND {kind!r} drafts from {_READS[name]}, with no draft '
                       f'model or checkpoint: leave {binding} unbound (None)')
  try:
    if name == BIGRAM:
      table = bigram_lib.read_table(path)
      bigram_lib.check_fits(table[0].shape[0], vocab_size, path)
    if name in (REST, REST_SUFFIX):
      store = datastore.load(path, comparable_vocabulary(vocabulary))
      if vocab_size is not None and store.vocab_size > vocab_size:
        raise ValueError(too_wide(store, vocab_size))
  except (FileNotFoundError, OSError, ValueError) as e:
    raise ValueError(f'DRAFT_KIND {kind!r}: {" ".join(str(e).split())}') from None
  return {'path': path, 'lookahead': values, 'datastore': store, 'table': table}


def build(name: str, kind: str, store, table, target) -> Tuple[Any, Any]:
  """(proposer, the constants it decodes with) of a kind with no params for `target`.

  Args:
    name: as `name_of`; kind: its DRAFT_KIND (for errors).
    store, table: the datastore and the bigram table `read` read (or None).
    target: the specjax target.

  Raises:
    ValueError: a table or datastore holding ids the target cannot emit (one line).
  """
  if name == SUFFIX:
    return drafts.suffix_draft(target), {}
  if name == COPY:
    return drafts.copy_draft(target), {}
  if name == LOOKAHEAD:
    return drafts.lookahead(kind, target), {}
  try:
    if name == BIGRAM:
      return bigram_lib.table_for(*table, target.vocab_size, target.eos_id, target.pad_id,
                                  kind[len(BIGRAM) + 1:])
    if store.vocab_size > target.vocab_size:
      raise ValueError(too_wide(store, target.vocab_size))
  except ValueError as e:
    raise ValueError(f'DRAFT_KIND {kind!r}: {e}') from None
  rest, params = rest_lib.from_arrays(store.tokens, store.suffixes, store.max_query, target)
  if name == REST:
    return rest, params
  return Mixture((rest, drafts.suffix_draft(target))), {'0': params, '1': {}}


def too_wide(store, logits: int) -> str:
  """Why a datastore built with more ids than the target's logits is refused."""
  return (f'datastore {store.path} was built with a vocabulary of {store.vocab_size} ids, '
          f'more than the target\'s {logits} logits; build it with the target\'s vocabulary')


def comparable_vocabulary(vocabulary) -> Any:
  """What a datastore's vocabulary fingerprint is compared with (`specjax.datastore.load`):
  `vocabulary` itself where it has `serialized()` (specjax's), the SentencePiece model
  file of a seqio `SentencePieceVocabulary` read as `python -m specjax.datastore build
  --vocab FILE` reads it (its extra ids are not in the file), else None: a vocabulary
  without a model file (seqio's PassThroughVocabulary) is not compared, and only its
  size is checked.

  Raises:
    FileNotFoundError, ValueError: the model file does not read (one line).
  """
  if vocabulary is None or hasattr(vocabulary, 'serialized'):
    return vocabulary
  path = getattr(vocabulary, 'sentencepiece_model_file', None)
  if not path:
    return None
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  return checkpoints.load_vocab(path)
