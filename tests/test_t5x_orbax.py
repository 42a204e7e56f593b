"""T5X's Orbax checkpoint layout (checkpoint_<step>/state/) read by load_model: every path
form, the same params and logits as the msgpack + zarr layout, and its errors.

The layout is written here with Orbax directly, as T5X's checkpoint manager writes it;
tests/t5x/ reads checkpoints written by real T5X."""
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import traverse_util

import specjax
from specjax import checkpoints
from specjax.checkpoints import t5x, t5x_orbax
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny


def _t5x_state(params, step):
  """T5X's saved state: the params under 'target', Adafactor slots and the step."""
  slots = jax.tree.map(lambda p: {'v': np.ones_like(p), 'm': np.zeros((1,), np.float32)},
                       params)
  return {'target': params, 'state': {'step': np.int32(step), 'param_states': slots}}


@pytest.fixture(scope='module')
def model_dir(tmp_path_factory):
  """A model_dir with checkpoint_3 and checkpoint_10, each an Orbax 'state' item (OCDBT),
  the later one holding `params` (bfloat16 embedding, as T5X may save)."""
  root = tmp_path_factory.mktemp('t5x_orbax')
  params = jax.device_get(T5(t5_tiny).init(jax.random.PRNGKey(4)))
  params['token_embedder']['embedding'] = params['token_embedder']['embedding'].astype(
      jnp.bfloat16)
  old = jax.tree.map(np.zeros_like, params)
  with ocp.PyTreeCheckpointer() as ckptr:
    for step, tree in ((3, old), (10, params)):
      ckptr.save(str(root / f'checkpoint_{step}' / 'state'), _t5x_state(tree, step))
  return root, params


def _flat(tree):
  return traverse_util.flatten_dict(jax.device_get(tree))


@pytest.mark.parametrize('where', ['', 'checkpoint_10', 'checkpoint_10/state'])
def test_every_path_form_reads_the_target(model_dir, where):
  root, params = model_dir
  path = str(root / where) if where else str(root)
  assert checkpoints.detect_format(path) == 't5x_orbax'
  got = _flat(t5x_orbax.read_t5x_orbax(path))
  assert got.keys() == _flat(params).keys()
  for key, value in _flat(params).items():
    assert got[key].dtype == value.dtype, key
    np.testing.assert_array_equal(np.asarray(got[key], np.float32),
                                  np.asarray(value, np.float32), err_msg=str(key))


def test_an_older_step_is_read_when_named(model_dir):
  root, _ = model_dir
  got = t5x_orbax.read_t5x_orbax(str(root / 'checkpoint_3'))
  assert all(not np.any(np.asarray(v, np.float32)) for v in _flat(got).values())


def test_orbax_and_msgpack_layouts_give_the_same_model_and_logits(model_dir, tmp_path):
  root, params = model_dir
  legacy = t5x.write_t5x_checkpoint(str(tmp_path / 'legacy'), params, step=10)
  inputs = jnp.array([[5, 6, 7, 1, 0], [9, 3, 1, 0, 0]], jnp.int32)
  targets = jnp.array([[0, 4, 8, 2], [0, 11, 12, 13]], jnp.int32)
  logits = []
  for path in (str(root), legacy):
    model, loaded = specjax.load_model(None, path)
    assert model.config == t5_tiny
    logits.append(np.asarray(model.logits(loaded, inputs, targets)))
  np.testing.assert_array_equal(logits[0], logits[1])
  model, loaded = specjax.load_model('t5_tiny', str(root / 'checkpoint_10'),
                                     param_dtype='bfloat16')
  assert all(v.dtype == jnp.bfloat16 for v in jax.tree.leaves(loaded))


def test_a_state_without_target_is_a_one_line_error(tmp_path):
  path = tmp_path / 'checkpoint_1' / 'state'
  with ocp.PyTreeCheckpointer() as ckptr:
    ckptr.save(str(path), {'params': {'w': np.ones((2,), np.float32)}})
  with pytest.raises(ValueError, match=r'has no target params .*T5X trainer'):
    t5x_orbax.read_t5x_orbax(str(path))


def test_a_specjax_save_named_state_stays_specjax(tmp_path):
  params = jax.device_get(T5(t5_tiny).init(jax.random.PRNGKey(0)))
  path = checkpoints.save_params(str(tmp_path / 'state'), params, t5_tiny)
  assert checkpoints.detect_format(path) == 'orbax'
  assert t5x_orbax.find_state_dir(str(tmp_path / 'nothing')) is None
