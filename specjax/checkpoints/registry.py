"""Where the registry's models and vocabularies live: the bundled demo pair and the public
T5X checkpoints on GCS."""
from __future__ import annotations

import dataclasses
import os
from typing import Optional

ASSETS = os.path.join(os.path.dirname(os.path.dirname(__file__)), 'assets', 'demo')
DEMO_PREFIX = 'translate English to German: '
# The bundled man-page summarisation pair (specjax.demo.manpages).
MANPAGES_ASSETS = os.path.join(os.path.dirname(ASSETS), 'manpages')
# The bundled decoder-only pair: man-page continuation (specjax.demo.continuation).
MANLM_ASSETS = os.path.join(os.path.dirname(ASSETS), 'manlm')
_GCS_T5X = 'gs://t5-data/pretrained_models/t5x'
# Registry names with a public checkpoint or a bundled one (None: the model has none).
DEFAULT_CHECKPOINTS = {
    'demo_target': os.path.join(ASSETS, 'target'),
    'demo_draft': os.path.join(ASSETS, 'draft'),
    'manpages_target': os.path.join(MANPAGES_ASSETS, 'target'),
    'manpages_draft': os.path.join(MANPAGES_ASSETS, 'draft'),
    'manlm_target': os.path.join(MANLM_ASSETS, 'target'),
    'manlm_draft': os.path.join(MANLM_ASSETS, 'draft'),
    **{f't5_{s}': f'{_GCS_T5X}/t5_1_1_{s}/checkpoint_1000000'
       for s in ('small', 'base', 'large', 'xl', 'xxl')},
    't5_1_0_small': f'{_GCS_T5X}/t5_small/checkpoint_1000000',
    't5_1_0_base': f'{_GCS_T5X}/t5_base/checkpoint_999900',
    't5_1_0_large': f'{_GCS_T5X}/t5_large/checkpoint_1000700',
    't5_1_0_3b': f'{_GCS_T5X}/t5_3B/checkpoint_1000000',
    't5_1_0_11b': f'{_GCS_T5X}/t5_11B/checkpoint_1000000',
    'flan_t5_small': f'{_GCS_T5X}/flan_t5_small/checkpoint_1198000',
    'flan_t5_base': f'{_GCS_T5X}/flan_t5_base/checkpoint_1184000',
    'flan_t5_large': f'{_GCS_T5X}/flan_t5_large/checkpoint_1164000',
    'flan_t5_xl': f'{_GCS_T5X}/flan_t5_xl/checkpoint_1138000',
    'flan_t5_xxl': f'{_GCS_T5X}/flan_t5_xxl/checkpoint_1114000',
}
DEMO_VOCAB = os.path.join(ASSETS, 'spm.model')
T5_VOCAB = 'gs://t5-data/vocabs/cc_all.32000.100extra/sentencepiece.model'
DEMO_SAMPLES = os.path.join(ASSETS, 'samples.jsonl')
MANPAGES_PREFIX = 'summarize: '


@dataclasses.dataclass(frozen=True)
class Bundled:
  """What ships with a bundled pair: its vocabulary, task prefix, sample inputs (the
  decode's default) and test split (the bench's default)."""

  vocab: str
  prefix: str
  samples: str
  test: str


# The bundled pairs, by the prefix of their registry names.
BUNDLED = {
    'demo_': Bundled(DEMO_VOCAB, DEMO_PREFIX, DEMO_SAMPLES, os.path.join(ASSETS, 'test.jsonl')),
    'manpages_': Bundled(os.path.join(MANPAGES_ASSETS, 'spm.model'), MANPAGES_PREFIX,
                         os.path.join(MANPAGES_ASSETS, 'samples.jsonl'),
                         os.path.join(MANPAGES_ASSETS, 'test.jsonl')),
    'manlm_': Bundled(os.path.join(MANPAGES_ASSETS, 'spm.model'), '',
                      os.path.join(MANLM_ASSETS, 'samples.jsonl'),
                      os.path.join(MANLM_ASSETS, 'test.jsonl')),
}


def bundled(name: str) -> Optional[Bundled]:
  """What ships with the registry model `name`, or None when it is not a bundled one."""
  for prefix, pair in BUNDLED.items():
    if name.startswith(prefix):
      return pair
  return None
