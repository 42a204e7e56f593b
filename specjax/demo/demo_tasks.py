"""The bundled pairs' tasks: where each one's data, vocabulary and weights live, its
models, input form and training shapes, as `scripts/train_demo.py --task` and
`python -m specjax.bench --paper-table` read them. `DEMO_TASKS` are the T5 pairs';
`TABLE_TASKS` adds the decoder-only pair's (`MANLM`, trained by `scripts/train_manlm.py`)."""
from __future__ import annotations

import dataclasses
import os
from typing import Callable, List, Tuple

from specjax.checkpoints.registry import ASSETS, MANLM_ASSETS, MANPAGES_ASSETS
from specjax.demo import continuation, corpus, manpages
from specjax.models.lm_config import LMConfig, manlm_draft, manlm_target
from specjax.models.t5_config import (T5Config, demo_draft, demo_target, manpages_draft,
                                      manpages_target)


@dataclasses.dataclass(frozen=True)
class DemoTask:
  """One bundled task and its pair.

  Attributes:
    name: 'ende' or 'manpages'.
    title: how reports name the task.
    metric: 'bleu' or 'rouge' (what the model card scores outputs with).
    prefix: T5's task prefix of every input.
    data: the corpus folder its build script writes by default.
    assets: the folder of the bundled pair (target/, draft/, spm.model, bigram.npz,
      test.jsonl, MODEL_CARD.md).
    target, draft: the pair's configs.
    buckets: training batch shapes 'INPUT_LEN[:TARGET_LEN]:BATCH,...'.
    max_decode_len: output tokens allowed when decoding the test split.
    load_pairs: split, folder -> (source, reference) pairs.
    reference_field: the corpus field holding the reference (for the bigram table).
  """

  name: str
  title: str
  metric: str
  prefix: str
  data: str
  assets: str
  target: T5Config
  draft: T5Config
  buckets: str
  max_decode_len: int
  load_pairs: Callable[[str, str], List[Tuple[str, str]]]
  reference_field: str

  def make_example(self, source: str) -> str:
    """The model input: the task prefix + source."""
    return self.prefix + source

  def path(self, name: str) -> str:
    """A file or folder of the bundled pair's assets."""
    return os.path.join(self.assets, name)

  @property
  def vocab(self) -> str:
    """The pair's SentencePiece model."""
    return self.path('spm.model')


@dataclasses.dataclass(frozen=True)
class LMTask:
  """The decoder-only pair's task: continue a text from its first words.

  Attributes:
    name: 'manlm'.
    title: how reports name the task.
    prefix: '' (prompts are the texts' first words as they are).
    assets: the pair's folder (target/, draft/, bigram.npz, test.jsonl, MODEL_CARD.md).
    vocab: its SentencePiece model (the man-page pair's).
    target, draft: the pair's configs.
    max_decode_len: new tokens allowed when continuing the test prompts.
  """

  name: str
  title: str
  prefix: str
  assets: str
  vocab: str
  target: LMConfig
  draft: LMConfig
  max_decode_len: int

  def path(self, name: str) -> str:
    """A file or folder of the bundled pair's assets."""
    return os.path.join(self.assets, name)


ENDE = DemoTask(
    name='ende', title='EnDe (gettext messages)', metric='bleu', prefix=corpus.TASK_PREFIX,
    data='data/demo', assets=ASSETS, target=demo_target, draft=demo_draft,
    buckets='16:128,24:96,32:64', max_decode_len=40, load_pairs=corpus.load_pairs,
    reference_field='de')
MANPAGES = DemoTask(
    name='manpages', title='man-page summaries', metric='rouge',
    prefix=manpages.TASK_PREFIX, data='data/manpages', assets=MANPAGES_ASSETS,
    target=manpages_target, draft=manpages_draft, buckets='32:16:128,64:24:64,128:24:32',
    max_decode_len=32, load_pairs=manpages.load_pairs, reference_field='summary')
DEMO_TASKS = {t.name: t for t in (ENDE, MANPAGES)}
MANLM = LMTask(
    name='manlm', title='man-page continuation (decoder-only)', prefix='',
    assets=MANLM_ASSETS, vocab=MANPAGES.vocab, target=manlm_target, draft=manlm_draft,
    max_decode_len=continuation.MAX_DECODE_LEN)
TABLE_TASKS = {**DEMO_TASKS, MANLM.name: MANLM}
