"""The man-page pair's model card: ROUGE of target and draft, the target's lead with a
paired bootstrap, and MODEL_CARD.md written from the training summaries and the
evaluation results of `scripts/train_demo.py --task manpages`."""
from __future__ import annotations

import os
import platform
from typing import Dict, Sequence

import jax
import numpy as np

from specjax.demo import bigram_card, datastore_card, manpages
from specjax.demo.card import speculative_lines, training_summary

ROUGE_TYPES = ('rouge1', 'rouge2', 'rougeL')
BOOTSTRAP_RESAMPLES = 1000


def line_rouge(hyps: Sequence[str], refs: Sequence[str]) -> np.ndarray:
  """[N, 3] ROUGE-1, ROUGE-2 and ROUGE-L F-measures of each line (rouge-score, Porter
  stemming, as reported for CNN/DM)."""
  from rouge_score import rouge_scorer  # pylint: disable=import-outside-toplevel
  scorer = rouge_scorer.RougeScorer(list(ROUGE_TYPES), use_stemmer=True)
  return np.array([[s[t].fmeasure for t in ROUGE_TYPES]
                   for s in (scorer.score(r, h) for h, r in zip(hyps, refs))]
                  ).reshape(-1, len(ROUGE_TYPES))


def rouge_scores(hyps: Sequence[str], refs: Sequence[str]) -> Dict[str, float]:
  """{'rouge1', 'rouge2', 'rougeL'}: mean F-measure over the lines, x100."""
  mean = line_rouge(hyps, refs).mean(axis=0) * 100.0
  return {t: round(float(x), 2) for t, x in zip(ROUGE_TYPES, mean)}


def paired_bootstrap_rouge(target_hyps: Sequence[str], draft_hyps: Sequence[str],
                           refs: Sequence[str], resamples: int = BOOTSTRAP_RESAMPLES,
                           seed: int = 0) -> Dict[str, Dict[str, float]]:
  """Target minus draft ROUGE on the same resampled test lines (Koehn, 2004).

  Returns:
    Per ROUGE type: 'target_wins' (share of resamples where the target scores strictly
    higher) and the 2.5% / 97.5% quantiles 'diff_low', 'diff_high' of the difference.
  """
  diff = (line_rouge(target_hyps, refs) - line_rouge(draft_hyps, refs)) * 100.0  # [N, 3]
  rng = np.random.default_rng(seed)
  picks = rng.integers(0, len(refs), (resamples, len(refs)))
  means = diff[picks].mean(axis=1)  # [resamples, 3]
  return {t: {'target_wins': float(np.mean(means[:, i] > 0)),
              'diff_low': float(np.quantile(means[:, i], 0.025)),
              'diff_high': float(np.quantile(means[:, i], 0.975))}
          for i, t in enumerate(ROUGE_TYPES)}


def rouge_by_kind(hyps: Dict[str, Sequence[str]], refs: Sequence[str],
                  near_dup: Sequence[bool]) -> Dict[str, Dict[str, object]]:
  """{'near_duplicate' | 'novel': {'lines': n, <model>: ROUGE-L}} on the test lines whose
  text has / has no near-twin in train."""
  out = {}
  for kind, flag in (('near_duplicate', True), ('novel', False)):
    rows = [i for i, f in enumerate(near_dup) if bool(f) == flag]
    out[kind] = {'lines': len(rows)}
    for name, h in hyps.items():
      out[kind][name] = (rouge_scores([h[i] for i in rows], [refs[i] for i in rows])['rougeL']
                         if rows else None)
  return out


def _quality_text(r) -> list:
  b, k = r['bootstrap'], r['by_kind']
  near, novel = k['near_duplicate'], k['novel']
  lead = ', '.join(
      f'{name} {r["target_rouge"][t] - r["draft_rouge"][t]:+.2f} '
      f'[{b[t]["diff_low"]:+.2f}, {b[t]["diff_high"]:+.2f}], higher in '
      f'{b[t]["target_wins"]:.1%}' for t, name in zip(ROUGE_TYPES, ('ROUGE-1', 'ROUGE-2',
                                                                      'ROUGE-L')))
  return [
      f'Target minus draft (paired bootstrap over {BOOTSTRAP_RESAMPLES} resamples of the test '
      f'lines, 95% interval, share of resamples where the target scores higher): {lead}.',
      '',
      'gcloud pages of sibling commands read alike ("list Compute Engine disks" / "... '
      'images"), so some held-out texts have a near-twin in train (word sets with Jaccard '
      '>= 0.6, `corpus.near_duplicates`). ROUGE-L on each kind:',
      '',
      '| test lines | count | target ROUGE-L | draft ROUGE-L |',
      '|---|---|---|---|',
      f'| with a near-twin in train | {near["lines"]} | {near["target"]} | {near["draft"]} |',
      f'| novel | {novel["lines"]} | {novel["target"]} | {novel["draft"]} |',
      '',
      f'Copying: {r["copy_rate"]["references"]:.0%} of the reference summaries\' words occur '
      f'in their texts; {r["copy_rate"]["target"]:.0%} of the target\'s output words and '
      f'{r["copy_rate"]["draft"]:.0%} of the draft\'s.']


