"""Bigram tables from text: `bigram.table_of` (the bigrams that occur, counted sparsely)
against the dense [V, V] counts, the atomic write, and `python -m specjax.datastore
bigram` with its one-line refusals."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import signals_for_tests

from specjax import checkpoints
from specjax.checkpoints.registry import DEMO_VOCAB
from specjax.datastore import cli
from specjax.proposers import bigram


@pytest.fixture(autouse=True)
def own_ctrl_c_handler():
  """`cli.main` run here installs the tool's Ctrl-C handler: the test process's comes back."""
  before = signal.getsignal(signal.SIGINT)
  yield
  signal.signal(signal.SIGINT, before)


def _documents(rng, vocab_size, count, values=None):
  """Documents of 0-11 ids, each ending in EOS (1); from `values` alone when given, so that
  most rows have fewer than k next tokens or none."""
  pick = (lambda n: rng.choice(values, n)) if values is not None else (
      lambda n: rng.integers(0, vocab_size, n))
  return [list(pick(rng.integers(0, 12))) + [1] for _ in range(count)]


@pytest.mark.parametrize('vocab_size,top_k,count,few', [(7, 3, 40, False), (12, 8, 30, False),
                                                        (60, 4, 25, True), (300, 8, 50, False),
                                                        (9, 4, 0, False)])
def test_table_of_equals_the_dense_counts(vocab_size, top_k, count, few):
  rng = np.random.default_rng(vocab_size)
  values = np.array([0, 2, 3, vocab_size - 1]) if few else None
  documents = _documents(rng, vocab_size, count, values)
  for start in (0, vocab_size - 1):
    sparse = bigram.table_of(documents, vocab_size, top_k, start)
    dense = bigram.table_from_counts(bigram.counts_of(documents, vocab_size, start), top_k)
    np.testing.assert_array_equal(sparse['next'], dense['next'])
    np.testing.assert_array_equal(sparse['logp'], dense['logp'])
    assert sparse['next'].dtype == np.int32 and sparse['logp'].dtype == np.float32


def test_table_of_ranks_by_count_then_id():
  # After 5: 7 three times, 3 and 2 once each (tie: 2 first); 7 is followed by EOS only.
  documents = [[4, 5, 7, 1]] * 3 + [[4, 5, 3, 1], [4, 5, 2, 1]]
  table = bigram.table_of(documents, 9, 3)
  assert table['next'][5].tolist() == [7, 2, 3]
  shares = np.exp(table['logp'][5])
  assert shares[0] == pytest.approx(3 / 5, abs=1e-3) and shares.sum() == pytest.approx(1)
  assert table['next'][7].tolist() == [1, 0, 2]  # EOS, then the lowest unseen ids
  assert table['next'][0].tolist() == [4, 0, 1]  # the start token: 4 each time
  assert table['next'][8].tolist() == [1, 4, 5]  # never seen: the unigram's top, ties by id
  with pytest.raises(ValueError, match=r'token ids must be in \[0, 9\), got 0 to 9'):
    bigram.table_of([[0, 9]], 9, 3)


def test_save_table_writes_nothing_when_interrupted(tmp_path, monkeypatch):
  table = bigram.table_of([[3, 1]], 4, 2)
  path = str(tmp_path / 't.npz')

  def interrupted(*args, **kw):
    raise KeyboardInterrupt
  with monkeypatch.context() as m:
    m.setattr(np, 'savez_compressed', interrupted)
    with pytest.raises(KeyboardInterrupt):
      bigram.save_table(path, table)
  assert not os.listdir(tmp_path)
  mask = os.umask(0o027)
  try:
    bigram.save_table(path, table)
  finally:
    os.umask(mask)
  assert os.stat(path).st_mode & 0o777 == 0o640  # the mode a plain open gives
  nxt, logp = bigram.read_table(path)
  np.testing.assert_array_equal(nxt, table['next'])
  np.testing.assert_array_equal(logp, table['logp'].astype(np.float16))  # stored so


def test_cli_counts_the_text_with_the_vocabulary(tmp_path, monkeypatch, capsys):
  lines = ['Datei nicht gefunden', 'keine Daten übrig', 'Datei nicht gefunden']
  (tmp_path / 'docs.txt').write_text('\n'.join(lines) + '\n', encoding='utf-8')
  monkeypatch.chdir(tmp_path)
  assert cli.main(['bigram', '--input', 'docs.txt', '--vocab', DEMO_VOCAB, '--output',
                   't.npz', '--top-k', '4', '--json', '--quiet']) == 0
  summary = json.loads(capsys.readouterr().out)
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  documents = [vocab.encode(line) + [vocab.eos_id] for line in lines]
  counts = np.zeros((vocab.vocab_size,) * 2, np.int64)
  for ids in documents:  # counted here by hand: the start token (pad), then each id
    for prev, nxt in zip([vocab.pad_id] + ids[:-1], ids):
      counts[prev, nxt] += 1
  nxt, logp = bigram.read_table('t.npz')
  assert nxt.shape == (vocab.vocab_size, 4)
  first = documents[0][0]  # 'Datei...' starts two of the three lines
  assert nxt[vocab.pad_id, 0] == first and nxt[vocab.pad_id, 1] == documents[1][0]
  expected = bigram.table_from_counts(counts, 4)
  np.testing.assert_array_equal(nxt, expected['next'])
  np.testing.assert_array_equal(logp, expected['logp'].astype(np.float16))
  assert summary['documents'] == 3 and summary['bigrams'] == counts.sum()
  assert (summary['top_k'], summary['vocab_size']) == (4, vocab.vocab_size)
  assert summary['bytes'] == os.path.getsize('t.npz')


@pytest.mark.parametrize('args,message', [
    (['--output', 'x.npz'], 'bigram takes one of --input FILE and --task NAME'),
    (['--input', 'docs.txt', '--output', 'x.np'],
     '--output x.np: a bigram table is an .npz file; pass a path ending in .npz'),
    (['--input', 'docs.txt', '--output', 'x.npz', '--top-k', '0'],
     '--top-k must be in [1, 64], got 0'),
    (['--input', 'docs.txt', '--output', 'old.npz'],
     'old.npz already exists; remove it or pass another --output'),
    (['--input', 'empty.txt', '--output', 'x.npz'], 'no text in empty.txt'),
])
def test_cli_refuses_in_one_line(tmp_path, monkeypatch, capsys, args, message):
  (tmp_path / 'docs.txt').write_text('eins zwei\n', encoding='utf-8')
  (tmp_path / 'empty.txt').write_text('\n', encoding='utf-8')
  (tmp_path / 'old.npz').write_bytes(b'kept')
  monkeypatch.chdir(tmp_path)
  try:
    code = cli.main(['bigram', *args])
  except SystemExit as e:  # argparse's own errors
    code = e.code
  assert code == 2
  err = capsys.readouterr().err
  assert err.count('\n') == 1 and err.startswith('error: ') and message in err
  assert not os.path.exists('x.npz') and (tmp_path / 'old.npz').read_bytes() == b'kept'



def test_ctrl_c_during_the_write_leaves_nothing(tmp_path, monkeypatch, capsys):
  (tmp_path / 'docs.txt').write_text('eins zwei\n', encoding='utf-8')
  monkeypatch.chdir(tmp_path)
  real = np.savez_compressed

  def interrupted(*args, **kw):
    real(*args, **kw)  # the temporary file is whole when Ctrl-C comes
    raise KeyboardInterrupt
  monkeypatch.setattr(np, 'savez_compressed', interrupted)
  assert cli.main(['bigram', '--input', 'docs.txt', '--output', 'x.npz', '--quiet']) == 130
  assert capsys.readouterr().err == 'interrupted: no table written to x.npz\n'
  assert os.listdir(tmp_path) == ['docs.txt']


@pytest.mark.parametrize('command', ['bigram', 'build'])
def test_ctrl_c_during_the_imports_ends_in_one_line(tmp_path, command):
  (tmp_path / 'docs.txt').write_text('eins zwei\n', encoding='utf-8')
  output = 'x.npz' if command == 'bigram' else 'ds'
  proc = subprocess.Popen([sys.executable, '-m', 'specjax.datastore', command, '--input',
                           'docs.txt', '--output', output], cwd=tmp_path,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  signals_for_tests.wait_until_python_runs(proc)
  time.sleep(0.5)  # the tool's imports take seconds (its handler is in place at 0.1 s)
  proc.send_signal(signal.SIGINT)
  _, err = proc.communicate(timeout=120)
  assert proc.returncode == 130 and 'Traceback' not in err, err
  assert err.strip() == f'interrupted: no {"table" if command == "bigram" else "datastore"} ' \
      f'written to {output}'
  assert sorted(os.listdir(tmp_path)) == ['docs.txt']
