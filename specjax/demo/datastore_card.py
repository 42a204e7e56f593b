"""The "Datastore" section of a bundled pair's MODEL_CARD.md: what its retrieval datastore
(`specjax.datastore`, built by `python -m specjax.datastore build --task ...`) holds, read
from the datastore's own datastore.json."""
from __future__ import annotations

import json
import os
from typing import List

DIRECTORY = 'datastore'  # in a bundled pair's assets folder
META_FILE = 'datastore.json'  # specjax.datastore.layout.META_FILE


def _size(directory: str) -> str:
  total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(directory)
              for f in fs)
  return f'{total / 2**20:.2f} MB'


def section(assets: str) -> List[str]:
  """The section's markdown lines for the datastore in `assets`/datastore ([] if none)."""
  directory = os.path.join(assets, DIRECTORY)
  try:
    with open(os.path.join(directory, META_FILE), encoding='utf-8') as f:
      meta = json.load(f)
  except (OSError, ValueError):
    return []
  return [
      '## Datastore', '',
      f'`{DIRECTORY}/` is the retrieval datastore of `--draft rest` (`specjax.proposers.rest`'
      f'; `specjax.datastore.DEFAULT_DATASTORES[\'{meta.get("target", "?")}\']`): '
      f'{meta.get("source", "?")}, each tokenised with `{meta.get("vocab", "?")}` and '
      'followed by EOS as the decoder writes it, and their suffix array, sorted by each '
      f'suffix\'s first {meta.get("max_query", "?")} tokens. Built with '
      f'`{meta.get("command", "?")}`: {meta.get("documents", "?")} documents, '
      f'{meta.get("tokens", "?")} tokens (a separator after each document included), '
      f'{_size(directory)} on disk (`tokens.npy` {meta.get("token_dtype", "?")}, '
      '`suffixes.npy` int32, `datastore.json`).', '']
