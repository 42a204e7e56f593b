"""Retrieval datastores: the suffix order, the on-disk round trip, every refusal of `load`,
the command line, and the bundled datastores (`specjax.datastore`)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from specjax import checkpoints
from specjax.checkpoints.registry import DEMO_VOCAB, MANPAGES_ASSETS
from specjax.datastore import sources, store
from specjax.models.lm import CausalLM
from specjax.models.lm_config import manlm_target

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MANPAGES_VOCAB = os.path.join(MANPAGES_ASSETS, 'spm.model')


class FakeVocab:
  """What `load` and `vocab_fingerprint` read of a vocabulary."""

  def __init__(self, data: bytes, path: str = 'fake.model'):
    self.data, self.path = data, path

  def serialized(self) -> bytes:
    return self.data


def brute_force(tokens, max_query):
  """The suffix array by sorting Python tuples: (Q tokens, -1 past the end), position."""
  t = [int(x) for x in tokens]
  key = lambda i: tuple(t[i + k] if i + k < len(t) else -1 for k in range(max_query)) + (i,)
  return sorted((i for i in range(len(t)) if t[i] != -1), key=key)


def random_documents(rng, vocab_size, count):
  """Documents of 0-9 ids from a few values (ties and repeats), some of the largest ids."""
  values = np.array([0, 1, 2, vocab_size - 2, vocab_size - 1])
  return [list(rng.choice(values, rng.integers(0, 10))) for _ in range(count)]


@pytest.mark.parametrize('vocab_size,max_query', [(5, 1), (5, 3), (5, 8), (4000, 8),
                                                  (70000, 5), (2**31 - 1, 8)])
def test_suffix_order_is_a_sort_of_tuples(vocab_size, max_query):
  rng = np.random.default_rng(vocab_size + max_query)
  docs = random_documents(rng, vocab_size, 60) + [[2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2]] * 3
  built = store.build(docs, vocab_size, 'sha', max_query)
  expected = np.concatenate([np.append(d, -1) for d in docs if d]).astype(np.int32)
  np.testing.assert_array_equal(built.tokens, expected)
  assert built.tokens.dtype == np.int32 and built.suffixes.dtype == np.int32
  assert built.suffixes.tolist() == brute_force(built.tokens, max_query)
  assert built.meta['documents'] == sum(1 for d in docs if d)
  assert len(built.suffixes) == len(built.tokens) - built.meta['documents']


def test_build_refuses_nothing_and_foreign_ids():
  with pytest.raises(ValueError, match='no text in corpus.txt') as e:
    store.build([[], []], 10, 'sha', source='corpus.txt')
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match=r'id 10 outside \[0, 10\).*--vocab'):
    store.build([[1, 2], [3, 10]], 10, 'sha')
  with pytest.raises(ValueError, match='--max-query'):
    store.build([[1]], 10, 'sha', max_query=0)


@pytest.mark.parametrize('vocab_size,dtype,separator', [(4000, np.uint16, 65535),
                                                        (65535, np.int32, -1)])
def test_write_load_round_trip(tmp_path, vocab_size, dtype, separator):
  docs = [[0, vocab_size - 1, 5], [7], [5, 5, 5, 1]]
  built = store.build(docs, vocab_size, store.vocab_fingerprint(FakeVocab(b'v')), 4,
                      source='three documents')
  store.write(built, str(tmp_path / 'ds'))
  on_disk = np.load(tmp_path / 'ds' / 'tokens.npy', mmap_mode='r')
  assert isinstance(on_disk, np.memmap) and on_disk.dtype == dtype
  assert on_disk[3] == separator
  loaded = store.load(str(tmp_path / 'ds'), vocab=FakeVocab(b'v'))
  assert loaded.tokens.dtype == np.int32 and loaded.suffixes.dtype == np.int32
  np.testing.assert_array_equal(loaded.tokens, built.tokens)
  np.testing.assert_array_equal(loaded.suffixes, built.suffixes)
  assert (loaded.path, loaded.max_query, loaded.vocab_size) == (str(tmp_path / 'ds'), 4,
                                                                vocab_size)
  assert loaded.vocab_sha256 == built.vocab_sha256
  assert loaded.meta['source'] == 'three documents' and loaded.meta['documents'] == 3
  assert not [n for n in os.listdir(tmp_path) if n != 'ds']  # no temporary left


def test_write_refuses_an_existing_datastore_and_leaves_none_when_interrupted(
    tmp_path, monkeypatch):
  built = store.build([[1, 2, 3]], 10, 'sha')
  (tmp_path / 'empty').mkdir()
  store.write(built, str(tmp_path / 'empty'))  # an empty directory is replaced
  with pytest.raises(FileExistsError, match='already exists; remove it') as e:
    store.write(built, str(tmp_path / 'empty'))
  assert '\n' not in str(e.value)
  saves = []

  def interrupted(*args, **kw):
    saves.append(args)
    if len(saves) == 2:
      raise KeyboardInterrupt
    with open(args[0], 'wb') as f:
      np.lib.format.write_array(f, np.asanyarray(args[1]))
  monkeypatch.setattr(np, 'save', interrupted)
  with pytest.raises(KeyboardInterrupt):
    store.write(built, str(tmp_path / 'new'))
  assert sorted(os.listdir(tmp_path)) == ['empty']


def _damage(directory, how):
  """Changes a written datastore as `how` says."""
  meta_path = os.path.join(directory, 'datastore.json')
  with open(meta_path, encoding='utf-8') as f:
    meta = json.load(f)
  if how == 'no json':
    os.remove(meta_path)
    return
  if how == 'bad json':
    with open(meta_path, 'w', encoding='utf-8') as f:
      f.write('{"format": ')
    return
  if how == 'no tokens':
    os.remove(os.path.join(directory, 'tokens.npy'))
    return
  if how == 'bad id':
    tokens = np.load(os.path.join(directory, 'tokens.npy'))
    tokens[0] = 12
    np.save(os.path.join(directory, 'tokens.npy'), tokens)
    return
  changes = {'format': {'format': 'something else'}, 'version': {'version': 99},
             'count': {'tokens': meta['tokens'] + 1}, 'empty': {'tokens': 0},
             'suffix count': {'suffixes': meta['suffixes'] - 1},
             'no vocab_size': {'vocab_size': None}}[how]
  meta.update(changes)
  meta = {k: v for k, v in meta.items() if v is not None}
  with open(meta_path, 'w', encoding='utf-8') as f:
    json.dump(meta, f)


@pytest.mark.parametrize('how,error,message', [
    ('no json', ValueError, r'is not a datastore \(no datastore.json\); build one with '
     'python -m specjax.datastore build'),
    ('bad json', ValueError, 'datastore.json does not parse.*rebuild it with'),
    ('format', ValueError, "has format 'something else'.*rebuild it with"),
    ('version', ValueError, 'version 99 datastore.*reads version 1.*rebuild it with'),
    ('no vocab_size', ValueError, 'lacks vocab_size.*rebuild it with'),
    ('no tokens', ValueError, r'no tokens.npy.*rebuild it with'),
    ('count', ValueError, r'tokens.npy is uint16\[7\] but datastore.json says '
     r'uint16\[8\].*rebuild it'),
    ('suffix count', ValueError, 'counts 4 suffixes.*rebuild it with'),
    ('empty', ValueError, r'is empty \(0 tokens\); rebuild it from a corpus with text'),
    ('bad id', ValueError, r'holds id 12 outside \[0, 10\).*rebuild it with'),
])
def test_load_refuses_in_one_line(tmp_path, how, error, message):
  directory = str(tmp_path / 'ds')
  store.write(store.build([[1, 2, 3], [4, 5]], 10, 'sha'), directory)
  _damage(directory, how)
  with pytest.raises(error, match=message) as e:
    store.load(directory)
  assert '\n' not in str(e.value)


def test_load_refuses_a_missing_directory_and_another_vocabulary(tmp_path):
  with pytest.raises(FileNotFoundError, match='no datastore directory .*build one with'):
    store.load(str(tmp_path / 'nowhere'))
  directory = str(tmp_path / 'ds')
  store.write(store.build([[1, 2]], 10, store.vocab_fingerprint(FakeVocab(b'a'))), directory)
  with pytest.raises(ValueError) as e:
    store.load(directory, vocab=FakeVocab(b'b', 'other.model'))
  text = str(e.value)
  assert '\n' not in text and 'another vocabulary' in text
  assert store.vocab_fingerprint(FakeVocab(b'a'))[:12] in text
  assert store.vocab_fingerprint(FakeVocab(b'b'))[:12] in text
  assert 'python -m specjax.datastore build --vocab other.model' in text


def test_read_file_plain_and_json_lines(tmp_path):
  plain = tmp_path / 'plain.txt'
  plain.write_text('eins zwei\n\n  drei \n', encoding='utf-8')
  assert sources.read_file(str(plain)).texts == ['eins zwei', 'drei']
  rows = tmp_path / 'rows.jsonl'
  rows.write_text('{"en": "a", "de": "A"}\n{"en": "b", "de": "B"}\n', encoding='utf-8')
  read = sources.read_file(str(rows))  # no "targets": the fallback "de"
  assert read.texts == ['A', 'B'] and '"de"' in read.source
  assert sources.read_file(str(rows), field='en').texts == ['a', 'b']
  with pytest.raises(ValueError, match=r'line 1 has no "targets" or "summary" or "de" or '
                     r'"text" field \(its fields: "page"\); pass --field NAME'):
    rows.write_text('{"page": "ls.1"}\n', encoding='utf-8')
    sources.read_file(str(rows))


def _run(*args, cwd):
  return subprocess.run([sys.executable, '-m', 'specjax.datastore', 'build', *args],
                        capture_output=True, text=True, cwd=cwd, check=False,
                        env={**os.environ, 'PYTHONPATH': REPO}, timeout=120)


def test_cli_builds_from_text(tmp_path):
  lines = ['Datei nicht gefunden', 'keine Daten übrig', 'Datei nicht gefunden']
  (tmp_path / 'docs.txt').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  out = _run('--input', 'docs.txt', '--vocab', DEMO_VOCAB, '--output', 'ds', '--json',
             '--quiet', cwd=tmp_path)
  assert out.returncode == 0, out.stderr
  summary = json.loads(out.stdout)
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  loaded = store.load(str(tmp_path / 'ds'), vocab=vocab)
  expected = [i for line in lines for i in vocab.encode(line) + [1, -1]]
  assert loaded.tokens.tolist() == expected
  assert summary['documents'] == 3 and summary['tokens'] == len(expected)
  assert summary['bytes'] == sum(os.path.getsize(tmp_path / 'ds' / n)
                                 for n in os.listdir(tmp_path / 'ds'))
  assert loaded.meta['command'].startswith('python -m specjax.datastore build --input')


def test_cli_refuses_an_empty_file_in_one_line(tmp_path):
  (tmp_path / 'empty.txt').write_text('\n  \n', encoding='utf-8')
  out = _run('--input', 'empty.txt', '--output', 'ds', cwd=tmp_path)
  assert out.returncode == 2
  assert out.stderr.count('\n') == 1 and out.stderr.startswith('error: no text in empty.txt')
  assert not (tmp_path / 'ds').exists()


def _target_vocab(target):
  if target == 'manlm_target':
    return checkpoints.load_tokenizer(MANPAGES_VOCAB, CausalLM(manlm_target))
  return checkpoints.load_vocab(MANPAGES_VOCAB if target == 'manpages_target' else DEMO_VOCAB)


@pytest.mark.parametrize('target', sorted(store.DEFAULT_DATASTORES))
def test_bundled_datastores_load_with_their_targets_vocabularies(target):
  loaded = store.load(store.DEFAULT_DATASTORES[target], vocab=_target_vocab(target))
  ends = np.flatnonzero(loaded.tokens == -1)
  assert len(ends) == loaded.meta['documents'] > 1000
  assert np.all(loaded.tokens[ends - 1] == 1)  # each document ends with EOS
  assert loaded.max_query == store.MAX_QUERY
  sample = loaded.suffixes[::97]
  keys = [tuple(loaded.tokens[i:i + loaded.max_query]) for i in sample]
  assert keys == sorted(keys)


def test_bundled_datastore_refuses_another_targets_vocabulary():
  with pytest.raises(ValueError, match='another vocabulary.*spm.model.*python -m '
                     'specjax.datastore build --vocab'):
    store.load(store.DEFAULT_DATASTORES['manpages_target'], vocab=_target_vocab('demo_target'))
