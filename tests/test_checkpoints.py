"""Checkpoint formats: T5X (msgpack + zarr) layout and reading, orbax and HF round trips
through load_model, one-line error messages, and the SentencePiece vocabulary."""

import io
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import sentencepiece as spm
from flax import serialization, traverse_util

from specjax import checkpoints
from specjax.checkpoints import t5x
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny

BF16 = jnp.bfloat16


def _rand(rng, shape, dtype):
  return rng.standard_normal(shape).astype(np.float32).astype(dtype)


@pytest.fixture(scope='module')
def tiny():
  """t5_tiny with random params, and fixed inputs [2, 5] / decoder inputs [2, 4]."""
  model = T5(t5_tiny)
  params = jax.device_get(model.init(jax.random.PRNGKey(1)))
  inputs = jnp.array([[5, 6, 7, 1, 0], [9, 3, 1, 0, 0]], jnp.int32)
  targets = jnp.array([[0, 4, 8, 2], [0, 11, 12, 13]], jnp.int32)
  return model, params, inputs, targets


@jax.jit
def _jitted_logits(params, inputs, targets):
  return T5(t5_tiny).logits(params, inputs, targets)


def _logits(model, params, inputs, targets):
  assert model.config == t5_tiny
  return np.asarray(_jitted_logits(params, inputs, targets))


def _assert_trees_equal(a, b):
  flat_a, flat_b = traverse_util.flatten_dict(a), traverse_util.flatten_dict(b)
  assert flat_a.keys() == flat_b.keys()
  for key in flat_a:
    x, y = np.asarray(flat_a[key]), np.asarray(flat_b[key])
    assert x.dtype == y.dtype and x.shape == y.shape, key
    np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8), err_msg=str(key))


# --- T5X format -------------------------------------------------------------------------


def test_t5x_layout_and_read_back(tmp_path):
  rng = np.random.default_rng(0)
  params = {
      'token_embedder': {'embedding': _rand(rng, (10, 4), np.float32)},
      'encoder': {'layers_0': {'attention': {'query': {'kernel': _rand(rng, (4, 6), BF16)}},
                               'pre_attention_layer_norm': {'scale': _rand(rng, (4,), BF16)}},
                  'encoder_norm': {'scale': _rand(rng, (4,), np.float32)}},
  }
  ckpt_dir = t5x.write_t5x_checkpoint(str(tmp_path), params, step=1200)
  assert ckpt_dir == f'{tmp_path}/checkpoint_1200'
  assert sorted(os.listdir(ckpt_dir)) == [
      'checkpoint', 'target.encoder.layers_0.attention.query.kernel',
      'target.token_embedder.embedding']
  assert '.zarray' in os.listdir(f'{ckpt_dir}/target.token_embedder.embedding')
  with open(f'{ckpt_dir}/checkpoint', 'rb') as f:
    index = serialization.msgpack_restore(f.read())
  assert index['version'] == 3 and int(index['optimizer']['state']['step']) == 1200
  target = index['optimizer']['target']
  spec = target['encoder']['layers_0']['attention']['query']['kernel']
  assert spec['driver'] == 'zarr' and spec['dtype'] == 'bfloat16'
  assert spec['kvstore'] == {'driver': 'file',
                             'path': 'target.encoder.layers_0.attention.query.kernel/'}
  assert spec['metadata']['compressor']['id'] == 'gzip'
  assert spec['metadata']['shape'] == [4, 6]
  inline = target['encoder']['layers_0']['pre_attention_layer_norm']['scale']
  assert isinstance(inline, np.ndarray) and inline.dtype == BF16  # small leaves inline

  for path in (str(tmp_path), ckpt_dir, f'{ckpt_dir}/checkpoint', f'{ckpt_dir}/'):
    _assert_trees_equal(t5x.read_t5x_checkpoint(path), params)
  as_f32 = t5x.read_t5x_checkpoint(ckpt_dir, dtype='float32')
  _assert_trees_equal(as_f32, jax.tree.map(lambda x: x.astype(np.float32), params))


