"""What the 8-device tests share: the tiny T5 pair and 16 inputs of two lengths."""
import os

# Eight simulated CPU devices, set before jax is imported (this file is imported first).
if '--xla_force_host_platform_device_count' not in os.environ.get('XLA_FLAGS', ''):
  os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                             ' --xla_force_host_platform_device_count=8').strip()

import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

from specjax.models.t5 import T5  # pylint: disable=wrong-import-position
from specjax.models.t5_config import t5_tiny, t5_tiny_draft  # pylint: disable=wrong-import-position


@pytest.fixture(scope='module')
def pair_and_inputs():
  """(target, params, draft, params, inputs [16, 6]): random t5_tiny and t5_tiny_draft, EOS
  made likelier so that rows stop at different steps."""
  assert jax.device_count() == 8
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  tp['decoder']['logits_dense']['kernel'] = tp['decoder']['logits_dense']['kernel'].at[
      :, 1].add(0.9)  # rows stop at different steps
  inputs = np.random.default_rng(0).integers(2, 32, (16, 6)).astype(np.int32)
  inputs[:, 4:] = 0
  inputs[1, 2:] = 0  # rows of different lengths
  return target, tp, draft, dp, inputs
