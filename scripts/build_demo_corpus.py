"""Builds the English->German demo corpus from the system's gettext catalogs.

Source: the compiled German message catalogs that Debian/Ubuntu packages install under
`/usr/share/locale/de/LC_MESSAGES/*.mo` (coreutils, git, glib, gtk, postgres, iso-codes,
xkeyboard-config, ...; about 71k entries). Each entry maps an English UI/log message
(msgid) to its German translation (msgstr). The translations are the packages' own,
under the packages' licences (mostly GPL/LGPL; iso-codes LGPL-2.1+).

The script reads every catalog in sorted file order (a catalog that does not decode with
its declared charset is skipped with a note), cleans and filters the pairs, dedupes by
English and splits by a hash of the English text (`specjax.demo.corpus.build_splits`), then
writes `{train,validation,test}.jsonl` with one `{"en": ..., "de": ...}` per line, and
`specjax/assets/demo/samples.jsonl` with a few short test pairs in T5's input/target form.
It also writes `unlabelled.jsonl`, English without German for the draft's distillation
only (the draft learns the target's outputs, which need no reference), one
`{"en": ..., "source": ...}` per line: msgids from the other languages' catalogs
(`/usr/share/locale/*/LC_MESSAGES`) that the German ones lack ("locale"), sentences of
Python's docstrings and pydoc topics ("python"), and sentences of the READMEs, NEWS and
changelogs under `/usr/share/doc` ("doc"); at most `--max-sentences` of each of the last
two, a sample in hash order. Every line is kept away
from the held-out sentences by `specjax.demo.corpus.english_only`.

Usage:
  python scripts/build_demo_corpus.py [--catalogs DIR] [--out data/demo]
"""

from __future__ import annotations

import argparse
import ast
import glob
import gzip
import json
import os
import sys
import sysconfig

from specjax.demo import corpus

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_jsonl(path: str, rows: list[dict[str, str]]) -> None:
    """Writes rows as UTF-8 JSON lines."""
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def _pick_samples(test: list[tuple[str, str]], n: int) -> list[tuple[str, str]]:
    """The first n test pairs (hash order) that read as short sentences: 4-10 words."""
    return [(en, de) for en, de in test if 4 <= len(en.split()) <= 10 and en[0].isupper()][:n]


def _locale_messages(root: str, german: str) -> list[str]:
    """English msgids of every catalog under root/*/LC_MESSAGES except the German ones."""
    messages = []
    for path in sorted(glob.glob(os.path.join(root, "*", "LC_MESSAGES", "*.mo"))):
        if os.path.dirname(path) == os.path.normpath(german):
            continue
        try:
            messages.extend(en for en, _ in corpus.read_catalog(path))
        except (UnicodeDecodeError, ValueError, IndexError, OSError):
            continue  # a catalog that does not parse (charset, header) only costs inputs
    return messages


def _python_sentences() -> list[str]:
    """Sentences of this Python's stdlib docstrings and pydoc topics."""
    texts = []
    try:
        from pydoc_data import topics  # pylint: disable=import-outside-toplevel
        texts.extend(topics.topics.values())
    except ImportError:
        pass
    stdlib = sysconfig.get_paths()["stdlib"]
    for path in sorted(glob.glob(os.path.join(stdlib, "**", "*.py"), recursive=True)):
        try:
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read())
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                texts.append(ast.get_docstring(node) or "")
    return [s for text in texts for s in corpus.english_sentences(text)]


def _doc_sentences(root: str) -> list[str]:
    """Sentences of the READMEs, NEWS, changelogs and .txt/.md files under root."""
    sentences = []
    for path in sorted(glob.glob(os.path.join(root, "**", "*"), recursive=True)):
        name = os.path.basename(path).lower()
        if not any(k in name for k in ("readme", "changelog", "news", ".txt", ".md")):
            continue
        try:
            if not os.path.isfile(path) or os.path.getsize(path) > 2_000_000:
                continue
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                text = f.read().decode("utf-8")
        except (UnicodeDecodeError, OSError, EOFError):
            continue
        sentences.extend(corpus.english_sentences(text))
    return sentences


