"""The flags of `python -m specjax.bench`: the bench's own fields, and the decode's it shares.

A flag the bench reads as the decode does (`--target`, `--batch-size`, ...) is the decode's
`DecodeConfig` field at the bench's default; a flag of the bench alone, or one whose
meaning differs here (`--draft` is a model, `--input` a test split, `--dtype` applies to
NAME=FILE pairs only), is a field of `BenchConfig`.
"""
from __future__ import annotations

import argparse
import dataclasses
from typing import Optional

from specjax import flags
from specjax.bench.paper_table import DEFAULT_DRAFTS
from specjax.bench.trees import SYNTAX as TREES_SYNTAX
from specjax.flags import flag
from specjax.job.config import DecodeConfig

_VARIANTS = 'beyond the draft model (rows beside the plain draft\'s)'
_TABLE = 'the paper\'s table (--paper-table: tasks x drafts x T, best gamma)'


@dataclasses.dataclass(frozen=True)
class BenchConfig:
  """The bench's own flags; each field is the flag of the same name (`--json`: json_path)."""

  draft: str = flag('demo_draft', 'registry name or checkpoint directory')
  input: Optional[str] = flag(None, 'JSONL with "inputs" or "en" fields, or plain lines '
                              '(default: the test split of a bundled pair, demo_*, '
                              'manpages_* or manlm_*)')
  num_examples: int = flag(64, '', least=1)
  select: str = flag('first', 'which --num-examples lines of --input: the first, or the '
                     'longest (longer outputs lose less to the last block, which ends inside '
                     'EOS)', choices=('first', 'longest'))
  refill: bool = flag(False, 'decode all inputs as one stream through --batch-size rows, each '
                      'taking the next input as soon as it finishes (both decodes); default: '
                      'fixed batches, each running until its slowest row is done')
  gammas: str = flag('1-8', 'e.g. 1-8 or 1,2,4')
  temperatures: str = flag('0,1', '')
  max_input_len: int = flag(64, '')
  peers: str = flag('', '"hf": transformers greedy + assisted generation')
  json_path: Optional[str] = flag(None, 'write the results as one JSON object', name='--json')
  plot: Optional[str] = flag(None, 'write a PNG of measured and predicted speedup vs gamma')
  markdown: Optional[str] = flag(None, 'write a report (e.g. docs/benchmarks.md)')
  quick: bool = flag(False, 'tiny random models, 2 gammas: a smoke run of the whole bench')
  rounds: int = flag(3, 'interleaved timing rounds per row: each figure of a row (both '
                     'decodes, t_1, v, c, the calls of one iteration) is timed once per round '
                     'and keeps its fastest', least=1)
  drafts: str = flag('', 'other drafts, e.g. copy,bigram,copy+demo_draft,rest,suffix,'
                     'rest+suffix,lookahead:5,3,4,cascade:demo_draft/bigram (as --draft of '
                     'python -m specjax.decode): chain rows at --variant-gammas (a horizontal '
                     'cascade NAME:K,CHEAP at those above K), a row of each --trees tree the '
                     'draft grows, lookahead one row of its own tree; checked before any '
                     'model loads', group=_VARIANTS)
  verifications: str = flag('token', 'token and/or block: rows for the draft model and '
                            '--drafts under each (block only when sampling)', group=_VARIANTS)
  variant_gammas: str = flag('2,4', 'gammas of those rows', group=_VARIANTS)
  thresholds: str = flag('', 'per-row dynamic gamma: confidence thresholds of rows at each '
                         '--threshold-gamma, e.g. 0.3,0.5,0.7', group=_VARIANTS)
  threshold_rules: str = flag('token', 'token and/or cumulative: rows of each --thresholds '
                              'under each rule (python -m specjax.decode --threshold-rule)',
                              group=_VARIANTS)
  threshold_gamma: str = flag('8', 'the most a row drafts, or several (e.g. 3,4,6: a row per '
                              'threshold and gamma)', group=_VARIANTS)
  trees: str = flag('', 'token-tree rows (a tree decode of the same inputs, timed against '
                     'the target alone as the gamma rows are), at each --temperatures: '
                     + TREES_SYNTAX, group=_VARIANTS)
  lenience: str = flag('', 'T=1 rows at these lenience values with the BLEU of their outputs, '
                       'e.g. 1,0.5,0.2 (lossy below 1)', group=_VARIANTS)
  gamma_auto_batches: str = flag('', 'python -m specjax.decode --gamma auto at these batch '
                                 'sizes on the same inputs, e.g. 1,8,32', group=_VARIANTS)
  paper_table: bool = flag(False, 'run the table instead of the gamma sweep '
                           '(docs/paper_table.md); --json, --markdown and --plot write it',
                           group=_TABLE)
  paper_tasks: str = flag('ende,manpages,manlm', 'bundled tasks (ende, manpages, manlm: their '
                          'own pairs and test splits; manlm is decoder-only) or NAME=FILE '
                          '(--target and --draft on FILE; NAME ende is translated, any other '
                          'summarised)', group=_TABLE)
  paper_drafts: str = flag(','.join(DEFAULT_DRAFTS), '"model" is the task\'s draft '
                           'model (--draft for NAME=FILE); other model names add draft models, '
                           'e.g. model,t5_base,t5_large,copy', group=_TABLE)
  paper_gammas: str = flag('2,4,6', 'the gammas each cell tries', group=_TABLE)
  bigram_table: Optional[str] = flag(None, 'bigram .npz of the target (python -m '
                                     'specjax.datastore bigram) for NAME=FILE tasks; the '
                                     'bundled tasks ship theirs', group=_TABLE)
  dtype: Optional[str] = flag(None, 'activation dtype of NAME=FILE pairs, e.g. bfloat16',
                              group=_TABLE)
  param_dtype: str = flag('float32', 'param dtype of NAME=FILE pairs', group=_TABLE)


# The decode's defaults the bench changes: the paper's batch of one, shorter outputs.
DECODE_DEFAULTS = dict(batch_size=1, max_decode_len=48)
# The --help order: runs of the decode's fields and of the bench's own.
ORDER = (
    (DecodeConfig, ('target',)),
    (BenchConfig, ('draft',)),
    (DecodeConfig, ('target_checkpoint', 'draft_checkpoint', 'vocab')),
    (BenchConfig, ('input',)),
    (DecodeConfig, ('prefix',)),
    (BenchConfig, ('num_examples', 'select')),
    (DecodeConfig, ('batch_size',)),
    (BenchConfig, ('refill', 'gammas', 'temperatures', 'max_input_len')),
    (DecodeConfig, ('max_decode_len', 'pad_inputs')),
    (BenchConfig, ('peers', 'json_path', 'plot', 'markdown', 'quick', 'rounds')),
    (DecodeConfig, ('seed',)),
    (BenchConfig, tuple(f.name for f in flags.cli_fields(BenchConfig)
                        if f.metadata['group'])),
)


def add_bench_flags(parser: argparse.ArgumentParser) -> None:
  """Adds every flag of the bench to `parser`, in --help order."""
  for cls, names in ORDER:
    flags.add_flags(parser, cls, only=names,
                    defaults=DECODE_DEFAULTS if cls is DecodeConfig else None)
