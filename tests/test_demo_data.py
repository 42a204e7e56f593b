"""Tests for the demo corpus: cleaning, catalog reading, split, tokenization."""

import io
import json
import os
import struct

import numpy as np
import pytest
import sentencepiece as spm

from specjax.demo import corpus

from specjax.checkpoints.registry import ASSETS  # noqa: E402


# --- cleaning -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, clean",
    [
        ("_Open File...", "Open File"),
        ("&Save As…", "Save As"),
        ("Search && Replace", "Search & Replace"),
        ("Save &As", "Save As"),
        ("<b>Bold</b> text", "Bold text"),
        ("Name:", "Name"),
        ("%s: write failed\n", "write failed"),
        ("%1$s: cannot stat %2$s", "cannot stat"),
        ("Progress: %d%%", "Progress: %"),
        ("%-10.3lf %llu %s", ""),
        ("%(name)s created", "created"),
        ("Offset %<PRIu64>", "Offset"),
        ("could not read lock file \"%s\": %m", "could not read lock file"),
        ("Datei »%s« existiert", "Datei existiert"),
        ("Failed {0}", "Failed"),
        ("{name} was removed.", "was removed."),
        ("  many   spaces\tand\nlines  ", "many spaces and lines"),
        ("Done .", "Done."),
        ("\ufeffRing\a the bell", "Ring the bell"),
        ("1 &lt; 2 &amp; more", "1 < 2 & more"),
        ("Keep <options> placeholders", "Keep <options> placeholders"),
    ],
)
def test_clean_message(raw, clean):
    assert corpus.clean_message(raw) == clean


@pytest.mark.parametrize(
    "en, de",
    [
        ("", "Datei"),  # empty English
        ("File", ""),  # untranslated
        ("Linux", "Linux"),  # identical
        ("GNOME", "gnome"),  # identical up to case
        ("a", "b"),  # too short
        ("word " * 25, "Wort " * 25),  # too many words
        ("x" * 121, "y" * 121),  # too long
        ("12345", "12.345"),  # no letters
        ("--verbose", "--ausführlich"),  # option
        ("use <file>", "<Datei> verwenden"),  # placeholder syntax
        ("set SYS_UID_MAX", "SYS_UID_MAX setzen"),  # identifier
        ("open /etc/passwd", "/etc/passwd öffnen"),  # path
        ("cannot open %s for reading", "kann %s nicht zum Lesen öffnen"),  # inner directive
        ("file {0} is missing", "Datei {0} fehlt"),  # inner brace field
        ("unknown 0x%04lx", "unbekannt 0x%04lx"),  # hex residue
    ],
)
def test_clean_pair_drops_junk(en, de):
    assert corpus.clean_pair(en, de) is None


@pytest.mark.parametrize(
    "en, de, want",
    [
        ("_Open File...", "Datei ö_ffnen …", ("Open File", "Datei öffnen")),
        ("%s: write failed\n", "%s: Schreiben fehlgeschlagen\n", ("write failed", "Schreiben fehlgeschlagen")),
        ("Input/Output error", "Ein-/Ausgabefehler", ("Input/Output error", "Ein-/Ausgabefehler")),
        ("e.g. a name", "z.B. ein Name", ("e.g. a name", "z.B. ein Name")),
    ],
)
def test_clean_pair_keeps_prose(en, de, want):
    assert corpus.clean_pair(en, de) == want


# --- catalogs -------------------------------------------------------------------------


def _write_mo(path, entries):
    """Writes a little-endian GNU .mo file from (msgid bytes, msgstr bytes) entries."""
    entries = sorted(entries)
    n = len(entries)
    ids_at, strs_at = 28, 28 + 8 * n
    data_at = 28 + 16 * n
    blob, id_table, str_table = io.BytesIO(), [], []
    for table, index in ((id_table, 0), (str_table, 1)):
        for entry in entries:
            table.append((len(entry[index]), data_at + blob.tell()))
            blob.write(entry[index] + b"\0")
    with open(path, "wb") as f:
        f.write(struct.pack("<7I", 0x950412DE, 0, n, ids_at, strs_at, 0, data_at))
        for length, offset in id_table + str_table:
            f.write(struct.pack("<2I", length, offset))
        f.write(blob.getvalue())


