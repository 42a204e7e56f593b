"""English->German data for the bundled demo models.

The corpus is built from gettext message catalogs (see `scripts/build_demo_corpus.py`):
`read_catalog` pulls (English, German) pairs out of one `.mo` file, `clean_pair` strips
UI markup and format directives and filters junk, `build_splits` dedupes and splits by a
hash of the English text. `load_pairs`, `make_example` and `tokenize_batch` serve the
training and decoding scripts.
"""

from __future__ import annotations

import collections
import functools
import gettext
import hashlib
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
import sentencepiece as spm

TASK_PREFIX = "translate English to German: "
SPLITS = ("train", "validation", "test")
PAD_ID = 0
EOS_ID = 1

# Length filters applied to both sides after cleaning.
MIN_CHARS, MAX_CHARS = 2, 120
MIN_WORDS, MAX_WORDS = 1, 24

# printf directives (`%s`, `%-10.3lf`, `%1$s`, `%<PRIu64>`, `%(name)s`); `%%` is a literal.
_PRINTF = re.compile(
    r"%(?:\d+\$)?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?"
    r"(?:<PRI\w+>|\([\w-]+\)[a-zA-Z]|(?:hh|h|ll|l|L|q|j|z|Z|t|I)?[diouxXeEfFgGaAcCsSpnm])"
)
_BRACE_FIELD = re.compile(r"\{[\w.:!-]*\}")
_MARKUP_TAG = re.compile(
    r"</?(?:b|i|u|s|tt|big|small|span|a|sub|sup|br|p|em|strong|markup)\b[^<>]*/?>",
    re.IGNORECASE,
)
_ENTITIES = {"&lt;": "<", "&gt;": ">", "&quot;": '"', "&apos;": "'", "&amp;": "&"}
_ACCEL = re.compile(r"&(?=\w)")
_MNEMONIC = re.compile(r"(?<!\w)_(?=\w)")
# Quote and bracket pairs left empty once a placeholder is gone: `'%s'` -> `''`.
_EMPTY_PAIR = re.compile(r"''|\"\"|``|»«|«»|„“|“”|‘’|‚‘|\(\s*\)|\[\s*\]")
_SPACE_BEFORE_PUNCT = re.compile(r"\s+([,.;:!?)\]«])")
_TRAILING_NOISE = re.compile(r"(?:\s*(?:\.\.\.|…|[:;,]))+$")
_LEADING_NOISE = re.compile(r"^(?:[:;,.]\s*)+")
# Characters that mark code, paths, options, identifiers or syntax rather than prose;
# a lone `/` between words ("and/or", "E/A") is prose.
_CODE_CHARS = re.compile(
    r"[_=<>{}\[\]|\\@#$^*~`%]|--|^-|(?:^|[\s(])/|\w/\w+/|\b0x|[A-Za-z]\.[A-Za-z]"
)
_ABBREVIATIONS = re.compile(r"\b(?:e\.g|i\.e|z\.B|d\.h|u\.a|o\.ä|u\.U|v\.a)\.")


def clean_message(text: str) -> str:
    """Strips UI markup and format noise from one catalog message.

    Removes printf directives, `{0}`/`{name}` fields, markup tags, `&` accelerators and
    `_` mnemonics, line breaks, quote/bracket pairs left empty, and a trailing `:`,
    `...` or `…`, control and format characters; collapses whitespace.

    Args:
      text: a msgid or msgstr.

    Returns:
      The cleaned text; possibly empty.
    """
    text = _MARKUP_TAG.sub("", text)
    for entity, char in _ENTITIES.items():
        text = text.replace(entity, char)
    text = _PRINTF.sub("", text).replace("%%", "%")
    text = _BRACE_FIELD.sub("", text)
    text = text.replace("&&", "\0")  # `&&` is an escaped literal `&`
    text = _ACCEL.sub("", text).replace("\0", "&")
    text = _MNEMONIC.sub("", text)
    text = " ".join(text.split())  # \n, \t and runs of spaces
    text = "".join(c for c in text if unicodedata.category(c) not in ("Cc", "Cf"))  # BEL, BOM
    text = _EMPTY_PAIR.sub("", text)
    text = " ".join(text.split())
    text = _SPACE_BEFORE_PUNCT.sub(r"\1", text)
    text = _TRAILING_NOISE.sub("", text)
    text = _LEADING_NOISE.sub("", text)
    return text.strip()


def _has_inner_placeholder(text: str) -> bool:
    """Whether a raw message has a format directive with words on both sides of it."""
    marked = _BRACE_FIELD.sub("\0", _PRINTF.sub("\0", text))
    letters = [i for i, c in enumerate(marked) if c.isalpha()]
    return bool(letters) and any(
        letters[0] < i < letters[-1] for i, c in enumerate(marked) if c == "\0"
    )


def _is_prose(text: str) -> bool:
    """Whether cleaned text is within the length limits and looks like words, not code."""
    if not MIN_CHARS <= len(text) <= MAX_CHARS:
        return False
    if not MIN_WORDS <= len(text.split()) <= MAX_WORDS:
        return False
    if _CODE_CHARS.search(_ABBREVIATIONS.sub("", text)):
        return False
    chars = text.replace(" ", "")
    letters = sum(c.isalpha() for c in chars)
    return letters >= 2 and letters >= 0.7 * len(chars)