def test_t5x_model_dir_picks_latest_step_and_moves(tmp_path):
  old = {'a': {'kernel': np.zeros((2, 3), np.float32)}}
  new = {'a': {'kernel': np.ones((2, 3), np.float32)}}
  t5x.write_t5x_checkpoint(str(tmp_path / 'run'), new, step=20)
  t5x.write_t5x_checkpoint(str(tmp_path / 'run'), old, step=3)
  os.rename(tmp_path / 'run', tmp_path / 'moved')  # relative zarr paths stay valid
  _assert_trees_equal(t5x.read_t5x_checkpoint(str(tmp_path / 'moved')), new)
  with pytest.raises(FileExistsError):
    t5x.write_t5x_checkpoint(str(tmp_path / 'moved'), old, step=3)


def test_t5x_spec_resolution_gcs_and_old_layout():
  stored = {'driver': 'zarr', 'dtype': 'float32', 'metadata': {'shape': [2]},
            'kvstore': {'driver': 'gcs', 'bucket': 't5x-dummy-bucket',
                        'path': 'target.decoder.logits_dense.kernel/'}}
  spec = t5x.resolve_spec(stored, 'gs://t5-data/models/t5_small/checkpoint_1000000')
  assert spec['kvstore'] == {'driver': 'gcs', 'bucket': 't5-data',
                             'path': 'models/t5_small/checkpoint_1000000/'
                                     'target.decoder.logits_dense.kernel/'}
  old = {'driver': 'zarr', 'kvstore': {'driver': 'gfile'}, 'path': 'target.x'}
  spec = t5x.resolve_spec(old, '/ckpt/checkpoint_5')
  assert spec == {'driver': 'zarr', 'kvstore': {'driver': 'file',
                                                'path': '/ckpt/checkpoint_5/target.x'}}
  assert stored['kvstore']['bucket'] == 't5x-dummy-bucket'  # input left untouched


def test_load_model_from_t5x_matches_source_logits(tmp_path, tiny):
  model, params, inputs, targets = tiny
  # Kernels stored in bfloat16 (as many public checkpoints are), the rest in float32.
  stored = traverse_util.unflatten_dict({
      k: (v.astype(BF16) if k[-1] == 'kernel' else v)
      for k, v in traverse_util.flatten_dict(params).items()})
  t5x.write_t5x_checkpoint(str(tmp_path), stored, step=7)
  expected = jax.tree.map(lambda x: np.asarray(x, np.float32), stored)

  loaded_model, loaded = checkpoints.load_model('t5_tiny', str(tmp_path))
  assert loaded_model == model
  assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(loaded))
  _assert_trees_equal(jax.device_get(loaded), expected)
  np.testing.assert_array_equal(_logits(model, loaded, inputs, targets),
                                _logits(model, expected, inputs, targets))

  inferred, _ = checkpoints.load_model(None, f'{tmp_path}/checkpoint_7', dtype='bfloat16')
  assert inferred.config == t5_tiny.replace(dtype='bfloat16')
  assert checkpoints.detect_format(str(tmp_path)) == 't5x'


# --- orbax and HF -------------------------------------------------------------------------


def test_orbax_round_trip_is_bit_exact(tmp_path, tiny):
  model, params, inputs, targets = tiny
  path = checkpoints.save_params(str(tmp_path / 'orbax'), params, t5_tiny)
  assert checkpoints.detect_format(path) == 'orbax'
  loaded_model, loaded = checkpoints.load_model(None, path)
  assert loaded_model.config == t5_tiny
  _assert_trees_equal(jax.device_get(loaded), params)
  np.testing.assert_array_equal(_logits(model, loaded, inputs, targets),
                                _logits(model, params, inputs, targets))
  restored = checkpoints.load_params_orbax(path, jax.eval_shape(model.init,
                                                                jax.random.PRNGKey(0)))
  _assert_trees_equal(jax.device_get(restored), params)
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  shardings = jax.tree.map(lambda _: device, params)
  _, placed = checkpoints.load_model('t5_tiny', path, shardings=shardings)
  assert all(x.sharding == device for x in jax.tree.leaves(placed))
  _assert_trees_equal(jax.device_get(placed), params)


