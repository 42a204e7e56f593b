"""specjax's gin configs build what they say: the paper's pair is T5 1.1 XXL with a T5 1.1
small draft (specjax's t5_xxl and t5_small presets) at gamma 7; the include keeps the
wrapped model's own settings and registers the draft's restore hook."""
import gin
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

from t5x import gin_utils  # pylint: disable=wrong-import-position

from specjax.models import t5_config  # pylint: disable=wrong-import-position
from specjax.t5x import model as speculative  # pylint: disable=wrong-import-position
import tiny_t5x  # pylint: disable=wrong-import-position


def _configured(gin_files, bindings=()):
  """(MODEL, RestoreCheckpointConfig.state_transformation_fns) as the gin files build them."""
  gin.clear_config()
  try:
    gin_utils.parse_gin_flags([str(real_t5x.REPO)], gin_files, list(bindings),
                              finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
    fns = gin.query_parameter('utils.RestoreCheckpointConfig.state_transformation_fns')
    return model, [f.scoped_configurable_fn() for f in fns]
  finally:
    gin.clear_config()


def test_paper_pair_is_t5_1_1_xxl_with_a_small_draft():
  model, fns = _configured(['specjax/t5x/configs/t5_1_1_xxl_small.gin'])
  assert isinstance(model, speculative.SpeculativeEncoderDecoderModel)
  assert model.gamma == 7 and 't5_1_1_small' in model.draft_checkpoint_path
  assert len(fns) == 1 and callable(fns[0])
  shapes, types = tiny_t5x.shapes(1, 8, 8)
  abstract = jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.PRNGKey(0), shapes, types))['params']
  target, draft = model.specjax_models(abstract)
  # T5X's own bfloat16 arithmetic (docs/bfloat16.md), as its t5_1_1 networks compute.
  assert target.config == t5_config.t5_xxl.replace(dtype='bfloat16', name='t5_xxl',
                                                   t5x_rounding=True)
  assert draft.config == t5_config.t5_small.replace(dtype='bfloat16', name='t5_small',
                                                    t5x_rounding=True)
  assert abstract['draft']['decoder']['logits_dense']['kernel'].shape == (512, 32128)


def test_include_wraps_the_model_gin_and_reads_the_draft_shapes(trained):
  model, fns = _configured(
      ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
       'specjax/t5x/configs/speculative.gin'],
      [f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(trained["draft"])}', 'GAMMA = 3',
       'models.EncoderDecoderModel.z_loss = 0.25'])
  assert model.gamma == 3 and model.draft_module is None
  assert getattr(model, '_z_loss') == 0.25  # the wrapped model's own loss settings
  shapes, types = tiny_t5x.shapes(2, 8, 8)
  variables = jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.PRNGKey(0), shapes, types))
  target, draft = model.specjax_models(variables['params'])
  assert (target.config.emb_dim, draft.config.emb_dim) == (32, 16)  # tiny_draft.gin's sizes
  assert set(variables['params_axes']['draft']) == {'token_embedder', 'encoder', 'decoder'}
  state = {'target': {k: np.zeros(()) for k in ('encoder', 'decoder')}}
  filled = fns[0](state, {'target': {'draft': {}, 'encoder': None}})
  assert set(filled['target']) == {'encoder', 'decoder', 'draft'}
  assert fns[0](filled, {'target': {'draft': {}}}) is filled  # a saved draft is kept


def test_a_model_without_a_draft_is_a_one_line_error():
  with pytest.raises(ValueError, match='needs a draft: set draft_checkpoint_path'):
    speculative.SpeculativeEncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB,
                                               tiny_t5x.VOCAB, None)