def clean_pair(en: str, de: str) -> tuple[str, str] | None:
    """Cleans one catalog entry and decides whether it is a usable training pair.

    Args:
      en: English msgid.
      de: German msgstr.

    Returns:
      The cleaned `(en, de)`, or None when either side is empty, too short or long
      (`MIN_CHARS..MAX_CHARS` characters, `MIN_WORDS..MAX_WORDS` words), looks like code
      rather than prose, or the German equals the English (an untranslated entry). A
      format directive inside a sentence ("file %s not found") also drops the pair:
      stripping it would leave a broken sentence. Leading and trailing directives
      ("%s: write failed") are stripped.
    """
    if _has_inner_placeholder(en) or _has_inner_placeholder(de):
        return None
    if en.count("_") == 1 and _MNEMONIC.search(en) and de.count("_") == 1:
        de = de.replace("_", "")  # a mnemonic inside a German word: "Datei ö_ffnen"
    en, de = clean_message(en), clean_message(de)
    if not (_is_prose(en) and _is_prose(de)):
        return None
    if en.casefold() == de.casefold():
        return None
    return en, de


def read_catalog(path: str | os.PathLike) -> list[tuple[str, str]]:
    """Reads the raw (msgid, msgstr) pairs of one compiled gettext catalog.

    The header entry and untranslated entries are skipped; a message context
    (`ctx\\x04msgid`) is dropped from the id; a plural entry contributes its singular form.

    Args:
      path: a `.mo` file.

    Returns:
      Pairs in catalog order.

    Raises:
      UnicodeDecodeError: if the catalog's header or messages do not decode with its
        declared charset.
    """
    with open(path, "rb") as f:
        catalog = gettext.GNUTranslations(f)._catalog
    pairs = []
    for key, msgstr in catalog.items():
        if isinstance(key, tuple):
            msgid, form = key
            if form != 0:
                continue
        else:
            msgid = key
        msgid = msgid.split("\x04")[-1]
        if msgid and msgstr:
            pairs.append((msgid, msgstr))
    return pairs


def split_key(en: str) -> str:
    """The hash that orders pairs for the split: the SHA-1 of the English text."""
    return hashlib.sha1(en.encode("utf-8")).hexdigest()


def build_splits(
    pairs: Iterable[tuple[str, str]], n_test: int = 500, n_validation: int = 500
) -> dict[str, list[tuple[str, str]]]:
    """Cleans, dedupes and splits raw pairs.

    Pairs are deduplicated by case-folded cleaned English, keeping the first. The rest are
    ordered by `split_key` of the English; the first `n_test` go to test, the next
    `n_validation` to validation, the others to train. The result depends only on the
    input pairs, and a sentence's split depends only on where its hash ranks.

    Args:
      pairs: raw (English, German) pairs, e.g. from `read_catalog`.
      n_test: size of the test split.
      n_validation: size of the validation split.

    Returns:
      `{"train": [...], "validation": [...], "test": [...]}` of cleaned (en, de) pairs,
      each list in hash order.
    """
    seen: set[str] = set()
    kept = []
    for en, de in pairs:
        pair = clean_pair(en, de)
        if pair is None or pair[0].casefold() in seen:
            continue
        seen.add(pair[0].casefold())
        kept.append(pair)
    return hash_split(kept, n_test, n_validation)


def hash_split(
    pairs: Sequence[tuple[str, str]], n_test: int, n_validation: int
) -> dict[str, list[tuple[str, str]]]:
    """Splits deduplicated pairs by the `split_key` of their first field.

    The pairs are ordered by that hash; the first `n_test` go to test, the next
    `n_validation` to validation, the others to train, so a pair's split depends only on
    where its hash ranks.

    Args:
      pairs: (source, target) pairs with no source twice.
      n_test: size of the test split.
      n_validation: size of the validation split.

    Returns:
      `{"train": [...], "validation": [...], "test": [...]}`, each list in hash order.
    """
    kept = sorted(pairs, key=lambda p: (split_key(p[0]), p))
    n_held = n_test + n_validation
    return {
        "train": kept[n_held:],
        "validation": kept[n_test:n_held],
        "test": kept[:n_test],
    }


_WORD = re.compile(r"[^\W\d_]+")


def _words(text: str) -> frozenset[str]:
    return frozenset(w.casefold() for w in _WORD.findall(text))


