"""Encoder inputs: texts to padded id arrays, batches, and the width each batch is padded to.

Shape letters: N examples, B batch, S encoder length (--max-input-len), W a batch's width.
"""
from __future__ import annotations

from typing import Iterator, Optional, Sequence, Tuple

import numpy as np

# --pad-inputs: 'bucket' pads each batch to a power of two that fits its longest input (a
# few compiled shapes, encoders sized to the text); 'max' pads every batch to S (T5X's
# fixed feature lengths: one compiled shape).
PAD_MODES = ('bucket', 'max')
SMALLEST_BUCKET = 8


def tokenize(vocab, texts: Sequence[str], max_len: int, truncate: bool,
             lines: Optional[Sequence[int]] = None) -> Tuple[np.ndarray, np.ndarray]:
  """Texts -> [N, S] int32 right-padded with the vocabulary's pad id, each with EOS (encoder
  inputs) or as the tokenizer encodes it (decoder-only prompts: `vocab.appends_eos` False).

  Args:
    vocab: the vocabulary (encode, eos_id, pad_id).
    texts: N texts.
    max_len: S, the encoder length.
    truncate: cut texts longer than S (EOS kept) instead of refusing them.
    lines: each text's input line, named in the error (default 1..N).

  Returns:
    (ids [N, S] int32, truncated [N] bool).

  Raises:
    ValueError: a text longer than S without `truncate`, or a prompt that encodes to no
      tokens (its line and the fix named).
  """
  eos = [vocab.eos_id] if getattr(vocab, 'appends_eos', True) else []
  rows = np.full((len(texts), max_len), getattr(vocab, 'pad_id', 0), np.int32)
  truncated = np.zeros((len(texts),), bool)
  for i, text in enumerate(texts):
    ids = vocab.encode(text)
    line = lines[i] if lines is not None else i + 1
    if not ids and not eos:
      raise ValueError(f'input line {line} encodes to no tokens; remove the empty prompt')
    if len(ids) + len(eos) > max_len:
      if not truncate:
        raise ValueError(f'input line {line} has {len(ids) + len(eos)} tokens'
                         f'{" with EOS" if eos else ""}, more than --max-input-len {max_len}; '
                         'raise it or pass --truncate-inputs')
      ids, truncated[i] = ids[:max_len - len(eos)], True
    rows[i, :len(ids) + len(eos)] = ids + eos
  return rows, truncated


def batches(num: int, size: int) -> Iterator[slice]:
  """Slices of `size` consecutive examples (the last one may be shorter)."""
  for start in range(0, num, size):
    yield slice(start, min(start + size, num))


def bucket_width(rows: np.ndarray, smallest: int = SMALLEST_BUCKET, pad_id: int = 0) -> int:
  """The width W a batch [B, S] (right-padded with pad_id) is padded to: the smallest power
  of two (at least `smallest`) that holds its longest row, and never more than S."""
  used = np.flatnonzero(np.any(np.asarray(rows) != pad_id, axis=0))
  longest = int(used[-1]) + 1 if len(used) else 1
  width = smallest
  while width < longest:
    width *= 2
  return min(width, rows.shape[1])


def pad_to_bucket(rows: np.ndarray, mode: str = 'bucket', pad_id: int = 0) -> np.ndarray:
  """A batch [B, S] cut to its bucket's width, [B, W] ('bucket'), or unchanged ('max').

  Only padding columns are cut: with the encoder's padding masked, the outputs are the
  same up to float rounding, and the encoders and cross-attention do W/S of the work.
  """
  if mode not in PAD_MODES:
    raise ValueError(f'--pad-inputs must be one of {", ".join(PAD_MODES)}, got {mode!r}')
  return rows if mode == 'max' else rows[:, :bucket_width(rows, pad_id=pad_id)]