def test_param_dtype_bfloat16_and_relative_paths(tmp_path, tiny, monkeypatch):
  """bfloat16 params (T5-XXL on one chip) from every source; relative orbax paths load."""
  model, params, inputs, targets = tiny
  monkeypatch.chdir(tmp_path)
  path = checkpoints.save_params('orbax', params, t5_tiny)
  t5x.write_t5x_checkpoint(str(tmp_path / 't5x'), params, step=1)
  want = jax.tree.map(lambda x: np.asarray(x, BF16), params)
  reference = _logits(model, params, inputs, targets)
  for source in ('orbax', path, 't5x'):
    loaded_model, loaded = checkpoints.load_model(None, source, param_dtype='bfloat16')
    assert loaded_model.config == t5_tiny
    _assert_trees_equal(jax.device_get(loaded), want)
    logits = _logits(model, loaded, inputs, targets)
    assert logits.dtype == np.float32
    np.testing.assert_allclose(logits, reference, atol=0.1)
    assert not np.array_equal(logits, reference)  # bfloat16 rounding did happen
  _, fresh = checkpoints.load_model('t5_tiny', param_dtype=jnp.bfloat16)
  assert {x.dtype for x in jax.tree.leaves(fresh)} == {jnp.dtype(BF16)}
  with pytest.raises(ValueError, match='pass float32, bfloat16 or float16'):
    checkpoints.load_model('t5_tiny', param_dtype='int8')


def test_hf_export_round_trip(tmp_path, tiny):
  from specjax.checkpoints import hf_t5
  model, params, inputs, targets = tiny
  hf_t5.save_hf_dir(str(tmp_path), t5_tiny, params)
  assert checkpoints.detect_format(str(tmp_path)) == 'hf'
  loaded_model, loaded = checkpoints.load_model(None, str(tmp_path))
  assert loaded_model.config.replace(name='t5_tiny') == t5_tiny
  _assert_trees_equal(jax.device_get(loaded), params)
  np.testing.assert_array_equal(_logits(model, loaded, inputs, targets),
                                _logits(model, params, inputs, targets))
  _, again = checkpoints.load_model('t5_tiny', str(tmp_path))
  _assert_trees_equal(jax.device_get(again), params)


def test_no_checkpoint_gives_random_init(tiny):
  model, _, _, _ = tiny
  loaded_model, params = checkpoints.load_model(t5_tiny, dtype=jnp.bfloat16)
  assert loaded_model.config.dtype == 'bfloat16'
  _assert_trees_equal(jax.device_get(params),
                      jax.device_get(model.init(jax.random.PRNGKey(0))))


# --- errors -----------------------------------------------------------------------------


def _one_line(excinfo):
  message = str(excinfo.value)
  assert '\n' not in message
  return message


def test_missing_path_error(tmp_path):
  with pytest.raises(FileNotFoundError) as e:
    checkpoints.load_model('t5_tiny', str(tmp_path / 'nope'))
  assert _one_line(e) == (f'checkpoint path {tmp_path}/nope does not exist; pass an '
                          'existing T5X, Hugging Face or orbax checkpoint (--checkpoint)')
  with pytest.raises(FileNotFoundError, match='no T5X checkpoint at'):
    t5x.read_t5x_checkpoint(str(tmp_path))


def test_unknown_format_error(tmp_path):
  (tmp_path / 'weights.npz').write_bytes(b'x')
  with pytest.raises(ValueError) as e:
    checkpoints.load_model('t5_tiny', str(tmp_path))
  assert _one_line(e).startswith(f'cannot tell the checkpoint format of {tmp_path}: pass a '
                                 'T5X checkpoint')


