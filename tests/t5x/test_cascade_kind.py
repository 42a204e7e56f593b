"""Cascades on the T5X route (DRAFT_KIND 'cascade:model/CHEAP[/K[/C]]' and
'cascade:model:K,CHEAP'): the draft model of DRAFT_CHECKPOINT_PATH or DRAFT_MODULE, sped up
by copy, suffix, a bigram table or a REST datastore, predicts T5X's own greedy decode token
for token; sampled, it decodes what `python -m specjax.decode --draft cascade:NAME/...`
decodes with the same draft model; its params are the draft model's, under `draft`, filled
by T5X's own restore; the cheap part and the draft's params both reach the decode; bad
settings are one-line errors naming the binding. 'copy', the cheap part alone, is a draft
kind too."""
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

from flax import traverse_util  # pylint: disable=wrong-import-position
from t5x import models  # pylint: disable=wrong-import-position

from specjax import datastore  # pylint: disable=wrong-import-position
from specjax.core.tree import DynamicTree  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position
from specjax.proposers.bigram import (  # pylint: disable=wrong-import-position
    counts_of, save_table, table_from_counts)
from specjax.proposers.cascade import HorizontalCascade  # pylint: disable=wrong-import-position
from specjax.proposers.cascade import VerticalCascade  # pylint: disable=wrong-import-position
from specjax.t5x import model as speculative  # pylint: disable=wrong-import-position
import tiny_t5x  # pylint: disable=wrong-import-position

B, S, L = 8, 8, 12
RNG = jax.random.PRNGKey(5)
NOISE = 0.2  # the draft: the target's params plus noise of NOISE times each array's spread
# DRAFT_KIND of each cascade the tests run ('STORE': the datastore of the target's decodes,
# 'TABLE': their bigram table).
CASCADES = ('cascade:model/suffix/2/2', 'cascade:model/copy', 'cascade:model/rest:STORE/2',
            'cascade:model:1,rest:STORE+suffix', 'cascade:model/bigram:TABLE/2/2',
            'cascade:model:1,bigram:TABLE')


def _plain():
  """DRAFT_KIND 'model' with the draft model the cascades use: the target's architecture."""
  return speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.TARGET)


@pytest.fixture(scope='module')
def setup(tmp_path_factory):
  """(params of target and draft, the target's, {name: datastore directory}).

  The draft is the target with noise added to its params: it agrees with the target on
  some tokens, not all. The datastores: 'own', the target's greedy decodes of four batches
  (the tests' included); 'other', as many random documents; 'table', the bigram table of
  'own' (top 4 next tokens per token, as python -m specjax.datastore bigram counts them)."""
  params = tiny_t5x.params(_plain(), eos_bias=0.5)
  target_params = {k: v for k, v in params.items() if k != 'draft'}
  leaves, tree = jax.tree.flatten(target_params)
  rng = np.random.default_rng(3)
  params['draft'] = jax.tree.unflatten(tree, [
      a + NOISE * np.std(a) * rng.standard_normal(a.shape).astype(a.dtype) for a in leaves])
  predict = jax.jit(tiny_t5x.greedy_model().predict_batch)
  rows = np.concatenate([np.asarray(predict(target_params, tiny_t5x.batch(B, S, L, seed=s)))
                         for s in range(4)]).tolist()
  own = [r[:r.index(tiny_t5x.EOS) + 1] if tiny_t5x.EOS in r else r for r in rows]
  rng = np.random.default_rng(7)
  other = [rng.integers(2, tiny_t5x.VOCAB_SIZE, len(d)).tolist() + [tiny_t5x.EOS]
           for d in own]
  root = tmp_path_factory.mktemp('datastores')
  stores = {}
  for name, documents in (('own', own), ('other', other)):
    datastore.write(datastore.build(documents, tiny_t5x.VOCAB_SIZE, '0' * 64),
                    str(root / name))
    stores[name] = str(root / name)
  stores['table'] = str(root / 'table.npz')
  save_table(stores['table'], table_from_counts(counts_of(own, tiny_t5x.VOCAB_SIZE), 4))
  return params, target_params, stores


def _kind(kind, stores, store='own'):
  return kind.replace('STORE', stores.get(store, store)).replace('TABLE', stores['table'])


def _model(kind, stores, store='own', **kw):
  return speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.TARGET,
      draft_kind=_kind(kind, stores, store), **{'gamma': 3, **kw})


