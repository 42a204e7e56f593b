"""The tokenizer of a decoder-only checkpoint for the command line: a Hugging Face
`tokenizer.json` (through the `tokenizers` package) or a SentencePiece `tokenizer.model`.

It offers what the CLI uses of `specjax.checkpoints.vocab.Vocabulary` (encode, decode,
eos_id, pad_id, vocab_size, check_fits, serialized), with the model's own EOS and pad ids,
and `appends_eos = False`: a prompt is encoded as the tokenizer encodes it (with the BOS its
post-processor or the model adds), not terminated.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

from specjax.checkpoints.vocab import load_vocab
from specjax.models.lm import CausalLM

TOKENIZER_FILES = ('tokenizer.json', 'tokenizer.model')


class Tokenizer:
  """A decoder-only model's tokenizer.

  Attributes:
    path: where it was read from.
    eos_id: the model's end-of-sequence id (decoding stops there).
    pad_id: the model's pad id (prompts are padded with it; decoding drops it).
    appends_eos: False: prompts are not EOS-terminated.
  """

  appends_eos = False

  def __init__(self, path: str, eos_id: int, pad_id: int, bos_id: Optional[int] = None):
    """Reads `path` (a tokenizer.json or a SentencePiece model file).

    Args:
      path: the file.
      eos_id, pad_id: the model's ids.
      bos_id: prepended by a SentencePiece model (tokenizer.json adds its own BOS).

    Raises:
      ValueError: the file cannot be parsed (the message names the fix).
    """
    self.path, self.eos_id, self.pad_id = path, int(eos_id), int(pad_id)
    self._bos = bos_id
    self._json = path.endswith('.json')
    try:
      if self._json:
        import tokenizers  # pylint: disable=import-outside-toplevel
        self._tok = tokenizers.Tokenizer.from_file(path)
      else:
        import sentencepiece as spm  # pylint: disable=import-outside-toplevel
        self._tok = spm.SentencePieceProcessor(model_file=path)
    except Exception as e:  # pylint: disable=broad-except
      reason = ' '.join(str(e).split())[:160]
      raise ValueError(f'cannot read tokenizer {path} ({reason}); pass a tokenizer.json or '
                       'a SentencePiece model with --vocab') from None

  @property
  def vocab_size(self) -> int:
    """The number of ids the tokenizer can produce."""
    if self._json:
      return self._tok.get_vocab_size(with_added_tokens=True)
    return self._tok.get_piece_size()

  def encode(self, text: str) -> list:
    """Text -> ids, with the tokenizer's special tokens (BOS) and no EOS."""
    if self._json:
      return list(self._tok.encode(text, add_special_tokens=True).ids)
    ids = list(self._tok.encode(text))
    return ([self._bos] if self._bos is not None else []) + ids

  def decode(self, ids: Sequence[int]) -> str:
    """Ids -> text: stops at the first EOS, drops pads, ids past the vocabulary and
    special tokens."""
    kept = []
    for i in (int(i) for i in ids):
      if i == self.eos_id:
        break
      if i != self.pad_id and 0 <= i < self.vocab_size:
        kept.append(i)
    if self._json:
      return self._tok.decode(kept, skip_special_tokens=True)
    return self._tok.decode([i for i in kept if i != self._bos])

  def serialized(self) -> bytes:
    """The tokenizer's serialized form (two tokenizers are the same iff these are)."""
    if self._json:
      return self._tok.to_str().encode()
    return self._tok.serialized_model_proto()

  def check_fits(self, model_vocab_size: int) -> None:
    """Raises ValueError if the tokenizer has ids the model's logits [.., V] cannot emit."""
    if self.vocab_size > model_vocab_size:
      raise ValueError(f'tokenizer {self.path} has {self.vocab_size} ids but the model has '
                       f'only {model_vocab_size} logits; pass the model\'s own tokenizer '
                       '(--vocab)')


def find_tokenizer(directory: str) -> Optional[str]:
  """The tokenizer file of a checkpoint directory (tokenizer.json first), or None."""
  for name in TOKENIZER_FILES:
    path = os.path.join(os.fspath(directory), name)
    if os.path.isfile(path):
      return path
  return None


def prompt_vocabulary(path: str, model):
  """The vocabulary that encodes `model`'s inputs from the file at `path`: a decoder-only
  model's tokenizer (prompts without EOS, the model's own ids), else a T5 SentencePiece
  `Vocabulary` (inputs EOS-terminated)."""
  if isinstance(model, CausalLM):
    return load_tokenizer(path, model)
  return load_vocab(path)


def load_tokenizer(path: str, model) -> Tokenizer:
  """The tokenizer at `path` (a file, or a checkpoint directory holding one) for `model`
  (a `CausalLM`: its EOS, pad and BOS ids).

  Raises:
    FileNotFoundError: no tokenizer there.
  """
  path = os.fspath(path)
  file = find_tokenizer(path) if os.path.isdir(path) else path
  if file is None or not os.path.isfile(file):
    raise FileNotFoundError(f'no tokenizer at {path} (looked for '
                            f'{" or ".join(TOKENIZER_FILES)}); pass --vocab FILE')
  config = model.config
  return Tokenizer(file, config.eos_id, config.pad_id, config.bos_id)
