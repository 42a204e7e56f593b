"""Trains the demo SentencePiece vocabulary on the demo corpus's train split.

One unigram model covers both languages: every train pair contributes its model input
(`"translate English to German: " + en`, so the task prefix is in the vocabulary) and its
German target. Ids follow T5: pad 0, eos 1, unk 2, no bos. Only the `.model` file is
written; it is bundled with the package.

Usage:
  python scripts/build_demo_corpus.py   # first, writes data/demo/
  python scripts/train_demo_vocab.py [--data data/demo] [--vocab-size 4000]
"""

from __future__ import annotations

import argparse
import io
import os

import numpy as np
import sentencepiece as spm

from specjax.demo import corpus

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def train_vocab(lines: list[str], vocab_size: int, character_coverage: float) -> bytes:
    """Trains a T5-style unigram SentencePiece model.

    Args:
      lines: training sentences.
      vocab_size: number of pieces, including pad, eos and unk.
      character_coverage: fraction of characters the pieces must cover; the rest map to unk.

    Returns:
      The serialized model.
    """
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines),
        model_writer=model,
        model_type="unigram",
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        pad_id=corpus.PAD_ID,
        eos_id=corpus.EOS_ID,
        unk_id=2,
        bos_id=-1,
        num_threads=1,  # deterministic, and gentle on a shared machine
        minloglevel=2,
    )
    return model.getvalue()


def mean_pieces(sp: spm.SentencePieceProcessor, texts: list[str]) -> float:
    """Mean number of pieces per text, without EOS."""
    return float(np.mean([len(ids) for ids in sp.encode(texts)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="data/demo", help="folder of the corpus .jsonl files")
    parser.add_argument("--out", default=os.path.join(_REPO, "specjax/assets/demo/spm.model"),
                        help="where to write the SentencePiece model")
    parser.add_argument("--vocab-size", type=int, default=4000)
    parser.add_argument("--character-coverage", type=float, default=0.9999)
    args = parser.parse_args()

    train = corpus.load_pairs("train", args.data)
    lines = [corpus.make_example(en) for en, _ in train] + [de for _, de in train]
    model = train_vocab(lines, args.vocab_size, args.character_coverage)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    with open(args.out, "wb") as f:
        f.write(model)

    sp = spm.SentencePieceProcessor(model_proto=model)
    print(f"vocab: {sp.get_piece_size()} pieces, {len(model) / 1024:.0f} KiB -> {args.out}")
    print(f"trained on {len(lines)} lines ({len(train)} pairs)")
    for split in ("train", "validation"):
        pairs = corpus.load_pairs(split, args.data)
        en = [en for en, _ in pairs]
        print(f"{split:>10} mean pieces: en {mean_pieces(sp, en):.2f}  "
              f"input (with prefix) {mean_pieces(sp, [corpus.make_example(t) for t in en]):.2f}  "
              f"de {mean_pieces(sp, [de for _, de in pairs]):.2f}  "
              f"unk rate de {np.mean([2 in ids for ids in sp.encode([de for _, de in pairs])]):.4f}")


if __name__ == "__main__":
    main()