def test_mismatched_tree_names_both_shapes(tmp_path, tiny):
  _, params, _, _ = tiny
  big = T5(t5_tiny.replace(vocab_size=100, name=''))
  t5x.write_t5x_checkpoint(str(tmp_path / 't5x'), big.init(jax.random.PRNGKey(0)))
  with pytest.raises(ValueError) as e:
    checkpoints.load_model('t5_tiny', str(tmp_path / 't5x'))
  assert _one_line(e) == (
      'checkpoint does not match config t5_tiny: decoder/logits_dense/kernel has shape '
      '(8, 100) in the checkpoint, (8, 32) in the config, token_embedder/embedding has '
      'shape (100, 8) in the checkpoint, (32, 8) in the config; pass the config the '
      'checkpoint was trained with')

  dropped = {**params, 'decoder': {k: v for k, v in params['decoder'].items()
                                   if k != 'logits_dense'}}
  path = checkpoints.save_params(str(tmp_path / 'orbax'), dropped)
  with pytest.raises(ValueError) as e:
    checkpoints.load_model('t5_tiny', path)
  assert _one_line(e) == (
      'checkpoint does not match config t5_tiny: decoder/logits_dense/kernel is missing '
      'from the checkpoint; pass the config the checkpoint was trained with')


def test_unknown_registry_name_error():
  with pytest.raises(ValueError) as e:
    checkpoints.load_model('t5_huge')
  message = _one_line(e)
  assert message.startswith("unknown model config 't5_huge'; pass one of ")
  assert 't5_small' in message and 't5_xxl' in message and message.endswith(' or a T5Config')


def test_orbax_without_config_needs_a_name(tmp_path, tiny):
  path = checkpoints.save_params(str(tmp_path / 'orbax'), tiny[1])
  with pytest.raises(ValueError, match=r'has no specjax\.json; pass the model config name'):
    checkpoints.load_model(None, path)
  _, loaded = checkpoints.load_model('t5_tiny', path)
  _assert_trees_equal(jax.device_get(loaded), tiny[1])


# --- vocabulary -------------------------------------------------------------------------

_CORPUS = ['the quick brown fox jumps over the lazy dog',
           'a stitch in time saves nine', 'speculative decoding is exact',
           'the draft proposes and the target verifies', 'hello world from specjax'] * 20


def _train_spm(**ids):
  model = io.BytesIO()
  spm.SentencePieceTrainer.train(sentence_iterator=iter(_CORPUS), model_writer=model,
                                 vocab_size=60, model_type='unigram',
                                 hard_vocab_limit=False, minloglevel=2, **ids)
  return model.getvalue()


@pytest.fixture(scope='module')
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp('vocab') / 'spm.model'
  path.write_bytes(_train_spm(pad_id=0, eos_id=1, unk_id=2, bos_id=-1))
  return str(path)


def test_vocab_round_trip(vocab_file):
  vocab = checkpoints.load_vocab(vocab_file)
  assert (vocab.pad_id, vocab.eos_id, vocab.unk_id) == (0, 1, 2)
  assert 10 < vocab.vocab_size <= 60
  text = 'the quick brown fox verifies'
  ids = vocab.encode(text)
  assert ids and all(3 <= i < vocab.vocab_size for i in ids)
  assert vocab.decode(ids) == text
  # Decoding stops at EOS and drops padding (the decoder start token).
  assert vocab.decode([0] + ids + [1] + vocab.encode('lazy dog') + [0, 0]) == text
  assert vocab.decode(np.array(ids + [vocab.vocab_size + 5], np.int32)).startswith(text)
  vocab.check_fits(vocab.vocab_size)
  with pytest.raises(ValueError) as e:
    vocab.check_fits(8)
  assert _one_line(e) == (f'vocabulary {vocab_file} has {vocab.vocab_size} ids but the model '
                          'has only 8 logits; pass the vocabulary the model was trained '
                          'with (--vocab)')


def test_vocab_rejects_wrong_ids_and_missing_file(tmp_path):
  path = tmp_path / 'default_ids.model'
  path.write_bytes(_train_spm())  # sentencepiece defaults: unk 0, bos 1, eos 2, no pad
  with pytest.raises(ValueError) as e:
    checkpoints.load_vocab(str(path))
  assert re.fullmatch(r'vocabulary \S+ has pad/eos/unk ids -1/2/0 but T5 needs 0/1/2; pass '
                      r'a T5 SentencePiece model \(--vocab\) or train one with pad_id=0 '
                      r'eos_id=1 unk_id=2', _one_line(e))
  with pytest.raises(FileNotFoundError, match=r'does not exist; pass a SentencePiece model '
                                              r'file with --vocab'):
    checkpoints.load_vocab(str(tmp_path / 'missing.model'))
