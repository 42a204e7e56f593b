"""The flags of `python -m specjax.train_draft`: each field is the flag of the same name."""
from __future__ import annotations

import dataclasses
from typing import Optional

from specjax.flags import flag

KINDS = ('medusa', 'eagle', 'distill', 'layerskip')
DISTILL_DATA = ('target', 'draft')
DISTILL_LOSSES = ('kl', 'tvd')


@dataclasses.dataclass(frozen=True)
class TrainDraftConfig:
  """A draft-training run."""

  target: str = flag('demo_target', 'target registry name or checkpoint directory (frozen)')
  target_checkpoint: Optional[str] = flag(None, 'checkpoint of the target (default: bundled '
                                          'for demo_*, manpages_*, manlm_*)')
  vocab: Optional[str] = flag(None, 'SentencePiece model of the target (default: the '
                              'registry\'s or the checkpoint\'s)')
  kind: str = flag('medusa', 'what to train: medusa, K heads on the target\'s last hidden '
                   'state (--draft medusa:PATH decodes with them); eagle, one decoder layer '
                   'that drafts the target\'s next hidden state (--draft '
                   'eagle:PATH); distill, the draft model --draft fine-tuned on the target\'s '
                   'distributions (--draft PATH); layerskip, an early exit (a copy of the '
                   'final norm and output projection) for the target\'s first --layers '
                   'decoder layers (--draft layerskip:PATH)', choices=KINDS)
  draft: Optional[str] = flag(None, 'the draft model to distil (--kind distill): registry '
                              'name or checkpoint directory (default: the bundled pair\'s, '
                              'demo_draft for demo_target)')
  input: Optional[str] = flag(None, 'training inputs: text lines or JSONL with "inputs" '
                              '(the target decodes them; its outputs are the labels)')
  max_examples: int = flag(4096, 'the first N inputs', least=1)
  max_input_len: int = flag(64, 'encoder length (longer inputs are cut)', least=1)
  max_decode_len: int = flag(48, 'the most tokens of each target decode', least=1)
  heads: int = flag(4, 'Medusa heads: head k proposes the token k past the last one '
                    '(--kind medusa)', least=1)
  layers: Optional[int] = flag(None, 'the target\'s first M decoder layers that draft '
                               '(--kind layerskip)')
  eagle_passes: int = flag(1, 'passes of the EAGLE head over each training sequence: pass k '
                           '> 1 reads the head\'s own states of pass k - 1 for the '
                           'target\'s, as a draft at depth k does (EAGLE-3\'s training-time '
                           'test, approximated; --kind eagle)')
  distill_data: str = flag('target', 'whose decodes of the inputs a distilled draft learns '
                           'from (--kind distill): target, the target\'s; draft, the draft\'s '
                           'own (on-policy, as DistillSpec prefers); greedy, or sampled at '
                           '--distill-temperature', choices=DISTILL_DATA)
  distill_temperature: float = flag(0.0, 'temperature of those decodes (--kind distill): 0 '
                                    'greedy, > 0 sampled')
  distill_loss: str = flag('kl', 'what a distilled draft minimises at each position (--kind '
                           'distill): kl, the forward KL divergence KL(p || q) from the '
                           'target\'s distribution p; tvd, the total variation distance '
                           '0.5 sum |p - q|, which is 1 - the acceptance probability of a '
                           'sampled draft token there', choices=DISTILL_LOSSES)
  steps: int = flag(1000, 'optimizer steps', least=1)
  batch_size: int = flag(32, 'sequences per step', least=1)
  learning_rate: float = flag(1e-3, 'peak learning rate (Adam, warmup then cosine decay)',
                              above=0)
  warmup_steps: int = flag(50, 'steps of linear warmup', least=0)
  save_every: int = flag(100, 'steps between checkpoints (a rerun resumes from the latest)',
                         least=1)
  seed: int = flag(0, 'of the batches')
  workdir: Optional[str] = flag(None, 'the run\'s directory: the target\'s decodes and the '
                                'checkpoints (a rerun with the same one resumes)')
  output: Optional[str] = flag(None, 'where the trained heads go (default WORKDIR/heads; '
                               'never overwritten)')
  quiet: bool = flag(False, 'no progress bars')
  json: bool = flag(False, 'print the summary as one JSON line')
