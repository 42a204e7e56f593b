"""A datastore directory's files, and what can be told of one without reading its arrays
(standard library only: the command line checks its --output before the slow imports)."""
from __future__ import annotations

import json
import os
from typing import Optional

MAX_QUERY = 8  # default: the suffix array is sorted by the first MAX_QUERY tokens of each suffix
MAX_QUERY_LIMIT = 64  # the longest sort key a datastore may have
META_FILE = 'datastore.json'
TOKENS_FILE = 'tokens.npy'
SUFFIXES_FILE = 'suffixes.npy'
BUILD_COMMAND = 'python -m specjax.datastore build'


def occupied(directory: str) -> bool:
  """Whether a datastore cannot be written to `directory`: it exists and is a file or a
  non-empty directory (an empty directory is replaced)."""
  return os.path.lexists(directory) and not (os.path.isdir(directory)
                                             and not os.listdir(directory))


def size_on_disk(directory: str) -> int:
  """Bytes of the files under `directory`."""
  return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(directory)
             for f in fs)


def human_size(size: int) -> str:
  """Bytes as '1.2 MB' (2^20) or '340 KB' (2^10)."""
  if size >= 2**20:
    return f'{size / 2**20:.1f} MB'
  return f'{size / 2**10:.0f} KB'


def read_meta(directory: str) -> Optional[dict]:
  """The datastore.json of `directory` as written, or None when there is none or it does
  not parse (`store.load` says why)."""
  try:
    with open(os.path.join(directory, META_FILE), encoding='utf-8') as f:
      meta = json.load(f)
  except (OSError, ValueError):
    return None
  return meta if isinstance(meta, dict) else None
