"""The draft kinds of the T5X route (speculative.from_model.draft_kind, gin's DRAFT_KIND):
trained EAGLE and Medusa heads and layer-skip predict T5X's own greedy decode token for
token, chains and trees; sampled, they decode what specjax's decode does with the same
heads (`--draft eagle:PATH`'s proposer); the heads' params sit under the model's params
tree with their logical axes and T5X's own restore fills them from the heads' directory;
a layer-skip draft adds no params; bad settings are one-line errors naming the binding."""
from flax import traverse_util
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

import specjax  # pylint: disable=wrong-import-position
from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position
from specjax.proposers.eagle import EagleHead  # pylint: disable=wrong-import-position
from specjax.proposers.layer_skip import exit_params  # pylint: disable=wrong-import-position
from specjax.proposers.medusa import MedusaHeads  # pylint: disable=wrong-import-position
from specjax.t5x import decoding  # pylint: disable=wrong-import-position
from specjax.t5x import model as speculative  # pylint: disable=wrong-import-position
from specjax.t5x import restore  # pylint: disable=wrong-import-position
import tiny_t5x  # pylint: disable=wrong-import-position

B, S, L = 8, 8, 12
RNG = jax.random.PRNGKey(3)


def _meta(kind, target, **sizes):
  return {'kind': kind, 'target': 'tiny', 'hidden': target.config.emb_dim,
          'vocab_size': target.vocab_size, **sizes}


def _write_heads(root, target, target_params):
  """{kind: directory} of an EAGLE head started from the target's last layer, of three
  random Medusa heads and of an early exit for the first layer (the target's own, its
  projection scaled), written as train_draft writes them (bfloat16 and draft.json)."""
  eagle = EagleHead(target).from_target(target_params)
  medusa = MedusaHeads(target, 3).init(jax.random.PRNGKey(1), scale=1.0)
  own_exit = exit_params(target_params)
  own_exit['decoder']['logits_dense'] = {
      'kernel': 3.0 * own_exit['decoder']['logits_dense']['kernel']}
  return {'eagle': heads_io.save_heads(str(root / 'eagle'), eagle,
                                       _meta('eagle', target, layers=1)),
          'medusa': heads_io.save_heads(str(root / 'medusa'), medusa,
                                        _meta('medusa', target, num_heads=3)),
          'layerskip:1+exit': heads_io.save_heads(str(root / 'exit'), own_exit,
                                                  _meta('layerskip', target, layers=1))}


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  """(specjax target, T5X target params, {kind: heads directory}) of tiny_t5x.TARGET."""
  params = tiny_t5x.params(tiny_t5x.speculative_model())
  target_params = {k: v for k, v in params.items() if k != 'draft'}
  target, _ = tiny_t5x.speculative_model().specjax_models(params)
  return target, target_params, _write_heads(tmp_path_factory.mktemp('heads'), target,
                                             target_params)


def _build(kind, heads, **kw):
  """The model of a kind of KINDS ('layerskip:1+exit': layerskip:1 with its exit)."""
  return speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_kind=kind.split('+')[0],
      draft_checkpoint_path=heads.get(kind), **{'gamma': 3, **kw})


def _params(kind, setup):
  _, target_params, heads = setup
  if kind not in heads:
    return dict(target_params)
  return {**target_params, 'draft': restore.read_heads(heads[kind])[1]}


KINDS = ('eagle', 'medusa', 'layerskip:1', 'layerskip:1+exit')


@pytest.mark.parametrize('tree', [None, '2,2,1'])
@pytest.mark.parametrize('kind', KINDS)
def test_greedy_equals_t5x_temperature_sample(setup, kind, tree):
  model = _build(kind, setup[2], tree=tree)
  batch = tiny_t5x.batch(B, S, L)
  got, aux = jax.jit(model.predict_batch_with_aux)(_params(kind, setup), batch)
  ref = jax.jit(tiny_t5x.greedy_model().predict_batch)(setup[1], batch)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
  assert len({tuple(r) for r in np.asarray(got).tolist()}) > 1
  assert np.all(np.asarray(aux['target_calls']) >= 1)


@pytest.mark.parametrize('kind', ['eagle', 'medusa', 'layerskip:1+exit'])
def test_sampled_decodes_are_specjax_decodes_with_the_same_heads(setup, kind):
  """At T=1 the model's decodes and counts are those of specjax's decode with the proposer
  `--draft KIND:PATH` loads; zeroed heads give other counts (the params reach the draft)."""
  target, target_params, heads = setup
  model = _build(kind, heads, temperature=1.0, topk=0)
  batch = tiny_t5x.batch(B, S, L, seed=2)
  params = _params(kind, setup)
  got, aux = model.predict_batch_with_aux(params, batch, rng=RNG)
  proposer, stored = drafts.resolve_draft(f'{kind.split(":")[0]}:{heads[kind]}', target,
                                          'tiny', None)
  ref = decoding.predict(target, target_params, proposer, stored,
                         batch['encoder_input_tokens'], max_decode_len=L, gamma=3,
                         sampling=decoding.sampling_from_t5x(temperature=1.0), rng=RNG)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref.decodes[:, -1]))
  np.testing.assert_array_equal(np.asarray(aux['target_calls']),
                                np.asarray(ref.aux['target_calls']))
  zeroed = dict(params, draft=jax.tree.map(np.zeros_like, params['draft']))
  _, other = model.predict_batch_with_aux(zeroed, batch, rng=RNG)
  assert not np.array_equal(np.asarray(other['target_calls']),
                            np.asarray(aux['target_calls']))


