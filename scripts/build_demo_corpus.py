"""Builds the English->German demo corpus from the system's gettext catalogs.

Source: the compiled German message catalogs that Debian/Ubuntu packages install under
`/usr/share/locale/de/LC_MESSAGES/*.mo` (coreutils, git, glib, gtk, postgres, iso-codes,
xkeyboard-config, ...; about 71k entries). Each entry maps an English UI/log message
(msgid) to its German translation (msgstr). The translations are the packages' own,
under the packages' licences (mostly GPL/LGPL; iso-codes LGPL-2.1+).

The script reads every catalog in sorted file order (a catalog that does not decode with
its declared charset is skipped with a note), cleans and filters the pairs, dedupes by
English and splits by a hash of the English text (`specjax.demo_data.build_splits`), then
writes `{train,validation,test}.jsonl` with one `{"en": ..., "de": ...}` per line, and
`specjax/assets/demo/samples.jsonl` with a few short test pairs in T5's input/target form.

Usage:
  python scripts/build_demo_corpus.py [--catalogs DIR] [--out data/demo]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys

from specjax import demo_data

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
    args = parser.parse_args()

    paths = sorted(glob.glob(os.path.join(args.catalogs, "*.mo")))
    if not paths:
        sys.exit(f"no .mo files in {args.catalogs}")
    raw: list[tuple[str, str]] = []
    for path in paths:
        try:
            raw.extend(demo_data.read_catalog(path))
        except UnicodeDecodeError as e:
            print(f"skipped {os.path.basename(path)}: {e.reason} ({e.encoding})", file=sys.stderr)
    splits = demo_data.build_splits(raw, n_test=args.n_test, n_validation=args.n_validation)

    print(f"catalogs: {len(paths)}  raw pairs: {len(raw)}  kept: {sum(map(len, splits.values()))}")
    for name, pairs in splits.items():
        _write_jsonl(os.path.join(args.out, f"{name}.jsonl"), [{"en": en, "de": de} for en, de in pairs])
        print(f"{name:>10}: {len(pairs)} -> {os.path.join(args.out, name + '.jsonl')}")
    if args.samples:
        samples = _pick_samples(splits["test"], args.n_samples)
        rows = [{"inputs": demo_data.make_example(en), "targets": de} for en, de in samples]
        _write_jsonl(args.samples, rows)
        print(f"   samples: {len(rows)} -> {args.samples}")


if __name__ == "__main__":
    main()
