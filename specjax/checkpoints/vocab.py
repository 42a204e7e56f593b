"""T5 SentencePiece vocabularies, read from a local path or gs://."""
from __future__ import annotations

import os
from typing import Sequence

from specjax.checkpoints import t5x


# Logits a T5 model may have past its SentencePiece ids: 100 extra ids, then padding to a
# multiple of 128.
MAX_UNUSED_LOGITS = 128


class Vocabulary:
  """A T5 SentencePiece vocabulary: pad 0 (also the decoder start), eos 1, unk 2.

  Attributes:
    path: where the model was read from.
    vocab_size: the number of SentencePiece ids.
  """

  pad_id = 0
  eos_id = 1
  unk_id = 2

  def __init__(self, model_proto: bytes, path: str = '<bytes>'):
    """Wraps a serialized SentencePiece model, checking T5's special ids.

    Raises:
      ValueError: the model's pad/eos/unk ids are not 0/1/2.
    """
    import sentencepiece as spm  # pylint: disable=g-import-not-at-top
    self.path = path
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    ids = (self._sp.pad_id(), self._sp.eos_id(), self._sp.unk_id())
    if ids != (0, 1, 2):
      raise ValueError(f'vocabulary {path} has pad/eos/unk ids {ids[0]}/{ids[1]}/{ids[2]} but '
                       'T5 needs 0/1/2; pass a T5 SentencePiece model (--vocab) or train one '
                       'with pad_id=0 eos_id=1 unk_id=2')

  @property
  def vocab_size(self) -> int:
    """The number of SentencePiece ids (must not exceed the model's V)."""
    return self._sp.get_piece_size()

  def encode(self, text: str) -> list:
    """Text -> ids (no EOS appended)."""
    return list(self._sp.encode(text))

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text: stops at the first EOS, drops padding, maps ids past the vocab to unk."""
    kept = []
    for i in (int(i) for i in ids):
      if i == self.eos_id:
        break
      if i != self.pad_id:
        kept.append(i if i < self.vocab_size else self.unk_id)
    return self._sp.decode(kept)

  def serialized(self) -> bytes:
    """The serialized SentencePiece model (two vocabularies are the same iff these are)."""
    return self._sp.serialized_model_proto()

  def check_fits(self, model_vocab_size: int) -> None:
    """Raises ValueError if the vocabulary cannot be the model's: it has ids the model's
    logits [.., V] cannot emit, or more than MAX_UNUSED_LOGITS fewer ids than V (T5 models
    add 100 extra ids to their SentencePiece model and pad V to a multiple of 128: 32,000
    pieces, V 32,128)."""
    if self.vocab_size > model_vocab_size:
      raise ValueError(f'vocabulary {self.path} has {self.vocab_size} ids but the model '
                       f'has only {model_vocab_size} logits; pass the vocabulary the model '
                       'was trained with (--vocab)')
    if model_vocab_size - self.vocab_size > MAX_UNUSED_LOGITS:
      raise ValueError(f'vocabulary {self.path} has {self.vocab_size} ids but the model has '
                       f'{model_vocab_size} logits, more than T5\'s extra ids and padding '
                       'explain: it is another model\'s vocabulary; pass the one the model '
                       'was trained with (--vocab)')


def load_vocab(path: str) -> Vocabulary:
  """Reads a SentencePiece model from a local path or gs:// (via tensorstore's GCS store).

  Raises:
    FileNotFoundError: no file at `path`.
    ValueError: a gs:// read failed, or the ids are not T5's.
  """
  path = os.fspath(path)
  try:
    data = t5x.read_bytes(path)
  except Exception as e:  # pylint: disable=broad-except
    # tensorstore's GCS errors span lines; keep the message to one.
    reason = ' '.join(str(e).split())
    raise ValueError(f'cannot read vocabulary {path} ({reason}); copy it locally and '
                     'pass --vocab <local path>') from e
  if data is None:
    raise FileNotFoundError(f'vocabulary {path} does not exist; pass a SentencePiece '
                            'model file with --vocab')
  return Vocabulary(data, path)
