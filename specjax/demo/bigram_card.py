"""The "Bigram table" section of a bundled pair's MODEL_CARD.md: what its bigram.npz (the
table of `--draft bigram`, `specjax.proposers.bigram`) holds and the command that wrote it,
read from the table itself."""
from __future__ import annotations

import os
import zipfile
from typing import List

import numpy as np

FILE = 'bigram.npz'  # in a bundled pair's assets folder (specjax.job.drafts.DEFAULT_BIGRAMS)
# What writes a table: `specjax.proposers.bigram.BUILD_COMMAND` (a peer part, not imported
# here; tests/test_bigram_card.py checks that the two agree).
BUILD_COMMAND = 'python -m specjax.datastore bigram'


def section(assets: str, task: str, target: str, source: str) -> List[str]:
  """The section's markdown lines for `assets`/bigram.npz ([] if there is none).

  Args:
    assets: the pair's folder (specjax/assets/<pair>).
    task: the registered task whose train targets the table counts (`--task`).
    target: the target model's name (the table's default for `--draft bigram`).
    source: what those train targets are, in words.
  """
  path = os.path.join(assets, FILE)
  try:
    with np.load(path) as table:
      vocab_size, top_k = table['next'].shape
      next_dtype, logp_dtype = table['next'].dtype, table['logp'].dtype
  except (OSError, KeyError, ValueError, zipfile.BadZipFile):
    return []
  return [
      '## Bigram table', '',
      f'`{FILE}` is the table of `--draft bigram` (`specjax.proposers.bigram`; '
      f'`specjax.job.drafts.DEFAULT_BIGRAMS[\'{target}\']`): for each of the {vocab_size} '
      f'ids, its {top_k} most frequent next tokens (`next`, {next_dtype}) and their '
      f'log-probabilities over those {top_k} (`logp`, {logp_dtype}), counted over the '
      f'{task} train targets ({source}), each document after a leading pad id (T5\'s '
      'decoder start); an id never followed by another gets the corpus\'s most frequent '
      f'tokens. Built with `{BUILD_COMMAND} --task {task} --output '
      f'specjax/assets/{os.path.basename(os.path.normpath(assets))}/{FILE}`: '
      f'{os.path.getsize(path):,} bytes.', '']
