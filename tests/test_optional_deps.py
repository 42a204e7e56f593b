"""seqio, TensorFlow and t5x stay optional: the package and its CLIs import without them,
and --task without seqio is a one-line error naming the fix."""
import importlib.util
import subprocess
import sys

import pytest

from specjax import decode


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
