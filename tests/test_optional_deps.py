"""seqio, TensorFlow and t5x stay optional: the package and its CLIs import without them,
and --task without seqio is a one-line error naming the fix. The Hugging Face tests skip
without torch and transformers, unless SPECJAX_REQUIRE_HF asks for them."""
import importlib.util
import os
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


def test_lazy_modules_import_at_first_use_and_skip_or_fail_as_asked(monkeypatch):
  monkeypatch.delitem(sys.modules, 'colorsys', raising=False)
  lazy = hf_for_tests.Lazy('colorsys')
  assert 'colorsys' not in sys.modules  # nothing imported yet
  assert lazy.rgb_to_hsv(1.0, 0.0, 0.0) == (0.0, 1.0, 1.0) and 'colorsys' in sys.modules
  missing = hf_for_tests.Lazy('specjax_no_such_package')
  monkeypatch.delenv(hf_for_tests.REQUIRE_ENV, raising=False)
  with pytest.raises(pytest.skip.Exception):
    missing.anything  # pylint: disable=pointless-statement
  monkeypatch.setenv(hf_for_tests.REQUIRE_ENV, '1')
  with pytest.raises(ImportError):
    missing.anything  # pylint: disable=pointless-statement


def test_a_file_that_requires_a_missing_package_skips_or_fails_as_asked(tmp_path):
  """`hf_for_tests.required` in a test file of its own, whose module fixture would fail:
  the requirement comes first, so the tests skip, or fail on the import alone."""
  (tmp_path / 'test_needs.py').write_text(
      'import pytest\nimport hf_for_tests\n'
      "needs = hf_for_tests.required('specjax_no_such_package')\n"
      "@pytest.fixture(scope='module')\ndef built():\n  raise AssertionError('built first')\n"
      'def test_one(built):\n  pass\ndef test_two():\n  pass\n')
  env = {k: v for k, v in os.environ.items() if k != hf_for_tests.REQUIRE_ENV}
  env['PYTHONPATH'] = os.path.dirname(os.path.abspath(__file__))

  def run(**extra):
    return subprocess.run([sys.executable, '-m', 'pytest', '-q', '-p', 'no:cacheprovider',
                           '-p', 'no:xdist', 'test_needs.py'], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, env=dict(env, **extra))
  skipped = run()
  assert skipped.returncode == 0 and '2 skipped' in skipped.stdout, skipped.stdout
  failed = run(**{hf_for_tests.REQUIRE_ENV: '1'})
  assert failed.returncode == 1 and '2 errors' in failed.stdout, failed.stdout
  assert 'built first' not in failed.stdout and 'ModuleNotFoundError' in failed.stdout


def test_evaluate_help_offers_only_what_evaluate_takes(capsys):
  """evaluate decodes with the draft and the integer gamma it is given: its --help names
  neither --gamma auto's calibration nor --draft auto, which it refuses, as its own."""
  from specjax import evaluate  # pylint: disable=import-outside-toplevel
  with pytest.raises(SystemExit):
    evaluate.parse_args(['--help'])
  text = ' '.join(capsys.readouterr().out.split())
  assert '--gamma auto is python -m specjax.decode\'s' in text
  assert 'lookahead its own tree, whose depth is the gamma' in text
  for decode_only in ('pick the gamma the formula predicts', 'calibrates each proposer',
                      '--tree auto weighs'):
    assert decode_only not in text
  with pytest.raises(SystemExit):
    decode.parse_args(['--help'])
  decode_text = ' '.join(capsys.readouterr().out.split())
  assert all(s in decode_text for s in (
      'pick the gamma the formula predicts', 'calibrates each proposer'))  # decode's own