def write_card(args, r) -> str:
  """Writes the man-page pair's MODEL_CARD.md; returns its path."""
  task = args.task
  counts = {s: len(task.load_pairs(s, args.data)) for s in manpages.SPLITS}
  t, d = training_summary(args, 'target'), training_summary(args, 'draft')
  distill = sum(float(np.load(os.path.join(args.workdir, 'distill', f))['minutes'])
                for f in sorted(os.listdir(os.path.join(args.workdir, 'distill')))
                if f.endswith('.npz')) if os.path.isdir(os.path.join(args.workdir,
                                                                      'distill')) else 0.0

  def row(name, config, x):
    q = r[name + '_rouge']
    return (f'| {name} | `{config.name}` | {r[name + "_params"] / 1e6:.2f} M | '
            f'{x.get("steps", "?")} | {x.get("epochs", "?")} | {x.get("minutes", "?")} | '
            f'{x.get("val_loss", "?")} | {q["rouge1"]} / {q["rouge2"]} / {q["rougeL"]} | '
            f'{r["sizes"][name]} |')

  total = (f'{t["minutes"] + d["minutes"] + distill:.0f} min'
           if 'minutes' in t and 'minutes' in d else '?')
  buckets = ', '.join(f'{b.input_len}:{b.target_len} tokens x {b.batch}' for b in args.buckets)
  lines = [
      '# specjax demo models: man-page summaries, T5 target and draft',
      '',
      'A small T5 target and a much smaller draft trained from scratch on this machine for '
      'the paper table\'s second task (`python -m specjax.bench --paper-table`). Written by '
      '`scripts/train_demo.py --task manpages` (evaluate stage); do not edit by hand.',
      '\n## Data\n',
      'Man pages of this Debian system (`/usr/share/man/man*/*.gz`, roff), read by '
      '`specjax.demo.manpages` and split by `scripts/build_manpage_corpus.py`: input '
      '`summarize: <the DESCRIPTION\'s first words>` (at most 48, cut at a sentence end), '
      'target the NAME line\'s description ("ls \\- list directory contents"); pairs '
      'deduplicated by text (gcloud\'s alpha, beta and GA pages of one command count once) '
      f'and by summary, split by hash: {counts["train"]} train, {counts["validation"]} '
      f'validation, {counts["test"]} test pairs (about two thirds are gcloud commands). '
      'Vocabulary: `spm.model`, 2000 SentencePiece pieces trained on the train split (pad 0, '
      f'eos 1, unk 2), logits padded to 2048. Training buckets (input:target) {buckets}; '
      f'{t.get("dropped", "?")} longer train pairs dropped; evaluation keeps all.',
      '\n## Models and training\n',
      'Adafactor (optax, T5X settings), linear warmup then cosine decay over the time budget; '
      f'dropout {t.get("dropout_rate", 0):g} (target) and {d.get("dropout_rate", 0):g} '
      '(draft); embeddings tied to the logits. The target learns the references; the draft '
      f'learns the target\'s greedy outputs on the {d.get("training_pairs", "?")} train inputs '
      f'(decoded and scored in {distill:.1f} min), per token {d.get("soft_weight", 0)} x '
      f'KL(target || draft) on the target\'s top-{args.soft_top_k} log-probs + '
      f'{1 - d.get("soft_weight", 0):g} x cross-entropy on the greedy token.',
      '',
      '| model | config | params | steps | epochs | train min | val loss | test ROUGE-1 / 2 / L '
      '| size |',
      '|---|---|---|---|---|---|---|---|---|',
      row('target', task.target, t),
      row('draft', task.draft, d),
      '',
      f'In all: {total} of training and distillation on this machine (evaluation not '
      'counted). Weights are stored as bfloat16; `load_model` restores float32.',
      '',
      f'Decode step (`T5Config.decode_step_macs`): target '
      f'{task.target.decode_step_macs() / 1e6:.2f} M multiply-adds, draft '
      f'{task.draft.decode_step_macs() / 1e6:.2f} M '
      f'({task.draft.decode_step_macs() / task.target.decode_step_macs():.3f} of the '
      f'target\'s). Draft validation accuracy against the target\'s greedy outputs '
      f'(teacher-forced): {d.get("val_accuracy", "?")}. Machine: {os.cpu_count()} CPU cores '
      f'({platform.processor() or platform.machine()}), jax {jax.__version__} on CPU, float32.',
      f'\n## Test split ({counts["test"]} pairs)\n',
      'ROUGE: mean F-measure x100 of greedy outputs (max '
      f'{args.max_decode_len} tokens) against the NAME lines (`rouge-score`, Porter stemmer).',
      '',
      *_quality_text(r),
      '',
      f'Speculative decoding of the pair, gamma {args.gamma} (alpha, acceptance rate and '
      'tokens per call as in the EnDe pair\'s card):',
      '',
      *speculative_lines(r, counts['test']),
      '',
      "Load with `checkpoints.load_model('manpages_target', "
      "DEFAULT_CHECKPOINTS['manpages_target'])` (and `manpages_draft`), vocabulary "
      "`specjax/assets/manpages/spm.model`. Toy models: they summarise man pages, nothing "
      'else.',
      '',
      *datastore_card.section(args.assets),
      *bigram_card.section(args.assets, 'specjax_demo_manpages', 'manpages_target',
                           'the NAME-line summaries')]
  path = os.path.join(args.assets, 'MODEL_CARD.md')
  with open(path, 'w', encoding='utf-8') as f:
    f.write('\n'.join(lines))
  return path
