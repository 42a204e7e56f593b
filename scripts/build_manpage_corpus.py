"""Builds the man-page summarisation corpus and its vocabulary from this system's manuals.

Source: every page under `/usr/share/man/man*/*.gz` (roff, the man(7) macros), the pages
installed by Debian/Ubuntu packages (coreutils, git, the Linux man-pages, gcloud, llvm,
...), under the packages' licences. Each page with a NAME line and a DESCRIPTION gives
one pair: text = the DESCRIPTION's first words, summary = the NAME line's description
(`specjax.demo.manpages`); pairs are deduplicated and split by hash of the text.

Writes `{train,validation,test}.jsonl` under --out, one `{"text", "summary", "page"}` per
line; the test split in the model's form (`{"inputs": "summarize: ...", "targets": ...}`)
and a few samples to specjax/assets/manpages/; and with --vocab a 2000-piece
SentencePiece model trained on the train split (pad 0, eos 1, unk 2, as the demo pair's).

Usage:
  python scripts/build_manpage_corpus.py [--out data/manpages] [--vocab ASSETS/spm.model]
"""
from __future__ import annotations

import argparse
import glob
import io
import json
import os
import sys

import sentencepiece as spm

from specjax.demo import corpus, manpages

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ASSETS = os.path.join(_REPO, 'specjax', 'assets', 'manpages')


def _write_jsonl(path: str, rows) -> None:
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'w', encoding='utf-8') as f:
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False) + '\n')


def train_vocab(lines, vocab_size: int, path: str) -> None:
  """A T5-style unigram SentencePiece model of `lines` written to `path`."""
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(lines), model_writer=model, model_type='unigram',
      vocab_size=vocab_size, character_coverage=0.9995, pad_id=corpus.PAD_ID,
      eos_id=corpus.EOS_ID, unk_id=2, bos_id=-1, num_threads=1, minloglevel=2,
      max_sentence_length=8192)
  os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
  with open(path, 'wb') as f:
    f.write(model.getvalue())


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  p.add_argument('--pages', default='/usr/share/man/man*/*.gz', help='glob of man pages')
  p.add_argument('--out', default='data/manpages')
  p.add_argument('--assets', default=ASSETS, help="where the test split and samples go "
                 "('' to skip)")
  p.add_argument('--vocab', default='', help='write a SentencePiece model trained on the '
                 'train split here')
  p.add_argument('--vocab-size', type=int, default=2000)
  p.add_argument('--n-test', type=int, default=500)
  p.add_argument('--n-validation', type=int, default=500)
  p.add_argument('--n-samples', type=int, default=8)
  args = p.parse_args()

  paths = sorted(glob.glob(args.pages))
  if not paths:
    sys.exit(f'no man pages match {args.pages}; pass --pages')
  pairs, source = [], {}
  for path in paths:
    page = manpages.read_page(path)
    pair = page and manpages.page_pair(page)
    if pair:
      pairs.append(pair)
      source.setdefault(pair, os.path.basename(path))
  splits = manpages.build_splits(pairs, args.n_test, args.n_validation)
  print(f'pages: {len(paths)}  pairs: {len(pairs)}  kept: {sum(map(len, splits.values()))}')
  for name, rows in splits.items():
    _write_jsonl(os.path.join(args.out, f'{name}.jsonl'),
                 [{'text': t, 'summary': s, 'page': source[(t, s)]} for t, s in rows])
    rate = manpages.copy_rate(*zip(*rows)) if rows else 0.0
    print(f'{name:>10}: {len(rows)} pairs, {rate:.0%} of summary words in the text')
  if args.assets:
    test = [{'inputs': manpages.make_example(t), 'targets': s} for t, s in splits['test']]
    _write_jsonl(os.path.join(args.assets, 'test.jsonl'), test)
    short = [r for r in test if len(r['inputs'].split()) <= 24][:args.n_samples]
    _write_jsonl(os.path.join(args.assets, 'samples.jsonl'), short)
    print(f'test and {len(short)} samples -> {args.assets}')
  if args.vocab:
    lines = [manpages.make_example(t) for t, _ in splits['train']]
    lines += [s for _, s in splits['train']]
    train_vocab(lines, args.vocab_size, args.vocab)
    print(f'vocabulary of {args.vocab_size} pieces -> {args.vocab}')


if __name__ == '__main__':
  main()
