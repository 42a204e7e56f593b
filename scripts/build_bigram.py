"""Builds the bigram draft table of a pair from the target side of a corpus.

Counts, over every training target tokenized with the pair's vocabulary and framed as the
decoder sees it (the start token, the ids, EOS), how often each token follows each other,
keeps the top-k next tokens per token (`specjax.proposers.bigram.table_from_counts`) and
writes them compactly (uint16 ids, float16 log-probabilities) as .npz: the demo pair's is
`specjax/assets/demo/bigram.npz`, built from the demo corpus's train split.

Usage:
  python scripts/build_bigram.py [--train data/demo/train.jsonl] [--field de]
      [--vocab specjax/assets/demo/spm.model] [--top-k 8] [--out specjax/assets/demo/bigram.npz]
"""
from __future__ import annotations

import argparse
import json

from specjax import checkpoints
from specjax.checkpoints.registry import DEMO_VOCAB
from specjax.proposers.bigram import counts_of, save_table, table_from_counts


def main() -> None:
  p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  p.add_argument('--train', default='data/demo/train.jsonl')
  p.add_argument('--field', default='de', help='the target side of each JSON line')
  p.add_argument('--vocab', default=DEMO_VOCAB)
  p.add_argument('--top-k', type=int, default=8)
  p.add_argument('--out', default='specjax/assets/demo/bigram.npz')
  args = p.parse_args()
  vocab = checkpoints.load_vocab(args.vocab)
  size = vocab.vocab_size
  with open(args.train, encoding='utf-8') as f:
    documents = [vocab.encode(json.loads(line)[args.field]) + [vocab.eos_id] for line in f]
  counts = counts_of(documents, size, vocab.pad_id)
  lines = len(documents)
  table = table_from_counts(counts, args.top_k)
  save_table(args.out, table)
  print(f'{lines} targets, {counts.sum()} bigrams -> {args.out} (top {args.top_k} of {size})')


if __name__ == '__main__':
  main()
