"""The man-page continuation task of the decoder-only pair (`manlm_target`, `manlm_draft`):
continue a man page's DESCRIPTION from its first words.

A page's text (the DESCRIPTION's first words, as `specjax.demo.manpages` reads them) is
split after its first `PROMPT_WORDS` words: the prompt is what the model reads, the rest
is the reference continuation. The language models learn the whole texts, each followed
by EOS, with the man-page pair's SentencePiece vocabulary (no BOS: pad 0, eos 1).
"""
from __future__ import annotations

import json
from typing import List, Sequence, Tuple

import numpy as np

PROMPT_WORDS = 12
# Tokens of a training sequence (text and EOS); longer texts are cut (about 2% of them).
SEQUENCE_LEN = 96
MAX_DECODE_LEN = 32
PAD_ID = 0
EOS_ID = 1


def split_text(text: str, words: int = PROMPT_WORDS) -> Tuple[str, str]:
  """(the text's first `words` words, the rest): prompt and reference continuation."""
  parts = text.split()
  return ' '.join(parts[:words]), ' '.join(parts[words:])


def test_rows(texts: Sequence[str], words: int = PROMPT_WORDS) -> List[dict]:
  """The task's rows {"inputs": prompt, "targets": continuation} of texts longer than the
  prompt (a text of `words` words or fewer has nothing to continue)."""
  rows = []
  for text in texts:
    prompt, rest = split_text(text, words)
    if rest:
      rows.append({'inputs': prompt, 'targets': rest})
  return rows


def read_texts(path: str) -> List[str]:
  """The texts of a split written by `scripts/build_manpage_corpus.py` ({"text", ...})."""
  with open(path, encoding='utf-8') as f:
    return [json.loads(line)['text'] for line in f if line.strip()]


def token_sequences(encode, texts: Sequence[str], width: int = SEQUENCE_LEN
                    ) -> Tuple[np.ndarray, np.ndarray]:
  """Texts -> (sequences [N, width] int32: each text's ids then EOS, cut to width and
  padded with PAD_ID; spans [N, 2] int32: (1, the sequence's length)), the form
  `specjax.drafting.fit` trains on (every position from the first on learns its next
  token)."""
  seqs = np.full((len(texts), width), PAD_ID, np.int32)
  spans = np.zeros((len(texts), 2), np.int32)
  for i, text in enumerate(texts):
    ids = (list(encode(text)) + [EOS_ID])[:width]
    seqs[i, :len(ids)] = ids
    spans[i] = (1, len(ids))
  return seqs, spans