@pytest.mark.parametrize('kind', CASCADES)
def test_cascades_predict_t5x_greedy(setup, kind):
  """T5X's own greedy decode token for token; the proposer is the cascade the kind names,
  around the draft model; some calls keep more than one token."""
  params, target_params, stores = setup
  model = _model(kind, stores)
  _, proposer = model.specjax_models(params)
  assert isinstance(proposer, VerticalCascade if model.draft_kind.cascade.vertical else
                    HorizontalCascade)
  batch = tiny_t5x.batch(B, S, L)
  got, aux = jax.jit(model.predict_batch_with_aux)(params, batch)
  ref = jax.jit(tiny_t5x.greedy_model().predict_batch)(target_params, batch)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
  assert len({tuple(r) for r in np.asarray(got).tolist()}) > 1
  assert np.all(np.asarray(aux['target_calls']) >= 1)
  assert np.max(np.asarray(aux['tokens_per_call'])) > 1.0


def test_the_cheap_part_reaches_the_decode(setup):
  """Capped at one call of the draft model, a cascade whose cheap part retrieves from the
  target's own decodes proposes more and saves target calls that one retrieving random
  text does not, for the same decodes. (Uncapped, the draft model's chain is the same
  whatever drafts it.)"""
  params, _, stores = setup
  batch = tiny_t5x.batch(B, S, L)
  calls, decodes = {}, {}
  for store in ('own', 'other'):
    model = _model('cascade:model/rest:STORE/2/1', stores, store)
    got, aux = jax.jit(model.predict_batch_with_aux)(params, batch)
    decodes[store], calls[store] = np.asarray(got), int(np.sum(aux['target_calls']))
  np.testing.assert_array_equal(decodes['own'], decodes['other'])
  assert calls['own'] < calls['other']


@pytest.mark.parametrize('kind', ['cascade:model/suffix/2/2', 'cascade:model:1,rest:STORE',
                                  'cascade:model/bigram:TABLE/2'])
def test_sampled_cascades_are_specjax_decodes(setup, kind):
  """At T=1 the decodes and counts are those of specjax's decode with the proposer and
  params `--draft cascade:NAME/...` resolves to, NAME the same draft model; zeroed draft
  params give other counts (the draft model's params reach the cascade)."""
  params, _, stores = setup
  model = _model(kind, stores, temperature=1.0, topk=0)
  batch = tiny_t5x.batch(B, S, L, seed=2)
  target, draft = _plain().specjax_models(params)
  spec = _kind(kind, stores).replace('model', 'tiny_draft', 1)
  proposer, stored = drafts.resolve_draft(spec, target, 'tiny',
                                          lambda name: (draft, params['draft']))
  tiny_t5x.assert_sampled_like_specjax(model, params, batch, RNG, proposer, stored, gamma=3)


def test_initial_variables_hold_the_draft_model(setup):
  """A cascade's params and their axes under `draft` are the draft model's, as for
  DRAFT_KIND 'model'; the cheap part adds none."""
  shapes, types = tiny_t5x.shapes(2, 8, 8)
  init = lambda model: jax.eval_shape(lambda: model.get_initial_variables(
      jax.random.PRNGKey(0), shapes, types))
  plain = init(_plain())
  for kind in ('cascade:model/rest:STORE+suffix/2/2', 'cascade:model:1,copy'):
    variables = init(_model(kind, setup[2]))
    assert (jax.tree.map(lambda a: (a.shape, a.dtype), variables['params']['draft']) ==
            jax.tree.map(lambda a: (a.shape, a.dtype), plain['params']['draft']))
    axes = traverse_util.flatten_dict(variables['params_axes']['draft'])
    assert {k: v.names for k, v in axes.items()} == {
        k: v.names for k, v in traverse_util.flatten_dict(
            plain['params_axes']['draft']).items()}
    assert _model(kind, setup[2]).draft_kind.has_params


def test_t5x_restore_fills_the_cascades_draft_model(trained, tmp_path):
  """Through gin (DRAFT_KIND, DRAFT_CHECKPOINT_PATH: the draft t5x.train wrote) and T5X's
  own restore of a target-only checkpoint: the draft model's params come from its
  checkpoint, and the cascade predicts T5X's own greedy decode."""
  import gin  # pylint: disable=import-outside-toplevel
  from t5x import gin_utils  # pylint: disable=import-outside-toplevel
  from specjax.t5x import restore  # pylint: disable=import-outside-toplevel
  with gin.unlock_config():
    gin_utils.parse_gin_flags(
        [str(real_t5x.REPO)], ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
                               'specjax/t5x/configs/speculative.gin'],
        ["DRAFT_KIND = 'cascade:model/suffix/2/2'",
         f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(trained["draft"])}', 'GAMMA = 3'],
        finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
  gin.clear_config()
  assert model.draft_kind.name == 'cascade' and model.draft_kind.cascade.calls == 2
  params = tiny_t5x.restored(model, trained['target'] / 'checkpoint_150', trained['draft'])
  stored = restore.read_draft(str(trained['draft']))[1]
  for key, value in jax.tree_util.tree_leaves_with_path(stored):
    leaf = params['draft']
    for k in key:
      leaf = leaf[k.key]
    np.testing.assert_array_equal(np.asarray(leaf), value, str(key))
  batch = tiny_t5x.batch(B, S, L)
  got, aux = jax.jit(model.predict_batch_with_aux)(params, batch)
  target_params = {k: v for k, v in params.items() if k != 'draft'}
  greedy = models.EncoderDecoderModel(
      model.module, model.input_vocabulary, model.output_vocabulary, None,
      decode_fn=tiny_t5x.greedy_model().decode_fn)
  np.testing.assert_array_equal(np.asarray(got),
                                np.asarray(jax.jit(greedy.predict_batch)(target_params, batch)))
  assert np.all(np.asarray(aux['target_calls']) >= 1)


