"""gs:// paths on a machine that cannot reach GCS: one line at once, not a minute of retries.

The name lookup is patched (this machine's network is not the test's input); tensorstore's
GCS store is patched to fail if it is opened, so a test that passes never waited on it.
"""
import socket

import pytest
import tensorstore as ts

from specjax import decode
from specjax.checkpoints import t5x, vocab
from specjax.checkpoints.registry import T5_VOCAB


class Opened(Exception):
  """tensorstore's GCS store was opened: the request was really made."""


@pytest.fixture
def gcs(monkeypatch):
  """Patches the lookup of GCS's host; returns a function that sets its answer."""
  for name in t5x.ROUTED_ELSEWHERE:
    monkeypatch.delenv(name, raising=False)
  looked_up = []

  def answer(resolves: bool):
    def getaddrinfo(host, *args, **kwargs):
      looked_up.append(host)
      if not resolves:
        raise socket.gaierror(socket.EAI_NONAME, 'Name or service not known')
      return [(socket.AF_INET, socket.SOCK_STREAM, 6, '', ('192.0.2.1', 443))]
    monkeypatch.setattr(socket, 'getaddrinfo', getaddrinfo)
    return looked_up

  def opened(spec, *args, **kwargs):
    raise Opened(spec['bucket'])

  monkeypatch.setattr(ts.KvStore, 'open', opened)
  t5x.gcs_unreachable.cache_clear()
  yield answer
  t5x.gcs_unreachable.cache_clear()


def test_an_unresolved_host_fails_each_read_without_a_request(gcs):
  looked_up = gcs(resolves=False)
  with pytest.raises(OSError, match='no GCS access, storage.googleapis.com does not resolve'):
    t5x.read_bytes('gs://bucket/a/checkpoint')
  with pytest.raises(OSError, match='no GCS access'):
    t5x.find_steps('gs://bucket/model_dir')
  with pytest.raises(ValueError) as e:
    vocab.load_vocab(T5_VOCAB)
  assert str(e.value) == (
      f'cannot read vocabulary {T5_VOCAB} (no GCS access, storage.googleapis.com does not '
      'resolve: Name or service not known); copy it locally and pass --vocab <local path>')
  assert looked_up == ['storage.googleapis.com']  # looked up once, the answer kept


def test_a_resolved_host_a_proxy_or_another_endpoint_makes_the_request(gcs, monkeypatch):
  gcs(resolves=True)
  with pytest.raises(Opened, match='bucket'):
    t5x.read_bytes('gs://bucket/a/checkpoint')
  t5x.gcs_unreachable.cache_clear()
  looked_up = gcs(resolves=False)
  looked_up.clear()
  for name in ('HTTPS_PROXY', 'TENSORSTORE_GCS_HTTP_URL'):
    monkeypatch.setenv(name, 'http://127.0.0.1:9')
    t5x.gcs_unreachable.cache_clear()
    with pytest.raises(Opened):  # only a request can tell where the route leads
      t5x.read_bytes('gs://bucket/a/checkpoint')
    monkeypatch.delenv(name)
  assert not looked_up


def test_the_command_line_names_the_reason_and_the_flag(gcs, capsys, tmp_path):
  gcs(resolves=False)
  src = tmp_path / 'in.txt'
  src.write_text('hello\n')
  assert decode.main(['--target', 't5_xxl', '--draft', 't5_small', '--input', str(src),
                      '--quiet']) == 2
  err = capsys.readouterr().err.strip()
  assert err == (
      'error: cannot read gs://t5-data/pretrained_models/t5x/t5_1_1_xxl/checkpoint_1000000 '
      '(no GCS access, storage.googleapis.com does not resolve: Name or service not known); '
      'copy it locally and pass --target-checkpoint PATH')
