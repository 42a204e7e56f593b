"""The demo pair's model card: BLEU comparisons of target and draft, and MODEL_CARD.md
written from the training summaries and the evaluation results of `train_demo.py`."""
from __future__ import annotations

import collections
import glob
import json
import os
import platform
from typing import Dict, Sequence

import jax
import numpy as np
from sacrebleu.metrics import BLEU
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from specjax.demo import bigram_card, corpus, datastore_card
from specjax.models.t5_config import demo_draft, demo_target

BOOTSTRAP_RESAMPLES = 1000


def line_statistics(hyp: str, ref: str, max_order: int = 4) -> np.ndarray:
  """BLEU's sufficient statistics of one line against one reference, with sacrebleu's
  default 13a tokenizer: [hyp length, ref length, matches n=1..4, hyp n-grams n=1..4]."""
  tokenize = Tokenizer13a()
  h, r = tokenize(hyp.rstrip()).split(), tokenize(ref.rstrip()).split()
  matches, totals = [], []
  for n in range(1, max_order + 1):
    hyp_grams = collections.Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
    ref_grams = collections.Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
    matches.append(sum(min(c, ref_grams[g]) for g, c in hyp_grams.items()))
    totals.append(max(len(h) - n + 1, 0))
  return np.array([len(h), len(r)] + matches + totals, np.int64)


def corpus_bleu_of(stats: np.ndarray) -> float:
  """Corpus BLEU from summed `line_statistics` (sacrebleu's formula, no smoothing)."""
  stats = [int(x) for x in stats]
  return BLEU.compute_bleu(correct=stats[2:6], total=stats[6:10], sys_len=stats[0],
                           ref_len=stats[1]).score


def paired_bootstrap(target_hyps: Sequence[str], draft_hyps: Sequence[str],
                     refs: Sequence[str], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
                     ) -> Dict[str, float]:
  """Corpus BLEU of target and draft on the same resampled test lines (Koehn, 2004).

  Returns the share of resamples in which the target scores strictly higher, and the
  2.5% / 97.5% quantiles of target BLEU minus draft BLEU.
  """
  stats = [np.stack([line_statistics(h, r) for h, r in zip(hyps, refs)])
           for hyps in (target_hyps, draft_hyps)]  # [lines, 10] each
  rng = np.random.default_rng(seed)
  diffs = []
  for _ in range(resamples):
    pick = rng.integers(0, len(refs), len(refs))
    t, d = (corpus_bleu_of(s[pick].sum(0)) for s in stats)
    diffs.append(t - d)
  diffs = np.asarray(diffs)
  return {'target_wins': float(np.mean(diffs > 0)),
          'diff_low': float(np.quantile(diffs, 0.025)),
          'diff_high': float(np.quantile(diffs, 0.975))}


def bleu_by_kind(hyps: Dict[str, Sequence[str]], refs: Sequence[str],
                 near_dup: Sequence[bool]) -> Dict[str, Dict[str, float]]:
  """{'near_duplicate' | 'novel': {'lines': n, <model>: corpus BLEU}} of each model's
  hypotheses on the test lines with / without a near-twin in train."""
  out = {}
  for kind, flag in (('near_duplicate', True), ('novel', False)):
    rows = [i for i, f in enumerate(near_dup) if bool(f) == flag]
    out[kind] = {'lines': len(rows)}
    for name, h in hyps.items():
      out[kind][name] = round(BLEU().corpus_score([h[i] for i in rows],
                                                  [[refs[i] for i in rows]]).score, 2)
  return out


def training_summary(args, name: str) -> dict:
  """The summary.json `scripts/train_demo.py` wrote for model `name`, or {} when none."""
  path = os.path.join(args.workdir, name, 'summary.json')
  if not os.path.exists(path):
    return {}
  with open(path, encoding='utf-8') as f:
    return json.load(f)


