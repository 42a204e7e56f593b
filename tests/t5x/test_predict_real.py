"""predict_batch_with_aux on real T5X: greedy equals T5X's own temperature_sample, N sampled
decodes are sorted by their score_batch log-probabilities, the first sampled token follows
the target's distribution, errors are one line; restoring a target-only checkpoint through
T5X fills the draft, Orbax and msgpack alike."""
import flax
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import tiny_t5x  # pylint: disable=wrong-import-position
from stats_util import chi_square_pvalue  # pylint: disable=wrong-import-position

B, S, L = 8, 8, 12


@pytest.fixture(scope='module')
def model_and_params():
  model = tiny_t5x.speculative_model()
  return model, tiny_t5x.params(model)


def _target(params):
  return {k: v for k, v in params.items() if k != 'draft'}


def test_greedy_equals_t5x_temperature_sample(model_and_params):
  model, params = model_and_params
  batch = tiny_t5x.batch(B, S, L)
  got, aux = jax.jit(model.predict_batch_with_aux)(params, batch)
  ref = jax.jit(tiny_t5x.greedy_model().predict_batch)(_target(params), batch)
  np.testing.assert_array_equal(got, ref)
  assert got.shape == (B, L) and aux['scores'].shape == (B,)
  assert len({tuple(r) for r in np.asarray(got).tolist()}) > 1
  assert np.all(np.asarray(aux['target_calls']) >= 1)


def _score_batch(model, params, inputs, decodes):
  """T5X's score_batch of decodes [R, L] (loss weights through each decode's EOS)."""
  is_eos = decodes == tiny_t5x.EOS
  length = np.where(is_eos.any(1), is_eos.argmax(1) + 1, decodes.shape[1])
  weights = (np.arange(decodes.shape[1])[None] < length[:, None]).astype(np.int32)
  batch = {'encoder_input_tokens': inputs, 'decoder_target_tokens': decodes,
           'decoder_input_tokens': np.pad(decodes, ((0, 0), (1, 0)))[:, :-1],
           'decoder_loss_weights': weights}
  return np.asarray(jax.jit(model.score_batch)(_target(params), batch)), length


def test_num_decodes_sorted_and_scored_by_the_target(model_and_params):
  model, params = model_and_params
  batch = tiny_t5x.batch(B, S, L, seed=1)
  predict = jax.jit(model.predict_batch_with_aux, static_argnames=(
      'num_decodes', 'return_all_decodes'))
  decodes, aux = predict(params, batch, rng=jax.random.PRNGKey(3), num_decodes=4,
                         return_all_decodes=True, decoder_params={'temperature': 1.0, 'topk': 0})
  decodes, scores = np.asarray(decodes), np.asarray(aux['scores'])
  assert decodes.shape == (B, 4, L) and scores.shape == (B, 4)
  assert np.all(np.diff(scores, axis=1) >= 0)  # best last, as T5X
  assert all(len({tuple(r) for r in decodes[b].tolist()}) > 1 for b in range(B))
  flat = decodes.reshape((-1, L))
  rescored, length = _score_batch(model, params,
                                  np.repeat(batch['encoder_input_tokens'], 4, axis=0), flat)
  # T5X's score_batch reads a 0 target token as padding (masked in attention), so only
  # decodes without a sampled 0 before their end are comparable.
  clean = np.array([not np.any(row[:n] == 0) for row, n in zip(flat, length)])
  assert clean.sum() >= B
  np.testing.assert_allclose(scores.reshape(-1)[clean], rescored[clean], atol=1e-4)
  best, best_aux = predict(params, batch, rng=jax.random.PRNGKey(3), num_decodes=4,
                           return_all_decodes=False, decoder_params={'temperature': 1.0, 'topk': 0})
  np.testing.assert_array_equal(best, decodes[:, -1])
  np.testing.assert_array_equal(best_aux['scores'], scores[:, -1])


