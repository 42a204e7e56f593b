"""Checkpoints written by real T5X's own checkpointers, in every layout current t5x writes
(Orbax, as t5x.train writes by default, and the legacy msgpack + zarr; float32 and bfloat16
save dtypes), load in specjax.load_model with the logits of T5X's own module."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import tiny_t5x  # pylint: disable=wrong-import-position
import specjax  # pylint: disable=wrong-import-position
from specjax import checkpoints  # pylint: disable=wrong-import-position
from t5x import checkpoints as t5x_checkpoints  # pylint: disable=wrong-import-position
from t5x import partitioning  # pylint: disable=wrong-import-position

MODULE = tiny_t5x.module(32, 4, 2, 8, 64)  # tests/t5x/gin/tiny_target.gin's network
MODULE = MODULE.clone(config=MODULE.config.replace(vocab_size=4096))


@pytest.fixture(scope='module')
def written(trained, tmp_path_factory):
  """{layout: path}: t5x.train's own checkpoint, and its params saved again by T5X's Orbax
  manager and legacy Checkpointer with each save dtype."""
  root = tmp_path_factory.mktemp('written')
  _, params = specjax.load_model(None, str(trained['target']))
  state = tiny_t5x.inference_state(MODULE, jax.device_get(params))
  partitioner = partitioning.PjitPartitioner(num_partitions=1)
  out = {'orbax (t5x.train)': trained['target'] / 'checkpoint_150'}
  for dtype in ('float32', 'bfloat16'):
    orbax_dir = root / f'orbax_{dtype}'
    orbax_dir.mkdir()  # T5X's manager takes a missing directory's parent instead
    manager = t5x_checkpoints.OrbaxCheckpointManagerInterface(
        str(orbax_dir), state, partitioner, save_dtype=dtype)
    manager.save(state)
    manager.wait_until_finished()
    manager.close()
    out[f'orbax {dtype}'] = orbax_dir / 'checkpoint_0'
    legacy_dir = root / f'msgpack_{dtype}'
    t5x_checkpoints.Checkpointer(state, partitioner, str(legacy_dir),
                                 save_dtype=jnp.dtype(dtype)).save(state)
    out[f'msgpack {dtype}'] = legacy_dir / 'checkpoint_0'
  return out


def _t5x_read(layout, path):
  """The target params as T5X's (or Orbax's) own reader returns them, as float32."""
  if layout.startswith('msgpack'):
    tree = t5x_checkpoints.load_t5x_checkpoint(str(path))['target']
  else:
    import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
    tree = ocp.PyTreeCheckpointer().restore(str(path / 'state'))['target']
  return jax.tree.map(lambda a: np.asarray(a, np.float32), tree)


def _t5x_logits(params, inputs, targets):
  return np.asarray(MODULE.apply({'params': params}, inputs, np.pad(targets, ((0, 0), (1, 0)))
                                 [:, :-1], targets, enable_dropout=False))


INPUTS = np.array([[7, 5, 3, 6, 4, 139, 1, 0], [12, 40, 9, 1, 0, 0, 0, 0]], np.int32)
TARGETS = np.array([[83, 297, 23, 2171, 3859, 1], [5, 6, 7, 8, 9, 10]], np.int32)


@pytest.mark.parametrize('layout', ['orbax (t5x.train)', 'orbax float32', 'orbax bfloat16',
                                    'msgpack float32', 'msgpack bfloat16'])
def test_load_model_reads_every_t5x_layout(written, layout):
  path = written[layout]
  stored = _t5x_read(layout, path)
  fmt = checkpoints.detect_format(str(path))
  assert fmt == ('t5x' if layout.startswith('msgpack') else 't5x_orbax')
  model, params = specjax.load_model(None, str(path))
  assert (model.config.emb_dim, model.config.vocab_size) == (32, 4096)
  for got, want in zip(jax.tree.leaves(params), jax.tree.leaves(stored)):
    np.testing.assert_array_equal(np.asarray(got), want)
  if layout == 'msgpack bfloat16':  # stored rounded to bfloat16, read back as float32
    kernel = stored['decoder']['logits_dense']['kernel']
    np.testing.assert_array_equal(kernel, kernel.astype(jnp.bfloat16).astype(np.float32))
  decoder_inputs = np.pad(TARGETS, ((0, 0), (1, 0)))[:, :-1]
  ours = np.asarray(model.logits(params, INPUTS, decoder_inputs))
  np.testing.assert_allclose(ours, _t5x_logits(stored, INPUTS, TARGETS), atol=2e-5)


def test_orbax_and_msgpack_give_the_same_logits(written):
  # float32 only: T5X's Orbax manager stores float32 whatever its save_dtype (here, t5x
  # cc342d4), while its msgpack Checkpointer rounds to bfloat16.
  logits = []
  for layout in ('orbax float32', 'msgpack float32', 'orbax (t5x.train)'):
    model, params = specjax.load_model(None, str(written[layout]))
    logits.append(np.asarray(model.logits(params, INPUTS, np.pad(
        TARGETS, ((0, 0), (1, 0)))[:, :-1])))
  np.testing.assert_array_equal(logits[0], logits[1])
  np.testing.assert_array_equal(logits[0], logits[2])