def test_read_catalog(tmp_path):
    header = b"Content-Type: text/plain; charset=UTF-8\nPlural-Forms: nplurals=2; plural=(n != 1);\n"
    path = tmp_path / "demo.mo"
    _write_mo(path, [
        (b"", header),
        (b"Open", "Öffnen".encode()),
        (b"menu\x04Quit", b"Beenden"),
        (b"%d file\x00%d files", b"%d Datei\x00%d Dateien"),
        (b"Untranslated", b""),
    ])
    assert sorted(corpus.read_catalog(path)) == [
        ("%d file", "%d Datei"), ("Open", "Öffnen"), ("Quit", "Beenden"),
    ]


# --- split ----------------------------------------------------------------------------


def _pairs(n):
    return [(f"Open file number {i}", f"Datei Nummer {i} öffnen") for i in range(n)]


def test_build_splits_sizes_and_disjoint():
    splits = corpus.build_splits(_pairs(100), n_test=10, n_validation=15)
    assert [len(splits[s]) for s in corpus.SPLITS] == [75, 15, 10]
    english = [{en for en, _ in splits[s]} for s in corpus.SPLITS]
    assert sum(map(len, english)) == 100
    assert not (english[0] & english[1] or english[0] & english[2] or english[1] & english[2])


def test_build_splits_is_deterministic_and_order_free():
    pairs = _pairs(60)
    a = corpus.build_splits(pairs, n_test=5, n_validation=5)
    b = corpus.build_splits(list(reversed(pairs)), n_test=5, n_validation=5)
    assert a == b


def test_build_splits_dedupes_by_english_keeping_first():
    pairs = [("Open file", "Datei öffnen"), ("open file", "öffne Datei"), ("Open file", "Öffnen")]
    splits = corpus.build_splits(pairs, n_test=0, n_validation=0)
    assert splits["train"] == [("Open file", "Datei öffnen")]


def test_english_only_keeps_new_prose_away_from_held_out_hashes():
    splits = corpus.build_splits(_pairs(100), n_test=10, n_validation=15)
    held = max(corpus.split_key(en) for s in ("test", "validation") for en, _ in splits[s])
    known = [en for s in corpus.SPLITS for en, _ in splits[s]]
    fresh = [f"Stop unit number {i}" for i in range(200)]
    messages = fresh + [known[0].upper(), "<b>Stop unit number 7</b>", "file %s of %d here",
                        "--verbose", "Stop unit number 3"]
    extra = corpus.english_only(messages, splits)
    assert all(corpus.split_key(en) > held for en in extra)
    assert known[0] not in extra and known[0].upper() not in extra  # in a split already
    assert "--verbose" not in extra and not any("%" in en for en in extra)
    assert len(extra) == len(set(extra)) and set(extra) <= set(fresh)
    # Those ranking among the held-out hashes are dropped, the rest kept: about 75%.
    assert set(extra) == {en for en in fresh if corpus.split_key(en) > held}
    assert 0.5 < len(extra) / len(fresh) < 0.95
    assert extra == sorted(extra, key=corpus.split_key)


def test_english_sentences_splits_paragraphs_bullets_and_sentences():
    text = ("Return the number of items. It is cached.\nSee below!\n\n"
            "* Fixed a crash in the parser (closes: #123).\n\n"
            "  2. Use e.g. the option 3.5 times? \"Quoted\" starts one too.")
    assert corpus.english_sentences(text) == [
        "Return the number of items.", "It is cached.", "See below!",
        "Fixed a crash in the parser (closes: #123).",
        "Use e.g. the option 3.5 times?", '"Quoted" starts one too.']
    assert corpus.english_sentences("") == []


