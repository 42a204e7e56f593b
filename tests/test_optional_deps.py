"""seqio, TensorFlow and t5x stay optional: the package and its CLIs import without them,
and --task without seqio is a one-line error naming the fix. The Hugging Face tests skip
without torch and transformers, unless SPECJAX_REQUIRE_HF asks for them."""
import importlib.util
import subprocess
import sys

import pytest

from specjax import decode
import hf_for_tests


def test_modules_import_without_seqio_tensorflow_or_t5x():
  code = ('import sys, specjax, specjax.decode, specjax.evaluate, specjax.t5x.decoding, '
          'specjax.t5x.restore, specjax.checkpoints.t5x_orbax; '
          'print(sorted(m for m in ("tensorflow", "seqio", "t5x", "t5") if m in sys.modules))')
  out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,
                       timeout=300, check=True)
  assert out.stdout.strip().splitlines()[-1] == '[]'


@pytest.mark.skipif(importlib.util.find_spec('seqio') is not None, reason='seqio installed')
def test_task_without_seqio_is_a_one_line_error(capsys):
  assert decode.main(['--task', 'specjax_demo_ende', '--quiet']) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and '\n' not in err and 'pip install seqio' in err


@pytest.mark.skipif(importlib.util.find_spec('seqio') is not None, reason='seqio installed')
def test_python_m_evaluate_without_seqio_is_a_one_line_error():
  """The evaluate entry point itself (its runs with seqio are tests/t5x's)."""
  out = subprocess.run([sys.executable, '-m', 'specjax.evaluate', '--task', 'specjax_demo_ende'],
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 2 and out.stdout == ''
  err = out.stderr.strip()
  assert err.startswith('error: ') and '\n' not in err and 'pip install seqio' in err


def test_hugging_face_tests_skip_or_fail_as_asked(monkeypatch):
  """Without SPECJAX_REQUIRE_HF a missing package skips the test; with it, fails it."""
  missing = 'specjax_no_such_package'
  monkeypatch.delenv(hf_for_tests.REQUIRE_ENV, raising=False)
  with pytest.raises(pytest.skip.Exception):
    hf_for_tests.require(missing)
  monkeypatch.setenv(hf_for_tests.REQUIRE_ENV, '1')
  with pytest.raises(ImportError):
    hf_for_tests.require(missing)
  assert hf_for_tests.require('json').dumps([1]) == '[1]'