def _unlabelled(args, splits) -> list[dict[str, str]]:
    """The rows of unlabelled.jsonl (see the module docstring)."""
    rows: list[dict[str, str]] = []
    seen = {s: list(p) for s, p in splits.items()}
    sources = [("locale", lambda: _locale_messages(args.other_locales, args.catalogs), None),
               ("python", _python_sentences, args.max_sentences),
               ("doc", lambda: _doc_sentences(args.docs), args.max_sentences)]
    for source, read, limit in sources:
        if source == "locale" and not args.other_locales or source == "doc" and not args.docs:
            continue
        texts = read()
        if source != "locale":  # free text: sentences of a few words, not headings
            texts = [t for t in texts if len(t.split()) >= 3]
        found = corpus.english_only(texts, seen)
        seen["train"] = seen["train"] + [(en, "") for en in found]  # no repeats across sources
        rows.extend({"en": en, "source": source} for en in found[:limit])  # hash order: fair
        print(f"unlabelled {source}: {len(found[:limit])} of {len(found)}")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--catalogs", default="/usr/share/locale/de/LC_MESSAGES",
                        help="folder of German .mo catalogs")
    parser.add_argument("--out", default="data/demo", help="folder for the split .jsonl files")
    parser.add_argument("--samples", default=os.path.join(_REPO, "specjax/assets/demo/samples.jsonl"),
                        help="where to write the bundled test samples ('' to skip)")
    parser.add_argument("--n-samples", type=int, default=8)
    parser.add_argument("--n-test", type=int, default=500)
    parser.add_argument("--n-validation", type=int, default=500)
    parser.add_argument("--other-locales", default="/usr/share/locale",
                        help="root of the other languages' catalogs for unlabelled.jsonl "
                        "('' to skip)")
    parser.add_argument("--docs", default="/usr/share/doc",
                        help="folder of READMEs and changelogs for unlabelled.jsonl ('' to skip)")
    parser.add_argument("--max-sentences", type=int, default=25000,
                        help="most sentences taken from each of the python and doc sources")
    args = parser.parse_args()

    paths = sorted(glob.glob(os.path.join(args.catalogs, "*.mo")))
    if not paths:
        sys.exit(f"no .mo files in {args.catalogs}")
    raw: list[tuple[str, str]] = []
    for path in paths:
        try:
            raw.extend(corpus.read_catalog(path))
        except UnicodeDecodeError as e:
            print(f"skipped {os.path.basename(path)}: {e.reason} ({e.encoding})", file=sys.stderr)
    splits = corpus.build_splits(raw, n_test=args.n_test, n_validation=args.n_validation)

    print(f"catalogs: {len(paths)}  raw pairs: {len(raw)}  kept: {sum(map(len, splits.values()))}")
    for name, pairs in splits.items():
        _write_jsonl(os.path.join(args.out, f"{name}.jsonl"), [{"en": en, "de": de} for en, de in pairs])
        print(f"{name:>10}: {len(pairs)} -> {os.path.join(args.out, name + '.jsonl')}")
    unlabelled = _unlabelled(args, splits)
    _write_jsonl(os.path.join(args.out, "unlabelled.jsonl"), unlabelled)
    print(f"unlabelled: {len(unlabelled)} -> {os.path.join(args.out, 'unlabelled.jsonl')}")
    if args.samples:
        samples = _pick_samples(splits["test"], args.n_samples)
        rows = [{"inputs": corpus.make_example(en), "targets": de} for en, de in samples]
        _write_jsonl(args.samples, rows)
        print(f"   samples: {len(rows)} -> {args.samples}")


if __name__ == "__main__":
    main()
