"""A T5X checkpoint of scanned layers, written by real `python -m t5x.train` (T5X's
scalable_t5 network with scan_layers = True), loads in specjax.load_model as a scanned T5
with a relative position table per layer: its logits are T5X's module's own, and it
decodes token for token as its unrolled conversion, alone and speculatively; T5X's layout
converts both ways."""
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import specjax  # pylint: disable=wrong-import-position
from specjax.checkpoints import t5x_scanned  # pylint: disable=wrong-import-position
from specjax.models import scan  # pylint: disable=wrong-import-position
from specjax.proposers.layer_skip import LayerSkip  # pylint: disable=wrong-import-position
from t5x.examples.scalable_t5 import network  # pylint: disable=wrong-import-position

STEPS = 30
INPUTS = np.array([[7, 5, 3, 6, 4, 139, 1, 0], [12, 40, 9, 1, 0, 0, 0, 0],
                   [88, 17, 251, 9, 33, 1, 0, 0]], np.int32)
TARGETS = np.array([[83, 297, 23, 2171, 3859, 1], [5, 6, 7, 8, 9, 10],
                    [40, 41, 17, 9, 1, 2]], np.int32)  # no padding: T5X masks it


@pytest.fixture(scope='module')
def checkpoint(tmp_path_factory):
  """checkpoint_<STEPS> of a tiny scanned T5 that t5x.train trained on the demo task."""
  model_dir = tmp_path_factory.mktemp('scanned') / 'model'
  real_t5x.run_t5x('train', ['tests/t5x/gin/tiny_scanned.gin', 'tests/t5x/gin/train.gin'],
                   MODEL_DIR=real_t5x.quoted(model_dir), TRAIN_STEPS=STEPS,
                   **{'utils.SaveCheckpointConfig.period': STEPS})
  return model_dir / f'checkpoint_{STEPS}'


def _stored(path):
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  tree = ocp.PyTreeCheckpointer().restore(str(path / 'state'))['target']
  return jax.tree.map(lambda a: np.asarray(a, np.float32), tree)


def _module():
  return network.Transformer(network.T5Config(
      vocab_size=4096, dtype='float32', emb_dim=32, num_heads=4, num_encoder_layers=2,
      num_decoder_layers=3, head_dim=8, mlp_dim=64, mlp_activations=('gelu', 'linear'),
      dropout_rate=0.0, logits_via_embedding=False, remat_policy='none', scan_layers=True,
      param_scan_axis=1))


def test_a_scanned_t5x_checkpoint_loads_with_t5xs_logits(checkpoint):
  stored = _stored(checkpoint)
  assert stored['decoder']['decoder']['self_attention']['query']['kernel'].shape == (32, 3, 4, 8)
  model, params = specjax.load_model(None, str(checkpoint))
  cfg = model.config
  assert (cfg.scan_layers, cfg.relpos_per_layer) == (True, True)
  assert (cfg.num_encoder_layers, cfg.num_decoder_layers, cfg.vocab_size) == (2, 3, 4096)
  decoder_inputs = np.pad(TARGETS, ((0, 0), (1, 0)))[:, :-1]
  ours = np.asarray(model.logits(params, INPUTS, decoder_inputs))
  theirs = np.asarray(_module().apply({'params': stored}, INPUTS, decoder_inputs, TARGETS,
                                      enable_dropout=False))
  np.testing.assert_allclose(ours, theirs, atol=2e-5)
  # The same numbers in T5X's layout again, and in the unrolled one.
  back = t5x_scanned.to_t5x(jax.tree.map(np.asarray, params), num_heads=4)
  jax.tree.map(np.testing.assert_array_equal, back, stored)
  u_model, u_params = scan.as_unrolled(model, params)
  assert 'layers_2' in u_params['decoder'] and 'relpos_bias' in u_params['decoder']['layers_2']
  np.testing.assert_allclose(np.asarray(u_model.logits(u_params, INPUTS, decoder_inputs)),
                             theirs, atol=2e-5)


def test_a_scanned_t5x_checkpoint_decodes_as_its_unrolled_conversion(checkpoint):
  model, params = specjax.load_model(None, str(checkpoint))
  u_model, u_params = scan.as_unrolled(model, params)
  kw = dict(max_decode_len=12)
  scanned = specjax.autoregressive_decode(model, params, INPUTS, **kw)
  unrolled = specjax.autoregressive_decode(u_model, u_params, INPUTS, **kw)
  np.testing.assert_array_equal(np.asarray(scanned.tokens), np.asarray(unrolled.tokens))
  for sampling in (specjax.SamplingConfig(), specjax.SamplingConfig(temperature=1.0)):
    run = dict(kw, gamma=3, sampling=sampling, rng=jax.random.PRNGKey(1), slots=2)
    spec = specjax.speculative_decode(model, params, LayerSkip(model, 2), {}, INPUTS, **run)
    ref = specjax.speculative_decode(u_model, u_params, LayerSkip(u_model, 2), {}, INPUTS,
                                     **run)
    np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(ref.tokens))
    if sampling.temperature == 0:
      np.testing.assert_array_equal(np.asarray(spec.tokens), np.asarray(scanned.tokens))


def test_the_t5x_route_predicts_with_a_scanned_module(checkpoint):
  """SpeculativeEncoderDecoderModel over T5X's scanned module (its params in T5X's
  layout, converted inside the jitted predict): greedy predictions equal T5X's own greedy
  decode of the same module, with the module's first 2 of 3 layers drafting."""
  import functools  # pylint: disable=import-outside-toplevel
  import seqio  # pylint: disable=import-outside-toplevel
  from t5x import decoding as t5x_decoding  # pylint: disable=import-outside-toplevel
  from t5x import models  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  vocab = seqio.PassThroughVocabulary(size=4096, eos_id=1)
  module = _module()
  params = _stored(checkpoint)
  batch = {'encoder_input_tokens': INPUTS,
           **{k: np.zeros((3, 10), np.int32) for k in (
               'decoder_input_tokens', 'decoder_target_tokens', 'decoder_loss_weights')}}
  greedy = models.EncoderDecoderModel(module, vocab, vocab, None, decode_fn=functools.partial(
      t5x_decoding.temperature_sample, temperature=0.0))
  want = np.asarray(greedy.predict_batch(params, batch))
  spec = speculative.SpeculativeEncoderDecoderModel(module, vocab, vocab, None,
                                                    draft_kind='layerskip:2', gamma=3)
  got, aux = spec.predict_batch_with_aux(params, batch)
  np.testing.assert_array_equal(np.asarray(got), want)
  assert len({tuple(r) for r in want}) == 3  # the rows differ
  assert float(np.max(aux['tokens_per_call'])) > 1.0  # some call kept more than one token