def test_first_sampled_token_follows_the_target(model_and_params):
  model, params = model_and_params
  rows, decodes_per_row = 256, 8
  one = tiny_t5x.batch(1, S, 2, seed=2)
  batch = {k: np.repeat(v, rows, axis=0) for k, v in one.items()}
  decodes, _ = jax.jit(model.predict_batch_with_aux, static_argnames=(
      'num_decodes', 'return_all_decodes'))(
          params, batch, rng=jax.random.PRNGKey(9), num_decodes=decodes_per_row,
          return_all_decodes=True, decoder_params={'temperature': 1.0, 'topk': 0})
  first = np.asarray(decodes)[:, :, 0].reshape((-1, 1))
  def first_token_probs(module, module_params):
    logits = module.apply({'params': module_params}, one['encoder_input_tokens'],
                          np.zeros((1, 1), np.int32), np.ones((1, 1), np.int32),
                          enable_dropout=False)
    x = np.asarray(logits[0, 0], np.float64)
    p = np.exp(x - x.max())
    return {(t,): float(v) for t, v in enumerate(p / p.sum())}

  assert len(np.unique(first)) > 5
  assert chi_square_pvalue(first, first_token_probs(tiny_t5x.TARGET, _target(params))) > 1e-3
  # The test can tell: the draft's distribution, which proposals come from, is rejected.
  assert chi_square_pvalue(first, first_token_probs(tiny_t5x.DRAFT, params['draft'])) < 1e-3


def test_errors_are_one_line(model_and_params):
  model, params = model_and_params
  batch = tiny_t5x.batch(2, S, 4)
  for kwargs, match in (
      (dict(prompt_with_targets=True), 'prompt_with_targets is not supported'),
      (dict(decoder_params={'max_decode_steps': 3}), r"\['max_decode_steps'\] are not"),
      (dict(rng=jax.random.PRNGKey(0), decoder_params={'decode_rng': jax.random.PRNGKey(1)}),
       'pass one')):
    with pytest.raises(ValueError, match=match) as e:
      model.predict_batch_with_aux(params, batch, **kwargs)
    assert '\n' not in str(e.value)
  other = dict(params, encoder={k: v for k, v in params['encoder'].items()
                                if k != 'encoder_norm'})
  with pytest.raises(ValueError, match=r'params differ from a T5.*t5x/examples/t5'):
    model.predict_batch_with_aux(other, batch)
  with pytest.raises(ValueError, match=r'params are not a T5 tree'):
    model.predict_batch_with_aux({'draft': params['draft'], 'dense': {}}, batch)


def test_from_model_keeps_the_configured_model_and_scores_the_target(model_and_params):
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  _, params = model_and_params
  base = tiny_t5x.greedy_model()
  wrapped = speculative.from_model(base, draft_module=tiny_t5x.DRAFT, gamma=2)
  assert wrapped.module is base.module and wrapped.output_vocabulary is base.output_vocabulary
  assert wrapped.gamma == 2 and wrapped.FEATURE_CONVERTER_CLS is base.FEATURE_CONVERTER_CLS
  decodes = np.asarray(jax.jit(wrapped.predict_batch)(params, tiny_t5x.batch(B, S, L)))
  inputs = tiny_t5x.batch(B, S, L)['encoder_input_tokens']
  own, _ = _score_batch(base, params, inputs, decodes)
  theirs, _ = _score_batch(wrapped, params, inputs, decodes)  # the draft key is dropped
  np.testing.assert_array_equal(own, theirs)


def _assert_equal(a, b):
  flat_a, flat_b = (flax.traverse_util.flatten_dict(jax.device_get(t)) for t in (a, b))
  assert flat_a.keys() == flat_b.keys()
  for key in flat_a:
    np.testing.assert_array_equal(np.asarray(flat_a[key]), np.asarray(flat_b[key]), str(key))