def speculative_lines(r: dict, num_test: int) -> list:
  """The card's table of the pair's speculative decoding (greedy and T=1) and how many
  greedy outputs equal the target's own, as markdown lines."""
  g, s = r['greedy'], r['t1']
  return [
      '| sampling | alpha | acceptance rate | tokens per target call |',
      '|---|---|---|---|',
      f'| greedy | {g["alpha"]:.3f} | {g["acceptance_rate"]:.3f} | {g["tokens_per_call"]:.2f} |',
      f'| temperature 1 | {s["alpha"]:.3f} | {s["acceptance_rate"]:.3f} | '
      f'{s["tokens_per_call"]:.2f} |',
      '',
      f'Greedy speculative outputs equal the target\'s own greedy outputs on '
      f'{r["greedy_matches_target"]} of {num_test} rows.',
  ]


def _distilled_text(summary):
  """Where the draft's training inputs came from, for the model card."""
  names = {'train': 'train inputs', 'validation': 'validation inputs',
           'unlabelled': 'English-only inputs with no reference (`unlabelled.jsonl` of '
                         '`build_demo_corpus.py`: messages from the other languages\' '
                         'catalogs, sentences of Python\'s docstrings and of the READMEs and '
                         'changelogs under /usr/share/doc)'}
  counts = summary.get('distilled', {'train': summary.get('training_pairs', '?')})
  return ' and '.join(f'{n} {names.get(s, s)}' for s, n in counts.items())


def _total_minutes(target, draft, distill_minutes):
  """'N min' of target training + distillation data + draft training, or '?' if unknown."""
  parts = [target.get('minutes'), draft.get('minutes')]
  if None in parts:
    return '?'
  return f'{sum(parts) + distill_minutes:.0f} min'


def _bleu_text(r) -> str:
  """The card's paragraph and table comparing target and draft BLEU."""
  b, k = r.get('bootstrap'), r.get('by_kind')
  if not b or not k:
    return ''
  near, novel = k['near_duplicate'], k['novel']
  return '\n'.join([
      f'Target minus draft: {r["target_bleu"] - r["draft_bleu"]:+.2f} BLEU; paired bootstrap '
      f'over {BOOTSTRAP_RESAMPLES} resamples of the test lines: the target scores higher in '
      f'{b["target_wins"]:.1%} of them, 95% interval of the difference '
      f'[{b["diff_low"]:+.2f}, {b["diff_high"]:+.2f}].',
      '',
      'Gettext catalogs repeat templates ("Switch to workspace 3" / "... 6"), so some '
      'held-out lines have a near-twin in train (word sets with Jaccard >= 0.6, '
      '`corpus.near_duplicates`). BLEU on each kind:',
      '',
      '| test lines | count | target BLEU | draft BLEU |',
      '|---|---|---|---|',
      f'| with a near-twin in train | {near["lines"]} | {near["target"]} | {near["draft"]} |',
      f'| novel | {novel["lines"]} | {novel["target"]} | {novel["draft"]} |'])


