"""A retrieval datastore: a corpus of token ids and its suffix array, on disk.

`build` concatenates documents (each followed by one separator, -1) and sorts the start
positions of their suffixes by each suffix's first `max_query` tokens; `write` saves it to a
directory, `load` reads one back with its checks. On disk:

  DIR/datastore.json  format name and version, vocab_size, vocab_sha256 (the vocabulary's
                      `vocab_fingerprint`), max_query, documents, tokens, suffixes,
                      token_dtype and separator (how tokens.npy stores them), source, built.
  DIR/tokens.npy      [L] the documents' ids, uint16 with 65535 after each document when
                      vocab_size < 65535, else int32 with -1.
  DIR/suffixes.npy    [L'] int32, the sorted suffix start positions (L' = L - documents).

Both arrays are plain .npy files: `np.load(path, mmap_mode='r')` memory-maps them.

Shape letters: L corpus tokens (separators included), L' suffixes, Q the sort key's length.
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import os
import shutil
import sys
import tempfile
from typing import Iterable, Optional, Sequence

import numpy as np

from specjax.checkpoints.registry import ASSETS, MANLM_ASSETS, MANPAGES_ASSETS
from specjax.datastore.layout import (BUILD_COMMAND, MAX_QUERY, MAX_QUERY_LIMIT, META_FILE,
                                      SUFFIXES_FILE, TOKENS_FILE, occupied, size_on_disk)

SEPARATOR = -1  # after each document in `Datastore.tokens`
FORMAT = 'specjax-datastore'
VERSION = 1
_UINT16_SEPARATOR = 65535  # the separator in a uint16 tokens.npy

# The bundled datastore of each bundled target (built by `python -m specjax.datastore build
# --task ...`; see the Datastore section of each pair's MODEL_CARD.md).
DEFAULT_DATASTORES = {
    'demo_target': os.path.join(ASSETS, 'datastore'),
    'manpages_target': os.path.join(MANPAGES_ASSETS, 'datastore'),
    'manlm_target': os.path.join(MANLM_ASSETS, 'datastore'),
}


@dataclasses.dataclass(frozen=True)
class Datastore:
  """A corpus and its suffix array.

  Attributes:
    path: the directory it was read from ('' if built in memory).
    tokens: [L] int32, every document's token ids, each document followed by one -1.
    suffixes: [L'] int32, the start positions i of the suffixes with tokens[i] != -1,
      sorted lexicographically by (tokens[i], ..., tokens[i + max_query - 1]), reading -1
      past the end of `tokens` (so -1 sorts before every id); ties by position.
    max_query: the sort key's length (the longest query a lookup may use).
    vocab_size: the vocabulary's number of ids.
    vocab_sha256: sha256 hex of the vocabulary's serialized() bytes.
    meta: the rest of datastore.json (documents, tokens, source, built, ...).
  """

  path: str
  tokens: np.ndarray
  suffixes: np.ndarray
  max_query: int
  vocab_size: int
  vocab_sha256: str
  meta: dict


def vocab_fingerprint(vocab) -> str:
  """sha256 hex of `vocab.serialized()` (a Vocabulary's or Tokenizer's model bytes)."""
  return hashlib.sha256(vocab.serialized()).hexdigest()


def _check_max_query(max_query: int) -> None:
  if not 1 <= int(max_query) <= MAX_QUERY_LIMIT:
    raise ValueError(f'max_query must be in [1, {MAX_QUERY_LIMIT}], got {max_query}; pass '
                     f'--max-query between 1 and {MAX_QUERY_LIMIT} (default {MAX_QUERY})')


SORT_BAR_SUFFIXES = 1 << 20  # a sort of fewer suffixes takes under a second: no bar


def with_progress(iterable, enabled: bool, **kw):
  """`iterable`, with a tqdm bar on stderr when `enabled`."""
  if not enabled:
    return iterable
  from tqdm import tqdm  # pylint: disable=import-outside-toplevel
  return tqdm(iterable, file=sys.stderr, leave=False, **kw)


def _concatenate(documents: Iterable[Sequence[int]], vocab_size: int, progress: bool
                 ) -> tuple:
  """(tokens [L] int32 with -1 after each non-empty document, their number)."""
  parts, count = [], 0
  for i, doc in enumerate(with_progress(documents, progress, desc='tokenising', unit='doc')):
    ids = np.asarray(doc, np.int64).reshape(-1)
    if not ids.size:
      continue
    bad = ids[(ids < 0) | (ids >= vocab_size)]
    if bad.size:
      raise ValueError(f'document {i} has id {int(bad[0])} outside [0, {vocab_size}); build '
                       'with the vocabulary that produced the ids (--vocab)')
    parts += [ids.astype(np.int32), np.array([SEPARATOR], np.int32)]
    count += 1
  tokens = np.concatenate(parts) if parts else np.zeros(0, np.int32)
  return tokens, count


def _sort_keys(tokens: np.ndarray, positions: np.ndarray, max_query: int, vocab_size: int):
  """The sort key of each position, as uint64 words (most significant first, built lazily):
  tokens[p + k] + 1 (0 for the separator and past the end) packed `per_word` at a time."""
  bits = max(1, int(vocab_size).bit_length())  # the values 0..vocab_size
  per_word = max(1, 64 // bits)
  padded = np.concatenate([tokens, np.full(max_query, SEPARATOR, np.int32)])  # [L + Q]
  padded = (padded.astype(np.int64) + 1).astype(np.uint64)

  def word(start):
    key = np.zeros(len(positions), np.uint64)
    for k in range(start, min(start + per_word, max_query)):
      key = (key << np.uint64(bits)) | padded[positions + k]
    return key
  return [lambda s=s: word(s) for s in range(0, max_query, per_word)]


def _suffix_array(tokens: np.ndarray, max_query: int, vocab_size: int, progress: bool
                  ) -> np.ndarray:
  """[L'] int32: the positions of tokens != -1, sorted by their first max_query tokens, ties
  by position (stable sorts from the least significant key word up, as np.lexsort does)."""
  positions = np.flatnonzero(tokens != SEPARATOR).astype(np.int64)
  order = np.arange(len(positions))
  words = _sort_keys(tokens, positions, max_query, vocab_size)
  shown = progress and len(positions) >= SORT_BAR_SUFFIXES
  for word in with_progress(words[::-1], shown, desc='sorting', unit='pass'):
    order = order[np.argsort(word()[order], kind='stable')]
  return positions[order].astype(np.int32)


def build(documents: Iterable[Sequence[int]], vocab_size: int, vocab_sha256: str,
          max_query: int = MAX_QUERY, progress: bool = False, source: str = '') -> Datastore:
  """A datastore of `documents`, in memory.

  Args:
    documents: each one's token ids, as the decoder outputs them (EOS included); empty
      ones are skipped.
    vocab_size: the vocabulary's number of ids (every id must be below it).
    vocab_sha256: the vocabulary's `vocab_fingerprint`.
    max_query: the sort key's length, in [1, MAX_QUERY_LIMIT].
    progress: show tqdm bars on stderr while reading the documents and sorting.
    source: where the documents came from (kept in the meta).

  Raises:
    ValueError: no document has a token, an id is outside [0, vocab_size), or max_query
      is out of range.
  """
  _check_max_query(max_query)
  if int(vocab_size) < 1 or int(vocab_size) > np.iinfo(np.int32).max:
    raise ValueError(f'vocab_size must be in [1, 2^31), got {vocab_size}')
  tokens, count = _concatenate(documents, int(vocab_size), progress)
  if not count:
    raise ValueError(f'no text in {source or "the documents"}: every document is empty; '
                     'pass documents with at least one token')
  suffixes = _suffix_array(tokens, int(max_query), int(vocab_size), progress)
  built = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
  meta = {'documents': count, 'tokens': int(len(tokens)), 'suffixes': int(len(suffixes)),
          'source': source, 'built': built}
  return Datastore('', tokens, suffixes, int(max_query), int(vocab_size), str(vocab_sha256),
                   meta)


def _token_dtype(vocab_size: int) -> tuple:
  """(the dtype tokens.npy stores ids as, its separator)."""
  if vocab_size < _UINT16_SEPARATOR:
    return np.dtype(np.uint16), _UINT16_SEPARATOR
  return np.dtype(np.int32), SEPARATOR


def write(store: Datastore, directory: str) -> None:
  """Writes `store` to `directory` (created; its parent too): the files go to a temporary
  directory beside it, renamed into place when whole, so an interrupted write leaves none.

  Raises:
    FileExistsError: `directory` exists (a file or a non-empty directory).
  """
  directory = os.path.normpath(os.fspath(directory))
  if occupied(directory):
    raise FileExistsError(f'{directory} already exists; remove it (rm -r {directory}) or '
                          'write the datastore elsewhere (--output)')
  tokens = np.asarray(store.tokens)
  dtype, separator = _token_dtype(store.vocab_size)
  documents = int(np.count_nonzero(tokens == SEPARATOR))
  meta = {'format': FORMAT, 'version': VERSION, 'vocab_size': store.vocab_size,
          'vocab_sha256': store.vocab_sha256, 'max_query': store.max_query,
          **{k: v for k, v in store.meta.items()
             if k not in ('format', 'version', 'token_dtype', 'separator')},
          'documents': documents, 'tokens': int(len(tokens)),
          'suffixes': int(len(store.suffixes)), 'token_dtype': dtype.name,
          'separator': separator}
  parent = os.path.dirname(directory) or '.'
  os.makedirs(parent, exist_ok=True)
  tmp = tempfile.mkdtemp(prefix=f'.{os.path.basename(directory)}.partial-', dir=parent)
  try:
    on_disk = np.where(tokens == SEPARATOR, separator, tokens).astype(dtype)
    np.save(os.path.join(tmp, TOKENS_FILE), on_disk)
    np.save(os.path.join(tmp, SUFFIXES_FILE), np.asarray(store.suffixes, np.int32))
    with open(os.path.join(tmp, META_FILE), 'w', encoding='utf-8') as f:
      json.dump(meta, f, indent=1, ensure_ascii=False)
      f.write('\n')
    os.chmod(tmp, 0o755)
    if os.path.isdir(directory):
      os.rmdir(directory)  # empty (checked above)
    os.rename(tmp, directory)
  except BaseException:
    shutil.rmtree(tmp, ignore_errors=True)
    raise


def _rebuild(directory: str) -> str:
  return f'rebuild it with {BUILD_COMMAND} --output {directory} (see --help)'


def _read_meta(directory: str) -> dict:
  path = os.path.join(directory, META_FILE)
  if not os.path.isfile(path):
    raise ValueError(f'{directory} is not a datastore (no {META_FILE}); build one with '
                     f'{BUILD_COMMAND} --output {directory}')
  try:
    with open(path, encoding='utf-8') as f:
      meta = json.load(f)
  except (ValueError, OSError) as e:
    reason = ' '.join(str(e).split())
    raise ValueError(f'{directory} is not a datastore ({META_FILE} does not parse: '
                     f'{reason}); {_rebuild(directory)}') from None
  if not isinstance(meta, dict) or meta.get('format') != FORMAT:
    found = meta.get('format') if isinstance(meta, dict) else type(meta).__name__
    raise ValueError(f'{directory} is not a datastore ({META_FILE} has format {found!r}, '
                     f'not {FORMAT!r}); {_rebuild(directory)}')
  if meta.get('version') != VERSION:
    raise ValueError(f'{directory} is a version {meta.get("version")!r} datastore; this '
                     f'specjax reads version {VERSION}: {_rebuild(directory)}')
  fields = ('vocab_size', 'vocab_sha256', 'max_query', 'documents', 'tokens', 'suffixes',
            'token_dtype', 'separator')
  missing = [k for k in fields if k not in meta]
  if missing:
    raise ValueError(f'{directory} is not a datastore ({META_FILE} lacks '
                     f'{", ".join(missing)}); {_rebuild(directory)}')
  counts = ('vocab_size', 'max_query', 'documents', 'tokens', 'suffixes')
  bad = [k for k in counts + ('separator',) if isinstance(meta[k], bool)
         or not isinstance(meta[k], int) or (k in counts and meta[k] < 0)]
  if bad or meta['vocab_size'] < 1 or not 1 <= meta['max_query'] <= MAX_QUERY_LIMIT:
    raise ValueError(f'{directory} is not a datastore ({META_FILE} has bad '
                     f'{", ".join(bad) or "vocab_size or max_query"}); {_rebuild(directory)}')
  return meta


def _read_array(directory: str, name: str, dtype, count: int) -> np.ndarray:
  """The memory-mapped [count] array `name` of dtype `dtype`."""
  path = os.path.join(directory, name)
  if not os.path.isfile(path):
    raise ValueError(f'{directory} is not a whole datastore (no {name}); '
                     f'{_rebuild(directory)}')
  try:
    array = np.load(path, mmap_mode='r', allow_pickle=False)
  except (ValueError, OSError, EOFError) as e:
    reason = ' '.join(str(e).split())
    raise ValueError(f'{directory}/{name} does not read as .npy ({reason}); '
                     f'{_rebuild(directory)}') from None
  if array.dtype != dtype or array.shape != (count,):
    raise ValueError(f'{directory}/{name} is {array.dtype}{list(array.shape)} but '
                     f'{META_FILE} says {np.dtype(dtype).name}[{count}]; '
                     f'{_rebuild(directory)}')
  return array


def _check_vocab(directory: str, meta: dict, vocab) -> None:
  found = vocab_fingerprint(vocab)
  if found != meta['vocab_sha256']:
    name = getattr(vocab, 'path', 'the given vocabulary')
    raise ValueError(f'datastore {directory} was built with another vocabulary (sha256 '
                     f'{meta["vocab_sha256"][:12]}...) than {name} (sha256 {found[:12]}...); '
                     f'rebuild it with {BUILD_COMMAND} --vocab {name} --output DIR, or pass '
                     'the datastore of this vocabulary')


def _tokens_int32(directory: str, meta: dict, stored: np.ndarray) -> np.ndarray:
  """tokens.npy as [L] int32 with -1 separators, its ids checked against vocab_size."""
  vocab_size, separator = int(meta['vocab_size']), int(meta['separator'])
  is_sep = stored == separator
  ids = stored[~is_sep]
  if ids.size:
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
      bad = low if low < 0 else high
      raise ValueError(f'datastore {directory} holds id {bad} outside [0, {vocab_size}) of '
                       f'its vocabulary: it is damaged; {_rebuild(directory)}')
  if int(np.count_nonzero(is_sep)) != meta['documents'] or not is_sep[-1]:
    raise ValueError(f'datastore {directory} has {int(np.count_nonzero(is_sep))} document '
                     f'separators (the last token {"is" if is_sep[-1] else "is not"} one) but '
                     f'{META_FILE} counts {meta["documents"]} documents; {_rebuild(directory)}')
  tokens = np.asarray(stored, np.int32).copy()
  tokens[is_sep] = SEPARATOR
  return tokens


def load(directory: str, vocab=None) -> Datastore:
  """Reads and checks the datastore in `directory`.

  Args:
    directory: what `write` wrote.
    vocab: optional vocabulary (anything with .serialized()): refuse a datastore built with
      another one.

  Returns:
    The datastore: tokens [L] int32 (in memory, -1 separators), suffixes [L'] int32
    (memory-mapped).

  Raises:
    FileNotFoundError: no such directory.
    ValueError: not a datastore (no or bad datastore.json, another format or version,
      missing arrays or arrays that disagree with its counts), an empty one, one built with
      another vocabulary than `vocab`, or ids outside [0, vocab_size). Each message is one
      line naming the fix.
  """
  directory = os.fspath(directory)
  if not os.path.isdir(directory):
    raise FileNotFoundError(f'no datastore directory {directory}; build one with '
                            f'{BUILD_COMMAND} --output {directory} (see --help)')
  meta = _read_meta(directory)
  if not meta['tokens']:
    raise ValueError(f'datastore {directory} is empty (0 tokens); rebuild it from a corpus '
                     f'with text: {BUILD_COMMAND} --input FILE --output {directory}')
  if vocab is not None:
    _check_vocab(directory, meta, vocab)
  dtype, separator = _token_dtype(int(meta['vocab_size']))
  if meta['token_dtype'] != dtype.name or meta['separator'] != separator:
    raise ValueError(f'datastore {directory} stores tokens as {meta["token_dtype"]} with '
                     f'separator {meta["separator"]} but a vocabulary of {meta["vocab_size"]} '
                     f'ids needs {dtype.name} with {separator}; {_rebuild(directory)}')
  stored = _read_array(directory, TOKENS_FILE, dtype, int(meta['tokens']))
  if meta['suffixes'] != meta['tokens'] - meta['documents']:
    raise ValueError(f'datastore {directory} counts {meta["suffixes"]} suffixes in '
                     f'{META_FILE}, not its {meta["tokens"]} tokens less its '
                     f'{meta["documents"]} separators; {_rebuild(directory)}')
  suffixes = _read_array(directory, SUFFIXES_FILE, np.dtype(np.int32), int(meta['suffixes']))
  tokens = _tokens_int32(directory, meta, stored)
  if suffixes.size and (int(suffixes.min()) < 0 or int(suffixes.max()) >= len(tokens)):
    raise ValueError(f'datastore {directory} has suffix positions outside its '
                     f'{len(tokens)} tokens: it is damaged; {_rebuild(directory)}')
  rest = {k: v for k, v in meta.items() if k not in ('vocab_size', 'vocab_sha256',
                                                     'max_query')}
  return Datastore(directory, tokens, suffixes, int(meta['max_query']),
                   int(meta['vocab_size']), str(meta['vocab_sha256']), rest)


def summary(store: Datastore, directory: Optional[str] = None) -> dict:
  """What a written datastore holds: path, documents, tokens, suffixes, bytes on disk,
  max_query, vocab_size, source."""
  directory = directory or store.path
  return {'path': directory, 'documents': store.meta.get('documents'),
          'tokens': int(len(store.tokens)), 'suffixes': int(len(store.suffixes)),
          'bytes': size_on_disk(directory) if directory else 0,
          'max_query': store.max_query, 'vocab_size': store.vocab_size,
          'source': store.meta.get('source', '')}