@pytest.mark.parametrize('layout', ['orbax', 'msgpack'])
def test_restore_fills_the_draft_from_its_checkpoint(trained, tmp_path, layout):
  import gin  # pylint: disable=import-outside-toplevel
  import specjax  # pylint: disable=import-outside-toplevel
  from t5x import checkpoints as t5x_checkpoints  # pylint: disable=import-outside-toplevel
  from t5x import gin_utils  # pylint: disable=import-outside-toplevel
  from t5x import partitioning  # pylint: disable=import-outside-toplevel
  with gin.unlock_config():
    gin_utils.parse_gin_flags(
        [str(real_t5x.REPO)], ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
                               'specjax/t5x/configs/speculative.gin'],
        [f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(trained["draft"])}'],
        finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
  gin.clear_config()
  _, target = specjax.load_model(None, str(trained['target']))
  _, draft = specjax.load_model(None, str(trained['draft']))
  checkpoint = trained['target'] / 'checkpoint_150'
  if layout == 'msgpack':  # written by T5X's own (legacy) Checkpointer
    state = tiny_t5x.inference_state(model.module, jax.device_get(target))
    partitioner = partitioning.PjitPartitioner(num_partitions=1)
    t5x_checkpoints.Checkpointer(state, partitioner, str(tmp_path)).save(state)
    checkpoint = tmp_path / 'checkpoint_0'
    assert (checkpoint / 'checkpoint').is_file()
  params = tiny_t5x.restored(model, checkpoint, trained['draft'])
  _assert_equal(params['draft'], draft)
  _assert_equal(_target(params), target)


def test_the_verification_rule_reaches_the_decode(model_and_params):
  """The model's verification rule (the decode config's names) is the one its decode runs,
  and a bad rule is refused when the model is built, before any restore."""
  from specjax.t5x import decoding  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  _, params = model_and_params
  batch, rng = tiny_t5x.batch(B, S, L), jax.random.PRNGKey(3)
  build = lambda **rule: speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.DRAFT,
      gamma=3, temperature=1.0, topk=0, **rule)
  block, _ = build(verification='block').predict_batch_with_aux(params, batch, rng=rng)
  token, _ = build().predict_batch_with_aux(params, batch, rng=rng)
  target, draft = build().specjax_models(params)
  target_params, draft_params = decoding.split_params(params, 'draft')
  ref = decoding.predict(target, target_params, draft, draft_params,
                         batch['encoder_input_tokens'], max_decode_len=L, gamma=3,
                         sampling=decoding.sampling_from_t5x(temperature=1.0), rng=rng,
                         verification='block')
  np.testing.assert_array_equal(np.asarray(block), np.asarray(ref.decodes[:, -1]))
  assert not np.array_equal(np.asarray(block), np.asarray(token))
  for rule, match in ((dict(lenience=2.0), 'lenience must be in'),
                      (dict(verification='tree'), 'verification must be one of'),
                      (dict(tree='2,0'), 'speculative.from_model.tree: --tree takes'),
                      (dict(tree='2,2', verification='block'), 'tree rule')):
    with pytest.raises(ValueError, match=match):
      build(**rule)


def test_a_token_tree_reaches_the_decode(model_and_params):
  """speculative.from_model.tree: the model's greedy predictions with a tree are the
  target's own (T5X's params), and its sampled ones are the tree decode's."""
  from specjax.t5x import decoding  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  _, params = model_and_params
  batch, rng = tiny_t5x.batch(B, S, L), jax.random.PRNGKey(3)
  build = lambda temperature, **kw: speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.DRAFT,
      gamma=3, temperature=temperature, topk=0, **kw)
  greedy, _ = build(0.0, tree='2,2,1').predict_batch_with_aux(params, batch, rng=rng)
  chain, _ = build(0.0).predict_batch_with_aux(params, batch, rng=rng)
  np.testing.assert_array_equal(np.asarray(greedy), np.asarray(chain))
  sampled, _ = build(1.0, tree='2,2,1').predict_batch_with_aux(params, batch, rng=rng)
  target, draft = build(1.0).specjax_models(params)
  target_params, draft_params = decoding.split_params(params, 'draft')
  ref = decoding.predict(target, target_params, draft, draft_params,
                         batch['encoder_input_tokens'], max_decode_len=L, gamma=3,
                         sampling=decoding.sampling_from_t5x(temperature=1.0), rng=rng,
                         tree='2,2,1')
  np.testing.assert_array_equal(np.asarray(sampled), np.asarray(ref.decodes[:, -1]))
