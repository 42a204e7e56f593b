"""The include honours the model's own decoding: temperature_sample's settings (gin bindings,
partials, T5X's defaults with topk 1) are what the speculative decode keeps; beam search, an
include placed before the model's gin, and bad settings are refused in one line when the
model is built, naming the gin binding; each batch's statistics are logged and written."""
import functools
import json

import gin
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

from t5x import decoding as t5x_decoding  # pylint: disable=wrong-import-position
from t5x import gin_utils  # pylint: disable=wrong-import-position
from t5x import models  # pylint: disable=wrong-import-position

from specjax.t5x import decode_settings, run_stats  # pylint: disable=wrong-import-position
from specjax.t5x import model as speculative  # pylint: disable=wrong-import-position
import tiny_t5x  # pylint: disable=wrong-import-position

B, S, L = 8, 8, 12
TARGET_GIN, GREEDY_GIN = 'tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin'
INCLUDE = 'specjax/t5x/configs/speculative.gin'


def _parsed(gin_files, bindings, query):
  """gin.query_parameter(query) built (called) after parsing the files, then gin cleared."""
  gin.clear_config()
  try:
    gin_utils.parse_gin_flags([str(real_t5x.REPO)], gin_files, list(bindings),
                              finalize_config=False)
    value = gin.query_parameter(query)
    return [v.scoped_configurable_fn() for v in value] if isinstance(value, list) else \
        value.scoped_configurable_fn()
  finally:
    gin.clear_config()


def _plain(decode_fn=t5x_decoding.temperature_sample):
  return models.EncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None,
                                    decode_fn=decode_fn)


def test_a_beam_search_model_is_refused_in_one_line():
  beam = models.EncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None)
  with pytest.raises(ValueError, match=r'decode_fn is beam_search .*= @decoding\.'
                     r'temperature_sample') as e:
    speculative.from_model(beam, draft_module=tiny_t5x.DRAFT)
  assert '\n' not in str(e.value)
  with pytest.raises(ValueError, match='decode_fn is beam_search'):  # through gin too
    _parsed([TARGET_GIN, INCLUDE], ['DRAFT_CHECKPOINT_PATH = "unused"'], '%MODEL')


def test_temperature_sample_settings_come_from_gin_partials_and_t5x_defaults(trained):
  model = _parsed([TARGET_GIN, GREEDY_GIN, INCLUDE], [
      f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(trained["draft"])}',
      'decoding.temperature_sample.temperature = 0.7', 'decoding.temperature_sample.topk = 40',
      'decoding.temperature_sample.topp = 0.9',
      'decoding.temperature_sample.max_decode_steps = 5',
      'speculative.from_model.verification = "block"'], '%MODEL')
  assert model.sampling_defaults == dict(temperature=0.7, topk=40, topp=0.9)
  assert model.max_decode_steps == 5 and model.rule.verification == 'block'
  read = decode_settings.sampling_settings
  assert read(t5x_decoding.temperature_sample) == dict(  # T5X's own defaults: topk 1
      temperature=1.0, topk=1, topp=0.0, max_decode_steps=None)
  assert read(functools.partial(t5x_decoding.temperature_sample, temperature=0.0)) == dict(
      temperature=0.0, topk=1, topp=0.0, max_decode_steps=None)
  with pytest.raises(ValueError, match=r'temperature_sample\.logit_callback_fn is set'):
    read(functools.partial(t5x_decoding.temperature_sample, logit_callback_fn=print))


def test_temperature_sample_defaults_decode_as_t5x_does():
  """T5X's temperature_sample at its defaults (temperature 1, topk 1) takes the argmax: the
  speculative model with that decode_fn gives T5X's own tokens; topk 0 samples instead."""
  model = speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.DRAFT,
      gamma=3)
  params = tiny_t5x.params(model)
  target = {k: v for k, v in params.items() if k != 'draft'}
  batch, rng = tiny_t5x.batch(B, S, L), jax.random.PRNGKey(5)
  ref = np.asarray(jax.jit(_plain().predict_batch)(target, batch, rng=rng))
  got = np.asarray(jax.jit(model.predict_batch)(params, batch, rng=rng))
  np.testing.assert_array_equal(got, ref)
  sampled, _ = jax.jit(model.predict_batch_with_aux)(params, batch, rng=rng,
                                                     decoder_params={'topk': 0})
  sampled = np.asarray(sampled)
  assert not np.array_equal(sampled, ref)  # the test can tell a sampled decode apart