def near_duplicates(
    queries: Sequence[str], corpus: Sequence[str], threshold: float = 0.6
) -> list[bool]:
    """Which queries have a near-twin in `corpus`: a line whose set of words (letters only,
    case-folded) overlaps the query's with Jaccard >= threshold.

    Gettext catalogs repeat templates ("Switch to workspace 3" / "... 6"), so a held-out
    line can still have a twin in train; the model card reports BLEU on both kinds.
    A query without words is never a near-duplicate.
    """
    corpus_words = [_words(line) for line in corpus]
    index: dict[str, list[int]] = collections.defaultdict(list)
    for i, words in enumerate(corpus_words):
        for w in words:
            index[w].append(i)
    flags = []
    for query in queries:
        words = _words(query)
        rare = sorted(words, key=lambda w: len(index.get(w, ())))
        # A twin holds >= threshold * n of the query's n words, so it misses at most
        # floor((1 - threshold) * n): it holds one of any floor(...) + 1 of them.
        probe = rare[: int((1.0 - threshold) * len(words) + 1e-9) + 1]
        candidates = {i for w in probe for i in index.get(w, ())}
        flags.append(any(
            len(words & corpus_words[i]) >= threshold * len(words | corpus_words[i])
            for i in candidates) if words else False)
    return flags


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_BULLET = re.compile(r"^(?:[*+\-•]|\d+[.)])\s+")


def english_sentences(text: str) -> list[str]:
    """Splits free English text (docstrings, READMEs) into candidate sentences.

    Paragraphs are separated by blank lines; line breaks inside one are spaces; a list
    bullet starting a paragraph is dropped; a sentence ends at `.`, `!` or `?` followed by
    a space and a capital or a quote. Filtering is left to `english_only`.

    Args:
      text: the text.

    Returns:
      The sentences in order, whitespace-collapsed.
    """
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = _BULLET.sub("", " ".join(paragraph.split()))
        sentences.extend(s for s in _SENTENCE_END.split(paragraph) if s)
    return sentences


def english_only(
    messages: Iterable[str], splits: dict[str, list[tuple[str, str]]]
) -> list[str]:
    """Cleaned English messages with no German translation, for distillation only.

    The draft learns the target's outputs, which need no reference, so English msgids
    found only in other languages' catalogs add inputs. A message is kept when it cleans
    to prose (as `clean_pair` requires of each side), is new (case-folded) to every split,
    and its `split_key` ranks after every held-out (test and validation) sentence, so that
    nothing near the held-out hashes is seen.

    Args:
      messages: raw English msgids.
      splits: the output of `build_splits`.

    Returns:
      Unique cleaned messages in `split_key` order.
    """
    held = splits["test"] + splits["validation"]
    cutoff = max((split_key(en) for en, _ in held), default="")
    seen = {en.casefold() for pairs in splits.values() for en, _ in pairs}
    kept = {}
    for message in messages:
        if _has_inner_placeholder(message):
            continue
        en = clean_message(message)
        if not _is_prose(en) or en.casefold() in seen or split_key(en) <= cutoff:
            continue
        seen.add(en.casefold())
        kept[en] = split_key(en)
    return sorted(kept, key=lambda en: (kept[en], en))


def load_pairs(split: str, root: str | os.PathLike = "data/demo") -> list[tuple[str, str]]:
    """Loads one split written by `scripts/build_demo_corpus.py`.

    Args:
      split: one of `SPLITS`.
      root: the folder holding `{split}.jsonl`.

    Returns:
      The (English, German) pairs in file order.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    path = os.path.join(root, f"{split}.jsonl")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not found; run scripts/build_demo_corpus.py first")
    with open(path, encoding="utf-8") as f:
        return [(row["en"], row["de"]) for row in map(json.loads, f) if row]


def make_example(en: str) -> str:
    """The model input for an English sentence: T5's translation task prefix + text."""
    return TASK_PREFIX + en


@functools.lru_cache(maxsize=8)
def _load_processor(path: str) -> spm.SentencePieceProcessor:
    """Loads and caches a SentencePiece model file."""
    return spm.SentencePieceProcessor(model_file=path)


def tokenize_batch(
    vocab: str | os.PathLike | spm.SentencePieceProcessor,
    texts: Sequence[str],
    max_len: int,
    truncate: bool = False,
) -> np.ndarray:
    """Tokenizes texts into a right-padded id batch, each row ending in EOS.

    Args:
      vocab: a SentencePiece model path or a loaded processor.
      texts: B strings.
      max_len: row length T, counting the EOS.
      truncate: cut over-long texts to `max_len - 1` pieces + EOS instead of raising.

    Returns:
      int32 [B, T] ids; `PAD_ID` (0) after the `EOS_ID` (1).

    Raises:
      ValueError: if a text needs more than `max_len` ids and `truncate` is False.
    """
    if max_len < 1:
        raise ValueError(f"max_len must be >= 1, got {max_len}")
    sp = vocab if isinstance(vocab, spm.SentencePieceProcessor) else _load_processor(os.fspath(vocab))
    out = np.full((len(texts), max_len), PAD_ID, dtype=np.int32)  # [B, T]
    for i, ids in enumerate(sp.encode(list(texts))):
        if len(ids) + 1 > max_len:
            if not truncate:
                raise ValueError(
                    f"text {i} needs {len(ids) + 1} tokens with EOS but max_len is {max_len}; "
                    f"raise --max-input-len or shorten the text: {texts[i][:60]!r}"
                )
            ids = ids[: max_len - 1]
        out[i, : len(ids)] = ids
        out[i, len(ids)] = EOS_ID
    return out
