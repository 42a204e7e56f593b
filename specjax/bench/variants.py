"""Bench rows beyond the plain draft model, beside it in docs/benchmarks.md: other drafts
(copy, bigram, copy + the model, layer-skip, heads, the drafts with no draft model: REST,
suffix, rest+suffix, and cascades), block verification, per-row dynamic gamma, lenience
(quality against speed), and `--gamma auto` at several batch sizes. Lookahead, which
verifies a tree of its own, has tree rows only (`specjax.bench.trees`)."""
from __future__ import annotations

import os
import sys
import tempfile
from unittest import mock
from typing import Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from specjax.bench import compiled
from specjax.bench import kinds
from specjax.bench import report
from specjax.bench import rows as bench_rows
from specjax.core import api
from specjax.core.sampling import SamplingConfig


def variant_rows(target, tp, drafts: Dict[str, tuple], batches, *, gammas: Sequence[int],
                 temperatures: Sequence[float], verifications: Sequence[str],
                 thresholds: Sequence[float], threshold_gammas: Sequence[int], max_len: int,
                 threshold_rules: Sequence[str] = ('token',),
                 seed: int = 0, rounds: int = 3, repeats: int = 32, cache_len: int = 64,
                 slots: Optional[int] = None) -> List[dict]:
  """Rows for every (draft, verification, gamma, temperature), then dynamic gamma.

  Args:
    target, tp: the target and its params.
    drafts: label (its --draft spelling) -> (draft, params); the first is the draft model
      (dynamic gamma uses it).
    batches: as `rows.speculative_row`.
    gammas: the gammas of the draft rows (of each draft, those `kinds.chain_gammas` keeps:
      none for lookahead, those above K for cascade:NAME:K,CHEAP).
    temperatures: of every row.
    verifications: 'token' and/or 'block'.
    thresholds: the confidence thresholds of the dynamic-gamma rows (at each of
      threshold_gammas).
    threshold_gammas: G of the dynamic-gamma rows (the most a row drafts).
    threshold_rules: 'token' and/or 'cumulative' (`specjax.speculative_decode`).
    max_len, seed, rounds, repeats, cache_len, slots: as `rows.speculative_row`.

  Returns:
    Bench rows, each with 'draft', 'verification', 'draft_threshold' and 'threshold_rule'
    set.
  """
  kw = dict(seed=seed, rounds=rounds, repeats=repeats, cache_len=cache_len, slots=slots)
  out = []
  for temperature in temperatures:
    sampling = SamplingConfig(temperature=temperature)
    for label, (draft, dp) in drafts.items():
      for verification in verifications:
        if verification == 'block' and temperature == 0.0:
          continue  # greedy: the same as the token rule, token for token
        for gamma in kinds.chain_gammas(label, draft, gammas):
          row = bench_rows.speculative_row(target, tp, draft, dp, batches, gamma, sampling,
                                           max_len, verification=verification,
                                           per_chain_cost=kinds.per_chain_cost(label), **kw)
          out.append(dict(row, draft=label, verification=verification, draft_threshold=0.0,
                          threshold_rule=''))
          print(f'{label}  ' + report.format_row(out[-1]), file=sys.stderr)
    label, (draft, dp) = next(iter(drafts.items()))
    for rule in threshold_rules:
      for gamma in threshold_gammas:
        for threshold in thresholds:
          row = bench_rows.speculative_row(target, tp, draft, dp, batches, gamma, sampling,
                                           max_len, draft_threshold=threshold,
                                           threshold_rule=rule, **kw)
          out.append(dict(row, draft=label, verification='token', draft_threshold=threshold,
                          threshold_rule=rule))
          print(report.format_row(out[-1]) + f'  threshold {threshold} ({rule})',
                file=sys.stderr)
  return out


def lenience_rows(target, tp, draft, dp, batches, references: Sequence[str],
                  detokenize: Callable, *, gamma: int, lenience: Sequence[float],
                  max_len: int, seed: int = 0, rounds: int = 3, repeats: int = 32,
                  cache_len: int = 64, slots: Optional[int] = None) -> List[dict]:
  """Sampled (T=1) rows at each lenience, with the BLEU of their outputs: speed against
  quality (lenience < 1 is lossy: the outputs are not the target's distribution)."""
  from sacrebleu.metrics import BLEU  # pylint: disable=import-outside-toplevel
  sampling = SamplingConfig(temperature=1.0)
  out = []
  for l in lenience:
    row = bench_rows.speculative_row(target, tp, draft, dp, batches, gamma, sampling, max_len,
                                     seed=seed, rounds=rounds, repeats=repeats,
                                     cache_len=cache_len, slots=slots, lenience=l)
    tokens = np.concatenate([np.asarray(api.speculative_decode(
        target, tp, draft, dp, x, gamma=gamma, max_decode_len=max_len, sampling=sampling,
        rng=jax.random.PRNGKey(seed), slots=slots, lenience=l).tokens) for x in batches])
    hyps = [detokenize(t) for t in tokens[:len(references)]]
    bleu = BLEU().corpus_score(hyps, [list(references)[:len(hyps)]]).score
    out.append(dict(row, lenience=l, bleu=bleu))
    print(report.format_row(out[-1]) + f'  lenience {l}  BLEU {bleu:.2f}', file=sys.stderr)
  return out


def gamma_auto_runs(texts: Sequence[str], batch_sizes: Sequence[int], job_fields: dict,
                    temperature: float = 0.0) -> List[dict]:
  """`python -m specjax.decode --gamma auto` at each batch size, on the same inputs: the
  gamma it picks (0: the target alone) and its speedup over the target alone.

  Each run calibrates anew, and keeps its choice in a cache of its own, gone at the end:
  the user's cache of choices (`gamma_choice.cache_file`) is neither read nor changed.
  """
  from specjax.job import decode_job  # pylint: disable=import-outside-toplevel
  from specjax.job import gamma_choice  # pylint: disable=import-outside-toplevel
  out = []
  with tempfile.TemporaryDirectory() as tmp, mock.patch.dict(
      os.environ, {gamma_choice.CACHE_ENV: tmp}):
    src = os.path.join(tmp, 'inputs.txt')
    with open(src, 'w', encoding='utf-8') as f:
      f.write('\n'.join(texts) + '\n')
    for size in batch_sizes:
      compiled.free_if_needed()  # as each row does (rows.speculative_row)
      summary = decode_job.run(decode_job.DecodeJob(
          input=src, gamma='auto', batch_size=size, temperature=temperature, progress=False,
          input_format='text', recalibrate=True, **job_fields))
      row = {k: summary[k] for k in (
          'batch_size', 'gamma', 'gamma_reason', 'gamma_calibration', 'speedup',
          'tokens_per_second', 'baseline_tokens_per_second', 'num_examples')}
      # Where the run kept its choice: this temporary cache, gone with it.
      row['gamma_reason'] = row['gamma_reason'].split(decode_job.KEPT_IN)[0]
      out.append(row)
      print(f'--gamma auto at batch {size}: gamma {summary["gamma"]}, speedup '
            f'{summary["speedup"]:.2f}x', file=sys.stderr)
  return out