def test_max_decode_steps_caps_the_decode_as_t5x_does():
  capped = functools.partial(t5x_decoding.temperature_sample, temperature=0.0,
                             max_decode_steps=4)
  model = speculative.from_model(_plain(capped), draft_module=tiny_t5x.DRAFT, gamma=3)
  params = tiny_t5x.params(model)
  target = {k: v for k, v in params.items() if k != 'draft'}
  batch = tiny_t5x.batch(B, S, L)
  got = np.asarray(jax.jit(model.predict_batch)(params, batch))
  ref = np.asarray(jax.jit(_plain(capped).predict_batch)(target, batch))
  assert got.shape == (B, L) and np.all(got[:, 4:] == 0)
  np.testing.assert_array_equal(got, ref)


def test_an_include_before_the_model_gin_is_refused():
  with pytest.raises(ValueError, match='pass that include after the model'):
    _parsed([INCLUDE, TARGET_GIN, GREEDY_GIN], ['DRAFT_CHECKPOINT_PATH = "unused"'],
            'utils.RestoreCheckpointConfig.state_transformation_fns')


@pytest.mark.parametrize('kwargs, match', [
    (dict(draft_checkpoint_path='/nonexistent/draft'), 'DRAFT_CHECKPOINT_PATH'),
    (dict(draft_module=tiny_t5x.DRAFT, gamma=0), r'GAMMA \(speculative.from_model.gamma\)'),
    (dict(draft_module=tiny_t5x.DRAFT, lenience=2.0), 'speculative.from_model: lenience'),
    (dict(draft_module=tiny_t5x.DRAFT, threshold_rule='x'), 'speculative.from_model: the '
     'threshold rule')], ids=['draft path', 'gamma', 'lenience', 'threshold rule'])
def test_bad_settings_are_one_line_errors_naming_the_gin_binding(kwargs, match):
  with pytest.raises(ValueError, match=match) as e:
    speculative.from_model(_plain(), **kwargs)
  assert '\n' not in str(e.value)


def test_run_stats_sum_the_batches_and_write_them(tmp_path):
  stats = run_stats.RunStats(str(tmp_path))
  counts = [dict(examples=4, generated=30, target_calls=12, accepted=14, drafted=36,
                 beta_sum=9.0, beta_count=20),
            dict(examples=2, generated=10, target_calls=8, accepted=2, drafted=24,
                 beta_sum=1.0, beta_count=10)]
  for c in counts:
    stats.add({k: np.asarray(v) for k, v in c.items()})
  written = json.loads((tmp_path / run_stats.STATS_FILE).read_text())
  assert [b['examples'] for b in written['batches']] == [4, 2]
  assert written['batches'][0]['tokens_per_call'] == pytest.approx(30 / 12)
  total = written['total']
  assert (total['examples'], total['target_calls'], total['tokens']) == (6, 20, 40)
  assert total['alpha'] == pytest.approx(10.0 / 30)
  assert total['tokens_per_call'] == pytest.approx(2.0)
  assert total['seconds'] >= written['batches'][1]['seconds'] >= 0


def test_the_shipped_greedy_gin_makes_a_t5x_model_gin_speculative(trained):
  """README's flow: a model gin that decodes with beam search, then greedy.gin, then the
  include: the model decodes T5X's greedy temperature_sample speculatively."""
  model = _parsed([TARGET_GIN, 'specjax/t5x/configs/greedy.gin', INCLUDE],
                  [f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(trained["draft"])}'], '%MODEL')
  assert isinstance(model, speculative.SpeculativeEncoderDecoderModel)
  assert model.sampling_defaults == dict(temperature=0.0, topk=1, topp=0.0)


def test_the_t5x_route_computes_with_t5xs_bfloat16_rounding_unless_told_not_to():
  params = jax.eval_shape(lambda: speculative.from_model(
      _plain(), draft_module=tiny_t5x.DRAFT).get_initial_variables(
          jax.random.PRNGKey(0), *tiny_t5x.shapes(2, 8, 8)))['params']
  for given, expected in ((None, True), (False, False)):
    kwargs = {} if given is None else {'t5x_rounding': given}
    model = speculative.from_model(_plain(), draft_module=tiny_t5x.DRAFT, **kwargs)
    target, draft = model.specjax_models(params)
    assert target.config.t5x_rounding is draft.config.t5x_rounding is expected
