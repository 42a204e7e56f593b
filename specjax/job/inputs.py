"""Encoder inputs: texts to padded id arrays, batches, and the width each batch is padded to.

Shape letters: N examples, B batch, S encoder length (--max-input-len), W a batch's width.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Iterator, List, Optional, Sequence

import numpy as np

from specjax.checkpoints.registry import DEMO_SAMPLES

# --pad-inputs: 'bucket' pads each batch to a power of two that fits its longest input (a
# few compiled shapes, encoders sized to the text); 'max' pads every batch to S (T5X's
# fixed feature lengths: one compiled shape).
PAD_MODES = ('bucket', 'max')
SMALLEST_BUCKET = 8


def read_inputs(path: Optional[str], prefix: str) -> List[dict]:
  """Reads plain lines or JSONL with an "inputs" field (file or '-' for stdin).

  Returns:
    One dict per example: {"inputs": text (prefix added if missing), and any other fields}.
  """
  path = path or DEMO_SAMPLES
  if path != '-' and not os.path.exists(path):
    raise FileNotFoundError(f'input file {path} does not exist; pass --input FILE (or - for '
                            'stdin)')
  stream = sys.stdin if path == '-' else open(path, encoding='utf-8')
  examples = []
  with stream:
    for number, line in enumerate(stream, 1):
      line = line.rstrip('\n')
      if not line.strip():
        continue
      if line.lstrip().startswith('{'):
        record = json.loads(line)
        if 'inputs' not in record:
          raise ValueError(f'{path}:{number}: a JSON line needs an "inputs" field')
      else:
        record = {'inputs': line}
      if prefix and not record['inputs'].startswith(prefix):
        record['inputs'] = prefix + record['inputs']
      examples.append(record)
  if not examples:
    raise ValueError(f'input {path} has no examples; pass --input with one text per line')
  return examples


def tokenize(vocab, texts: Sequence[str], max_len: int, truncate: bool) -> np.ndarray:
  """Texts -> [N, S] int32 with EOS, right-padded; refuses over-long texts unless truncating."""
  rows = np.zeros((len(texts), max_len), np.int32)
  for i, text in enumerate(texts):
    ids = vocab.encode(text)
    if len(ids) + 1 > max_len:
      if not truncate:
        raise ValueError(f'input {i + 1} has {len(ids) + 1} tokens with EOS, more than '
                         f'--max-input-len {max_len}; raise it or pass --truncate-inputs')
      ids = ids[:max_len - 1]
    rows[i, :len(ids) + 1] = ids + [vocab.eos_id]
  return rows


def batches(num: int, size: int) -> Iterator[slice]:
  """Slices of `size` consecutive examples (the last one may be shorter)."""
  for start in range(0, num, size):
    yield slice(start, min(start + size, num))


def bucket_width(rows: np.ndarray, smallest: int = SMALLEST_BUCKET) -> int:
  """The width W a batch [B, S] is padded to: the smallest power of two (at least
  `smallest`) that holds its longest row, and never more than S."""
  used = np.flatnonzero(np.any(np.asarray(rows) != 0, axis=0))
  longest = int(used[-1]) + 1 if len(used) else 1
  width = smallest
  while width < longest:
    width *= 2
  return min(width, rows.shape[1])


def pad_to_bucket(rows: np.ndarray, mode: str = 'bucket') -> np.ndarray:
  """A batch [B, S] cut to its bucket's width, [B, W] ('bucket'), or unchanged ('max').

  Only padding columns are cut: with the encoder's padding masked, the outputs are the
  same up to float rounding, and the encoders and cross-attention do W/S of the work.
  """
  if mode not in PAD_MODES:
    raise ValueError(f'--pad-inputs must be one of {", ".join(PAD_MODES)}, got {mode!r}')
  return rows if mode == 'max' else rows[:, :bucket_width(rows)]
