"""Session fixtures of the real-T5X tests: a tiny target and draft trained by t5x.train."""
import pytest

import real_t5x


@pytest.fixture(scope='session')
def trained(tmp_path_factory):
  """Model dirs of a tiny target and a tiny draft, each trained for a few steps on the demo
  task by `python -m t5x.train` (Orbax checkpoints: checkpoint_<step>/state)."""
  real_t5x.require_t5x()
  root = tmp_path_factory.mktemp('trained')
  dirs = {name: root / name for name in ('target', 'draft')}
  real_t5x.run_t5x_together('train', [
      ([f'tests/t5x/gin/tiny_{name}.gin', 'tests/t5x/gin/train.gin'],
       {'MODEL_DIR': real_t5x.quoted(path)}) for name, path in dirs.items()])
  return dirs