def write_card(args, r) -> str:
  """Writes MODEL_CARD.md from the stage summaries and the evaluation results; its path."""
  counts = {s: len(corpus.load_pairs(s, args.data)) for s in corpus.SPLITS}
  catalogs = len(glob.glob('/usr/share/locale/de/LC_MESSAGES/*.mo'))
  t, d = training_summary(args, 'target'), training_summary(args, 'draft')
  distill_minutes = sum(float(np.load(p)['minutes']) for p in glob.glob(
      os.path.join(args.workdir, 'distill', '*.npz')))

  def train_row(name, config, x):
    return (f'| {name} | `{config.name}` | {r[name + "_params"] / 1e6:.2f} M | '
            f'{x.get("steps", "?")} | {x.get("epochs", "?")} | {x.get("minutes", "?")} | '
            f'{x.get("val_loss", "?")} | {r[name + "_bleu"]} | {r["sizes"][name]} |')

  lines = [
      '# specjax demo models: English -> German T5 target and draft',
      '',
      'A small T5 1.1 target and a much smaller draft trained from scratch on this machine '
      'for the speculative decoding demo. Written by `scripts/train_demo.py` (evaluate '
      'stage); do not edit by hand.\n\n## Data\n',
      f'English/German message pairs from the gettext catalogs of this Debian system '
      f'(`/usr/share/locale/de/LC_MESSAGES/*.mo`, {catalogs} catalogs: coreutils, git, glib, '
      'gtk, postgres, ...), cleaned and split by `scripts/build_demo_corpus.py`: '
      f'{counts["train"]} train, {counts["validation"]} validation, {counts["test"]} test '
      'pairs. Input: `translate English to German: <en>`; target: the German. Vocabulary: '
      '`spm.model`, 4000 SentencePiece pieces (pad 0, eos 1, unk 2), logits padded to 4096. '
      'Training pads pairs into buckets '
      f'{", ".join(f"{b.input_len} tokens x {b.batch}" for b in args.buckets)} and drops the '
      f'{t.get("dropped", "?")} longer train pairs '
      f'({t.get("dropped", 0) / max(counts["train"], 1):.1%}); evaluation keeps all.',
      '\n## Models and training\n',
      'Adafactor (optax, T5X settings), linear warmup then cosine decay over the time budget, '
      f'no label smoothing; dropout {t.get("dropout_rate", 0):g} (target) and '
      f'{d.get("dropout_rate", 0):g} (draft). The target learns the references; the draft '
      'learns the target\'s '
      f'own greedy outputs ({_distilled_text(d)}; decoded and scored in '
      f'{distill_minutes:.1f} min), which is what raises alpha; per token its '
      f'loss is {d.get("soft_weight", 0)} x KL(target || draft) (the target\'s '
      f'top-{args.soft_top_k} log-probs at the same prefix, stored by distill-data) '
      f'+ {1 - d.get("soft_weight", 0):g} x cross-entropy on the greedy token.',
      '',
      '| model | config | params | steps | epochs | train min | val loss | test BLEU | size |',
      '|---|---|---|---|---|---|---|---|---|',
      train_row('target', demo_target, t),
      train_row('draft', demo_draft, d),
      '',
      f'In all: {_total_minutes(t, d, distill_minutes)} of training and distillation on this '
      'machine (evaluation not counted).',
      '',
      f'Decode step (one token, logits included, `T5Config.decode_step_macs`): target '
      f'{demo_target.decode_step_macs() / 1e6:.2f} M multiply-adds, draft '
      f'{demo_draft.decode_step_macs() / 1e6:.2f} M '
      f'({demo_draft.decode_step_macs() / demo_target.decode_step_macs():.3f} of the '
      'target\'s); the draft\'s encoder runs once per input and is not part of it. '
      f'Draft validation accuracy against the target\'s greedy outputs (teacher-forced): '
      f'{d.get("val_accuracy", "?")}. Machine: {os.cpu_count()} CPU cores '
      f'({platform.processor() or platform.machine()}), jax {jax.__version__} on CPU, '
      'float32.',
      '\n## Test split (500 pairs)\n',
      'BLEU: sacrebleu corpus BLEU of greedy outputs (max '
      f'{args.max_decode_len} tokens) against the German references.',
      '',
      _bleu_text(r),
      '',
      f'Speculative decoding of the pair, gamma {args.gamma}:',
      '',
      'alpha: mean of beta = sum_x min(p(x), q(x)) (1 or 0 when greedy) over the draft '
      'positions the target verified on the output\'s own prefix: up to the first rejection '
      'and not past EOS; acceptance rate: accepted draft tokens in the output / those '
      'verified positions; tokens per target call: output tokens (EOS included) / per-row '
      'target calls (`specjax.core.figures`).',
      '',
      *speculative_lines(r, counts['test']),
      '',
      "Load with `checkpoints.load_model(None, 'specjax/assets/demo/target')` (and `draft`), "
      "vocabulary `checkpoints.load_vocab('specjax/assets/demo/spm.model')`. Toy models: "
      'they translate short software messages, nothing else.',
      '',
      *datastore_card.section(args.assets),
      *bigram_card.section(args.assets, 'specjax_demo_ende', 'demo_target',
                           'the German side')]
  path = os.path.join(args.assets, 'MODEL_CARD.md')
  with open(path, 'w') as f:
    f.write('\n'.join(lines))
  return path