def test_initial_variables_hold_the_heads_with_their_axes(setup):
  shapes, types = tiny_t5x.shapes(2, 8, 8)
  init = lambda model: jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.PRNGKey(0), shapes, types))
  for kind in ('eagle', 'medusa'):
    variables = init(_build(kind, setup[2]))
    stored = restore.read_heads(setup[2][kind])[1]
    assert (jax.tree.map(lambda a: a.shape, variables['params']['draft']) ==
            jax.tree.map(np.shape, stored))
    leaves = traverse_util.flatten_dict(variables['params']['draft'])
    axes = traverse_util.flatten_dict(variables['params_axes']['draft'])
    assert set(axes) == {k[:-1] + (f'{k[-1]}_axes',) for k in leaves}
  eagle = init(_build('eagle', setup[2]))['params_axes']['draft']
  assert eagle['fc']['kernel_axes'].names == (None, 'embed')
  medusa = init(_build('medusa', setup[2]))['params_axes']['draft']
  assert medusa['w_axes'].names == (None, 'embed', 'mlp')
  skip = init(_build('layerskip:1', setup[2]))
  assert 'draft' not in skip['params'] and 'draft' not in skip['params_axes']
  own_exit = init(_build('layerskip:1+exit', setup[2]))
  assert set(own_exit['params']['draft']['decoder']) == {'decoder_norm', 'logits_dense'}
  assert own_exit['params_axes']['draft']['decoder']['logits_dense']['kernel_axes'].names == (
      'embed', 'vocab')


@pytest.mark.parametrize('kind', ['eagle', 'layerskip:1', 'layerskip:1+exit'])
def test_t5x_restore_fills_the_heads_from_their_directory(trained, tmp_path, kind):
  """Through gin (DRAFT_KIND) and T5X's own restore of a target-only checkpoint written by
  t5x.train: the heads' params come from the heads' directory, the target's from the
  checkpoint; a layer-skip draft restores the target alone."""
  import gin  # pylint: disable=import-outside-toplevel
  from t5x import gin_utils  # pylint: disable=import-outside-toplevel
  target, target_params = specjax.load_model(None, str(trained['target']))
  heads = _write_heads(tmp_path, target, target_params)
  path = heads.get(kind)
  bindings = [f'DRAFT_KIND = {real_t5x.quoted(kind.split("+")[0])}']
  if path is not None:
    bindings.append(f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(path)}')
  with gin.unlock_config():
    gin_utils.parse_gin_flags(
        [str(real_t5x.REPO)], ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
                               'specjax/t5x/configs/speculative.gin'], bindings,
        finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
  gin.clear_config()
  assert model.draft_kind.name == kind.split(':')[0]
  params = tiny_t5x.restored(model, trained['target'] / 'checkpoint_150', path)
  own = {k: v for k, v in params.items() if k != 'draft'}
  for key, value in jax.tree_util.tree_leaves_with_path(target_params):
    np.testing.assert_array_equal(np.asarray(_at(own, key)), np.asarray(value), str(key))
  if path is None:
    assert 'draft' not in params
    return
  stored = restore.read_heads(path)[1]
  for key, value in jax.tree_util.tree_leaves_with_path(stored):
    assert _at(params['draft'], key).dtype == np.float32
    np.testing.assert_array_equal(np.asarray(_at(params['draft'], key)), value, str(key))


def _at(tree, key_path):
  for k in key_path:
    tree = tree[k.key]
  return tree


@pytest.mark.parametrize('kwargs, match', [
    (dict(draft_kind='eagle'), "DRAFT_KIND 'eagle' needs the heads' directory"),
    (dict(draft_kind='hydra'), r"draft_kind \(DRAFT_KIND\) takes 'model', 'eagle'"),
    (dict(draft_kind='layerskip:2'), r"pass layerskip:M, M >= 1 and below the target's 2"),
    (dict(draft_kind='layerskip:x'), 'pass layerskip:M'),
    (dict(draft_kind='layerskip:1', draft_checkpoint_path='medusa'),
     "holds no early exit for layerskip:1 \\(its draft.json: medusa"),
    (dict(draft_kind='layerskip:1', draft_module=tiny_t5x.DRAFT),
     'leave DRAFT_MODULE unbound'),
    (dict(draft_kind='eagle', draft_checkpoint_path='medusa'),
     "holds a medusa draft, not eagle heads: set DRAFT_KIND = 'medusa'"),
    (dict(draft_kind='model', draft_checkpoint_path='eagle'),
     "holds eagle heads, not a draft model: set DRAFT_KIND = 'eagle'"),
    (dict(draft_kind='medusa', draft_checkpoint_path='nowhere'),
     'holds no trained draft'),
])
def test_bad_draft_kinds_are_one_line_errors(setup, kwargs, match):
  heads = setup[2]
  path = kwargs.get('draft_checkpoint_path')
  if path is not None:
    kwargs['draft_checkpoint_path'] = heads.get(path, path)
  with pytest.raises(ValueError, match=match) as e:
    speculative.SpeculativeEncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB,
                                               tiny_t5x.VOCAB, None, **kwargs)
  assert '\n' not in str(e.value)


def test_heads_for_another_target_are_refused_in_one_line(setup, tmp_path):
  """Heads of another hidden width fail when the model first reads the target's shapes."""
  target, _, _ = setup
  meta = dict(_meta('medusa', target, num_heads=2), hidden=8)
  path = heads_io.save_heads(str(tmp_path / 'medusa8'), {'w': np.zeros((2, 8, 8)),
                                                        'b': np.zeros((2, 8))}, meta)
  model = _build('medusa', {'medusa': path})
  with pytest.raises(ValueError, match=r'medusa heads trained for tiny \(hidden 8') as e:
    model.specjax_models(_params('layerskip:1', setup))
  assert '\n' not in str(e.value)