def test_load_pairs(tmp_path):
    (tmp_path / "test.jsonl").write_text(
        json.dumps({"en": "Yes", "de": "Ja"}) + "\n", encoding="utf-8")
    assert corpus.load_pairs("test", tmp_path) == [("Yes", "Ja")]
    with pytest.raises(ValueError, match="split"):
        corpus.load_pairs("dev", tmp_path)
    with pytest.raises(FileNotFoundError, match="build_demo_corpus"):
        corpus.load_pairs("train", tmp_path)


# --- tokenization ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def sp():
    lines = [corpus.make_example(en) for en, _ in _pairs(50)] + [de for _, de in _pairs(50)]
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, model_type="unigram",
        vocab_size=40, pad_id=0, eos_id=1, unk_id=2, bos_id=-1, num_threads=1,
        hard_vocab_limit=False, minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=model.getvalue())


def test_make_example():
    assert corpus.make_example("Hello") == "translate English to German: Hello"


def test_tokenize_batch_eos_and_padding(sp):
    texts = ["Datei", "Datei Nummer 7 öffnen"]
    batch = corpus.tokenize_batch(sp, texts, max_len=32)
    assert batch.dtype == np.int32 and batch.shape == (2, 32)
    for row, text in zip(batch, texts):
        ids = sp.encode(text)
        n = len(ids)
        assert list(row[:n]) == ids
        assert row[n] == corpus.EOS_ID
        assert not row[n + 1:].any()


def test_tokenize_batch_too_long(sp):
    text = "Datei Nummer 7 öffnen"
    n = len(sp.encode(text)) + 1
    assert corpus.tokenize_batch(sp, [text], max_len=n)[0, -1] == corpus.EOS_ID
    with pytest.raises(ValueError, match="--max-input-len"):
        corpus.tokenize_batch(sp, [text], max_len=n - 1)
    cut = corpus.tokenize_batch(sp, [text], max_len=n - 1, truncate=True)
    assert list(cut[0]) == sp.encode(text)[: n - 2] + [corpus.EOS_ID]


def test_tokenize_batch_accepts_a_path():
    path = os.path.join(ASSETS, "spm.model")
    batch = corpus.tokenize_batch(path, ["Open file"], max_len=8)
    assert batch[0, 0] > 2 and corpus.EOS_ID in batch[0]


# --- bundled assets -------------------------------------------------------------------


def test_bundled_vocab_uses_t5_ids():
    sp = spm.SentencePieceProcessor(model_file=os.path.join(ASSETS, "spm.model"))
    assert (sp.pad_id(), sp.eos_id(), sp.unk_id(), sp.bos_id()) == (0, 1, 2, -1)
    assert os.path.getsize(os.path.join(ASSETS, "spm.model")) < 1 << 20


def test_bundled_samples():
    with open(os.path.join(ASSETS, "samples.jsonl"), encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 8
    for row in rows:
        assert row["inputs"].startswith(corpus.TASK_PREFIX) and row["targets"]


def test_near_duplicates_matches_brute_force_jaccard():
    rng = np.random.default_rng(0)
    vocab = [f"w{chr(97 + i)}" for i in range(12)]  # letters only: digits are not words
    texts = [" ".join(rng.choice(vocab, rng.integers(1, 7))) for _ in range(300)]
    queries = [" ".join(rng.choice(vocab, rng.integers(0, 7))) for _ in range(300)]

    def words(s):
        return set(s.split())

    def brute(q):
        return bool(words(q)) and any(
            len(words(q) & words(c)) / len(words(q) | words(c)) >= 0.6 for c in texts)

    got = corpus.near_duplicates(queries, texts, 0.6)
    assert got == [brute(q) for q in queries]
    assert 0 < sum(got) < len(got)


def test_near_duplicates_sees_templates_not_numbers_or_case():
    texts = ["Switch to workspace 3", "cannot open file"]
    got = corpus.near_duplicates(
        ["switch to Workspace 6", "cannot set path in scalar", "42", "cannot open the file"],
        texts)
    assert got == [True, False, False, True]