FORMS = (r"pass 'cascade:model/CHEAP' \(the draft model's chain drafted by CHEAP, 3 tokens "
         r"per call of the draft model\), .*CHEAP one of copy, suffix, bigram:TABLE, rest:DIR "
         r"or rest:DIR\+suffix, 'model' the draft model of DRAFT_CHECKPOINT_PATH or "
         r"DRAFT_MODULE")


@pytest.mark.parametrize('kwargs, match', [
    (dict(draft_kind='cascade:model'), "DRAFT_KIND 'cascade:model': " + FORMS),
    (dict(draft_kind='cascade:demo_draft/suffix'), FORMS),
    (dict(draft_kind='cascade:model/bigram'), "DRAFT_KIND 'bigram' needs its table: pass "
     "'bigram:TABLE'"),
    (dict(draft_kind='cascade:model/bigram:nowhere.npz/2'),
     "DRAFT_KIND 'bigram:nowhere.npz': bigram table nowhere.npz does not exist"),
    (dict(draft_kind='cascade:model/lookahead'), FORMS),
    (dict(draft_kind='cascade:model/eagle'), FORMS),
    (dict(draft_kind='cascade:model/suffix/0'), FORMS),
    (dict(draft_kind='cascade:model/suffix/3/0'), FORMS),
    (dict(draft_kind='cascade:model:0,suffix'), FORMS),
    (dict(draft_kind='cascade:model/rest:nowhere'),
     "DRAFT_KIND 'rest:nowhere': no datastore directory nowhere"),
    (dict(draft_kind='cascade:model/suffix', draft_module=None),
     r"needs its draft model \(DRAFT_KIND 'cascade:model/suffix'\): set draft_checkpoint_path"),
    (dict(draft_kind='cascade:model/suffix', tree='2,2,1'),
     r"speculative.from_model.tree: DRAFT_KIND 'cascade:model/suffix/3' is a cascade, which "
     'drafts chains: leave speculative.from_model.tree unbound'),
    (dict(draft_kind='cascade:model:3,suffix'),
     r"DRAFT_KIND 'cascade:model:3,suffix' drafts its first 3 tokens with the draft model and "
     'the rest with suffix: set GAMMA above 3'),
    (dict(draft_kind='copy', draft_module=None, tree=DynamicTree(4, 3, 2)),
     r"DRAFT_KIND 'copy' grows static trees only .*bind children per depth"),
    (dict(draft_kind='copy'), "DRAFT_KIND 'copy' drafts from the row's input, with no draft "
     'model or checkpoint: leave DRAFT_MODULE unbound'),
])
def test_bad_cascades_are_one_line_errors(kwargs, match):
  kwargs = {'draft_module': tiny_t5x.TARGET, 'gamma': 3, **kwargs}
  with pytest.raises(ValueError, match=match) as e:
    speculative.SpeculativeEncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB,
                                               tiny_t5x.VOCAB, None, **kwargs)
  assert '\n' not in str(e.value)


def test_heads_are_not_a_cascades_draft_model(tmp_path):
  """DRAFT_CHECKPOINT_PATH holding trained heads is refused for a cascade as for 'model'."""
  from specjax.drafting import heads_io  # pylint: disable=import-outside-toplevel
  path = heads_io.save_heads(str(tmp_path / 'medusa'), {'w': np.zeros((2, 16, 16)),
                                                       'b': np.zeros((2, 16))},
                             {'kind': 'medusa', 'target': 'tiny', 'hidden': 16,
                              'vocab_size': tiny_t5x.VOCAB_SIZE, 'num_heads': 2})
  with pytest.raises(ValueError, match=r"holds medusa heads, not a draft model: set "
                     "DRAFT_KIND = 'medusa'") as e:
    speculative.SpeculativeEncoderDecoderModel(
        tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None,
        draft_kind='cascade:model/suffix', draft_checkpoint_path=path)
  assert '\n' not in str(e.value)
