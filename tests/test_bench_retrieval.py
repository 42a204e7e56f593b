"""`python -m specjax.bench --drafts` with the drafts that need no draft model (REST, suffix,
lookahead) and cascades, on the bundled demo pair: their rows, greedy outputs identical to
the target alone, tokens per call equal to the decode's own counters, and bad kinds refused
in one line before any model loads."""
import json

import numpy as np
import pytest

import specjax
from specjax.bench import cli, kinds
from specjax.checkpoints.registry import bundled
from specjax.core.figures import decode_figures
from specjax.job import drafts
from specjax.job.decode_job import DecodeJob, load_pair
from specjax.job.inputs import pad_to_bucket, tokenize

MAX_LEN = 8
COMMON = ['--target', 'demo_target', '--draft', 'demo_draft', '--num-examples', '2',
          '--batch-size', '2', '--gammas', '1', '--temperatures', '0', '--max-decode-len',
          str(MAX_LEN), '--rounds', '1', '--variant-gammas', '2']


def _bench(tmp_path, *flags):
  out, md = tmp_path / 'b.json', tmp_path / 'b.md'
  assert cli.main(COMMON + list(flags) + ['--json', str(out), '--markdown', str(md)]) == 0
  return json.loads(out.read_text()), md.read_text()


def _decode_tokens_per_call(spec: str, gamma=None):
  """Tokens per target call of `specjax.speculative_decode` on the bench's batch (the
  demo test split's first 2 lines), the draft resolved as `--draft spec` resolves it."""
  job = DecodeJob(target='demo_target', draft='demo_draft')
  target, tp, model, mp, vocab = load_pair(job)
  pair = bundled('demo_target')
  texts = cli._read_texts(pair.test, pair.prefix, 2)
  x = pad_to_bucket(tokenize(vocab, texts, 64, False)[0], 'bucket', target.pad_id)
  draft, dp = drafts.resolve_draft(spec, target, 'demo_target', lambda _: (model, mp),
                                   vocab=vocab)
  tree = kinds.own_tree(draft)
  out = specjax.speculative_decode(target, tp, draft, dp, x, gamma=None if tree else gamma,
                                   max_decode_len=MAX_LEN, tree=tree)
  return float(decode_figures(out.stats).tokens_per_call)


def test_rest_chain_and_lookahead_tree_rows(tmp_path):
  result, text = _bench(tmp_path, '--drafts', 'rest,lookahead:3,3,2')
  (rest,) = [r for r in result['variants'] if r['draft'] == 'rest']
  assert rest['gamma'] == 2 and rest['identical_to_target'] is True
  assert rest['tokens_per_call'] >= 1.0 and rest['c'] > 0 and rest['predicted_speedup'] > 0
  assert rest['c_timed'] == 'proposal of G / G' and rest['speedup'] > 0
  assert rest['tokens_per_call'] == pytest.approx(_decode_tokens_per_call('rest', 2))
  # lookahead verifies its own tree: no chain row, one tree row
  assert not [r for r in result['variants'] if r['draft'].startswith('lookahead')]
  (look,) = [r for r in result['trees'] if r['draft'] == 'lookahead:3,3,2']
  assert look['tree'] == kinds.OWN_TREE and look['identical_to_target'] is True
  assert look['tokens_per_call'] >= 1.0 and look['speedup'] > 0
  assert look['tokens_per_call'] == pytest.approx(_decode_tokens_per_call('lookahead:3,3,2'))
  assert '| rest | token |' in text and '| lookahead:3,3,2 | own tree |' in text
  assert '- lookahead:3,3,2, T=0.0: its own tree' in text


def test_suffix_trie_and_cascade_rows(tmp_path):
  result, text = _bench(tmp_path, '--drafts', 'suffix,cascade:demo_draft/bigram',
                        '--trees', 'dynamic:4:2:2')
  by = {r['draft']: r for r in result['variants']}
  model, cascade, suffix = by['demo_draft'], by['cascade:demo_draft/bigram'], by['suffix']
  for row in (cascade, suffix):
    assert row['identical_to_target'] is True and row['tokens_per_call'] >= 1.0
    assert row['c'] > 0 and row['c_timed'] == 'proposal of G / G'
  # a greedy vertical cascade proposes the draft model's own chain
  assert cascade['tokens_per_call'] == model['tokens_per_call']
  assert suffix['tokens_per_call'] == pytest.approx(_decode_tokens_per_call('suffix', 2))
  trees = {r['draft']: r for r in result['trees']}
  assert set(trees) == {'demo_draft', 'suffix'}  # a cascade drafts chains only
  assert trees['suffix']['tree'] == 'dynamic:4:2:2'
  assert trees['suffix']['identical_to_target'] is True
  assert trees['suffix']['tokens_per_call'] >= 1.0
  assert '- suffix, T=0.0: the best tree (dynamic:4:2:2' in text


@pytest.mark.parametrize('spec', ['resst', 'lookahead:5,3', 'lookahead:40,3,4', 'cascade:x',
                                  'cascade:demo_draft/demo_draft', 'rest:/no/such/store',
                                  'cascade:demo_draft:4,bigram', 'copy+no_such_model'])
def test_bad_drafts_are_one_line_errors_before_any_load(spec, tmp_path, capsys, monkeypatch):
  monkeypatch.setattr(cli, 'load_pair', lambda *a, **k: pytest.fail('a model loaded'))
  out = tmp_path / 'b.json'
  assert cli.main(COMMON + ['--drafts', spec, '--json', str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f'error: --drafts {spec}') and '\n' not in err, err
  assert not out.exists()


def test_a_table_wider_than_the_target_fails_before_any_row_is_timed(tmp_path, capsys,
                                                                     monkeypatch):
  """A draft that only the loaded target can refuse (a bigram table of a larger vocabulary)
  ends the run in one line once the models load, before the bench times anything."""
  from specjax.proposers import bigram  # pylint: disable=import-outside-toplevel
  width = 60000  # ids: the demo target has 4096 logits
  table = tmp_path / 'wide.npz'
  bigram.save_table(str(table), bigram.table_of([[width - 1, 1]], width, 2))
  monkeypatch.setattr(cli.timing, 'step_costs', lambda *a, **k: pytest.fail('timed'))
  out = tmp_path / 'b.json'
  assert cli.main(COMMON + ['--drafts', f'bigram:{table}', '--json', str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith(f'error: bigram table {table} was built with a vocabulary of {width} '
                        'ids') and '\n' not in err, err
  assert not out.exists()


def test_drafts_keep_the_commas_of_their_own_spelling():
  assert kinds.parse_drafts('copy, rest,lookahead:5,3,4,cascade:demo_draft:2,bigram,suffix,'
                            'lookahead,cascade:a/bigram/3') == [
      'copy', 'rest', 'lookahead:5,3,4', 'cascade:demo_draft:2,bigram', 'suffix', 'lookahead',
      'cascade:a/bigram/3']
  assert kinds.parse_drafts('') == []
  assert kinds.chain_gammas('cascade:demo_draft:2,bigram', None, [2, 3, 4]) == [3, 4]
  assert kinds.chain_gammas('rest', None, [2, 4]) == [2, 4]
