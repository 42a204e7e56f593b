"""The demo model card's BLEU comparisons (scripts/demo_card.py)."""
import pytest

pytest.importorskip('sacrebleu')
from specjax.demo import card as demo_card  # pylint: disable=wrong-import-position

REFS = [f'Die Datei {w} wurde nicht gefunden und kann nicht geöffnet werden' for w in
        ('eins', 'zwei', 'drei', 'vier', 'fünf', 'sechs', 'sieben', 'acht')]
BAD = ['Fehler beim Lesen'] * len(REFS)


def test_paired_bootstrap_ties_and_clear_wins():
  tie = demo_card.paired_bootstrap(BAD, BAD, REFS, resamples=50)
  assert tie == {'target_wins': 0.0, 'diff_low': 0.0, 'diff_high': 0.0}
  win = demo_card.paired_bootstrap(REFS, BAD, REFS, resamples=50)
  assert win['target_wins'] == 1.0 and win['diff_low'] > 50


def test_bleu_by_kind_splits_lines():
  near = [True, True, False, False, False, False, False, False]
  hyps = {'target': REFS[:2] + BAD[2:], 'draft': BAD[:2] + REFS[2:]}
  got = demo_card.bleu_by_kind(hyps, REFS, near)
  assert got['near_duplicate']['lines'] == 2 and got['novel']['lines'] == 6
  assert got['near_duplicate']['target'] == 100.0 and got['novel']['draft'] == 100.0
  assert got['near_duplicate']['draft'] < 5 and got['novel']['target'] < 5


def test_line_statistics_sum_to_sacrebleus_corpus_bleu():
  from sacrebleu.metrics import BLEU
  import numpy as np
  hyps = ['Die Datei wurde nicht gefunden.', 'Fehler beim Lesen der Datei', 'Datei öffnen',
          'Die Datei eins wurde nicht gefunden und kann nicht geöffnet werden']
  refs = REFS[:4]
  stats = sum(demo_card.line_statistics(h, r) for h, r in zip(hyps, refs))
  assert demo_card.corpus_bleu_of(stats) == np.float64(BLEU().corpus_score(hyps, [refs]).score)
