"""Tiny T5X models in process (T5X's examples network, a 32-token pass-through vocabulary):
a target, a draft, the speculative model over both, random params and batches."""
import functools

import flax

import jax
import numpy as np
import seqio
from t5x import decoding as t5x_decoding
from t5x import models
from t5x.examples.t5 import network

from specjax.t5x import model as speculative

VOCAB_SIZE, EOS = 32, 1
VOCAB = seqio.PassThroughVocabulary(size=VOCAB_SIZE, eos_id=EOS)


def module(emb_dim, num_heads, layers, head_dim, mlp_dim):
  return network.Transformer(network.T5Config(
      vocab_size=VOCAB_SIZE, dtype='float32', emb_dim=emb_dim, num_heads=num_heads,
      num_encoder_layers=layers, num_decoder_layers=layers, head_dim=head_dim,
      mlp_dim=mlp_dim, mlp_activations=('gelu', 'linear'), dropout_rate=0.0,
      logits_via_embedding=False))


TARGET = module(16, 4, 2, 4, 32)
DRAFT = module(8, 4, 1, 2, 16)


def speculative_model(gamma=3):
  return speculative.SpeculativeEncoderDecoderModel(TARGET, VOCAB, VOCAB, None,
                                                    draft_module=DRAFT, gamma=gamma)


def greedy_model():
  """T5X's own model on the same target, decoding with greedy temperature_sample."""
  return models.EncoderDecoderModel(TARGET, VOCAB, VOCAB, None, decode_fn=functools.partial(
      t5x_decoding.temperature_sample, temperature=0.0))


def shapes(batch, input_len, decode_len):
  out = {'encoder_input_tokens': (batch, input_len)}
  out.update({k: (batch, decode_len) for k in ('decoder_input_tokens',
                                                 'decoder_target_tokens',
                                                 'decoder_loss_weights')})
  return out, {k: np.int32 for k in out}


def params(model, seed=0, eos_bias=1.0):
  """Random params of target and draft; EOS favoured so that rows end at different steps."""
  shape, types = shapes(2, 8, 8)
  p = jax.device_get(jax.tree.map(np.asarray, dict(model.get_initial_variables(
      jax.random.PRNGKey(seed), shape, types)['params'])))
  p = jax.tree.map(np.array, p)
  for tree in (p, p['draft']):
    tree['decoder']['logits_dense']['kernel'][:, EOS] += eos_bias
  return p


def batch(size, input_len, decode_len, seed=0):
  """Encoder inputs of different lengths, zero decoder inputs (their width is L)."""
  rng = np.random.default_rng(seed)
  inputs = rng.integers(2, VOCAB_SIZE, (size, input_len)).astype(np.int32)
  for row in range(size):
    inputs[row, rng.integers(2, input_len + 1):] = 0
  zeros = np.zeros((size, decode_len), np.int32)
  return {'encoder_input_tokens': inputs, 'decoder_input_tokens': zeros,
          'decoder_target_tokens': zeros, 'decoder_loss_weights': zeros}


def inference_state(t5x_module, module_params):
  """T5X's InferenceState of a module holding `module_params` (and its params_axes), as
  T5X's checkpointers save it."""
  from t5x import train_state as train_state_lib  # pylint: disable=import-outside-toplevel
  plain = models.EncoderDecoderModel(t5x_module, VOCAB, VOCAB, None)
  shape, types = shapes(2, 8, 8)
  variables = flax.core.unfreeze(jax.eval_shape(
      lambda: plain.get_initial_variables(jax.random.PRNGKey(0), shape, types)))
  variables['params'] = module_params
  return train_state_lib.InferenceState.create(variables)


def restored(model, checkpoint, draft_path):
  """T5X's own restore of a target checkpoint with specjax's draft hook (draft_path: what
  DRAFT_CHECKPOINT_PATH names): the params, unfrozen."""
  from t5x import partitioning, utils  # pylint: disable=import-outside-toplevel
  from specjax.t5x import restore  # pylint: disable=import-outside-toplevel
  partitioner = partitioning.PjitPartitioner(num_partitions=1)
  shape, types = shapes(4, 8, 8)
  init = utils.TrainStateInitializer(None, model.get_initial_variables, shape, partitioner,
                                     types)
  cfg = utils.RestoreCheckpointConfig(path=str(checkpoint), mode='specific', dtype='float32',
                                      state_transformation_fns=[restore.fill_draft(
                                          None if draft_path is None else str(draft_path))])
  state, _ = utils.create_checkpoint_manager_and_restore(init, partitioner, cfg, cfg.path,
                                                         None, use_orbax=True)
  return flax.core.unfreeze(state.params)


def assert_sampled_like_specjax(model, params, batch, rng, proposer, stored, gamma):
  """At T=1 `model`'s predictions of `batch` with `params` (the draft's under 'draft') are
  the decodes and target calls of specjax's decode with `proposer` and its params `stored`
  (what `--draft` resolves to); zeroed draft params give other counts (the draft's params
  reach the decode)."""
  from specjax.t5x import decoding  # pylint: disable=import-outside-toplevel
  got, aux = model.predict_batch_with_aux(params, batch, rng=rng)
  target, _ = model.specjax_models(params)
  target_params = {k: v for k, v in params.items() if k != 'draft'}
  ref = decoding.predict(target, target_params, proposer, stored,
                         batch['encoder_input_tokens'],
                         max_decode_len=batch['decoder_input_tokens'].shape[1], gamma=gamma,
                         sampling=decoding.sampling_from_t5x(temperature=1.0), rng=rng)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref.decodes[:, -1]))
  np.testing.assert_array_equal(np.asarray(aux['target_calls']),
                                np.asarray(ref.aux['target_calls']))
  zeroed = dict(params, draft=jax.tree.map(np.zeros_like, params['draft']))
  _, other = model.predict_batch_with_aux(zeroed, batch, rng=rng)
  assert not np.array_equal(np.asarray(other['target_calls']),
                            np.asarray(aux['target_calls']))
