"""The draft kinds of the T5X route (speculative.from_model.draft_kind, gin's DRAFT_KIND):
trained EAGLE and Medusa heads, layer-skip and the drafts with no draft model (copy, suffix,
lookahead, a bigram table, a REST datastore) predict T5X's own greedy decode token for
token, chains and trees; sampled, they decode what specjax's decode does with the same
proposer (`--draft eagle:PATH`'s, `--draft rest:DIR`'s, ...); the heads' params sit under
the model's params tree with their logical axes and T5X's own restore fills them from the
heads' directory; a layer-skip draft and the drafts with no model add no params (a table's
and a datastore's arrays are constants of the decode); bad settings are one-line errors
naming the binding."""
import functools

from flax import traverse_util
import jax
import numpy as np
import pytest

import real_t5x

real_t5x.require_t5x()

from t5x import decoding as t5x_decoding  # pylint: disable=wrong-import-position
from t5x import models  # pylint: disable=wrong-import-position

import specjax  # pylint: disable=wrong-import-position
from specjax import datastore  # pylint: disable=wrong-import-position
from specjax.core.tree import DynamicTree  # pylint: disable=wrong-import-position
from specjax.drafting import heads_io  # pylint: disable=wrong-import-position
from specjax.job import drafts  # pylint: disable=wrong-import-position
from specjax.proposers.bigram import (  # pylint: disable=wrong-import-position
    counts_of, save_table, table_from_counts)
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
  target, _, heads = setup
  model = _build(kind, heads, temperature=1.0, topk=0)
  batch = tiny_t5x.batch(B, S, L, seed=2)
  params = _params(kind, setup)
  proposer, stored = drafts.resolve_draft(f'{kind.split(":")[0]}:{heads[kind]}', target,
                                          'tiny', None)
  tiny_t5x.assert_sampled_like_specjax(model, params, batch, RNG, proposer, stored, gamma=3)


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


@pytest.mark.parametrize('kind', ['eagle', 'layerskip:1', 'layerskip:1+exit', 'suffix',
                                  'lookahead:2,2,2', 'bigram', 'rest+suffix'])
def test_t5x_restore_fills_the_heads_from_their_directory(trained, tmp_path, kind):
  """Through gin (DRAFT_KIND) and T5X's own restore of a target-only checkpoint written by
  t5x.train: the heads' params come from the heads' directory, the target's from the
  checkpoint; a layer-skip draft and the drafts with no model restore the target alone,
  and the latter predict T5X's own greedy decode ('rest+suffix': the demo task's bundled
  datastore, checked against the gin's SentencePiece vocabulary; 'bigram': its bundled
  table)."""
  import gin  # pylint: disable=import-outside-toplevel
  from t5x import gin_utils  # pylint: disable=import-outside-toplevel
  target, target_params = specjax.load_model(None, str(trained['target']))
  heads = _write_heads(tmp_path, target, target_params)
  path = heads.get(kind)
  spec = kind.split('+')[0] if kind.startswith('layerskip') else kind
  if kind == 'rest+suffix':
    spec = f'rest:{datastore.DEFAULT_DATASTORES["demo_target"]}+suffix'
  if kind == 'bigram':
    spec = f'bigram:{drafts.DEFAULT_BIGRAMS["demo_target"]}'
  bindings = [f'DRAFT_KIND = {real_t5x.quoted(spec)}']
  if path is not None:
    bindings.append(f'DRAFT_CHECKPOINT_PATH = {real_t5x.quoted(path)}')
  with gin.unlock_config():
    gin_utils.parse_gin_flags(
        [str(real_t5x.REPO)], ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
                               'specjax/t5x/configs/speculative.gin'], bindings,
        finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
  gin.clear_config()
  assert model.draft_kind.name == (kind if kind == 'rest+suffix' else kind.split(':')[0])
  params = tiny_t5x.restored(model, trained['target'] / 'checkpoint_150', path)
  own = {k: v for k, v in params.items() if k != 'draft'}
  for key, value in jax.tree_util.tree_leaves_with_path(target_params):
    np.testing.assert_array_equal(np.asarray(_at(own, key)), np.asarray(value), str(key))
  if path is None:
    assert 'draft' not in params
  if path is None and not kind.startswith('layerskip'):
    batch = tiny_t5x.batch(B, S, L)
    got, _ = jax.jit(model.predict_batch_with_aux)(params, batch)
    plain = models.EncoderDecoderModel(model.module, model.input_vocabulary,
                                       model.output_vocabulary, None, decode_fn=functools.partial(
                                           t5x_decoding.temperature_sample, temperature=0.0))
    np.testing.assert_array_equal(np.asarray(got),
                                  np.asarray(jax.jit(plain.predict_batch)(params, batch)))
  if path is None:
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


# ------------------------------------------------------------- drafts with no draft model

# The kinds with no draft model ('bigram': 'bigram:TABLE'; 'rest' and 'rest+suffix':
# 'rest:DIR', 'rest:DIR+suffix').
NO_MODEL = ('copy', 'suffix', 'lookahead', 'lookahead:2,2,2', 'bigram', 'rest', 'rest+suffix')


def _documents(rows):
  """Each row of decodes [R, L] up to its EOS, EOS included."""
  return [row[:row.index(tiny_t5x.EOS) + 1] if tiny_t5x.EOS in row else row
          for row in np.asarray(rows).tolist()]


def _write_table(path, documents, vocab_size=tiny_t5x.VOCAB_SIZE):
  """A bigram table of `documents` (each framed as the decoder sees it: the start token
  first) written to `path`, as python -m specjax.datastore bigram writes one (top 4 per token)."""
  save_table(str(path), table_from_counts(counts_of(documents, vocab_size), 4))
  return str(path)


def _write_store(path, documents, vocab_size=tiny_t5x.VOCAB_SIZE, sha='0' * 64):
  """A datastore of `documents` written to `path`, as `python -m specjax.datastore build`
  writes one (sha: the vocabulary's fingerprint)."""
  datastore.write(datastore.build(documents, vocab_size, sha), str(path))
  return str(path)


@pytest.fixture(scope='module')
def stores(setup, tmp_path_factory):
  """{name: datastore directory}: 'own', the target's greedy decodes of four batches (the
  tests' included); 'other', as many random documents; 'wide', built for 64 ids; 'empty'
  (0 tokens); 'not_a_store', a directory without datastore.json. And {'bigram:' + name:
  table file} of bigram tables: 'own', 'other' and 'wide' of the same documents, and
  'not_a_table', a text file."""
  root = tmp_path_factory.mktemp('datastores')
  predict = jax.jit(tiny_t5x.greedy_model().predict_batch)
  own = sum((_documents(predict(setup[1], tiny_t5x.batch(B, S, L, seed=s)))
             for s in range(4)), [])
  rng = np.random.default_rng(7)
  other = [rng.integers(2, tiny_t5x.VOCAB_SIZE, len(d)).tolist() + [tiny_t5x.EOS]
           for d in own]
  empty = datastore.Datastore('', np.zeros(0, np.int32), np.zeros(0, np.int32), 8,
                              tiny_t5x.VOCAB_SIZE, '0' * 64, {})
  datastore.write(empty, str(root / 'empty'))
  (root / 'not_a_store').mkdir()
  (root / 'not_a_table.npz').write_text('not a table\n')
  return {'own': _write_store(root / 'own', own), 'other': _write_store(root / 'other', other),
          'wide': _write_store(root / 'wide', own, vocab_size=64),
          'empty': str(root / 'empty'), 'not_a_store': str(root / 'not_a_store'),
          'bigram:own': _write_table(root / 'own.npz', own),
          'bigram:other': _write_table(root / 'other.npz', other),
          'bigram:wide': _write_table(root / 'wide.npz', own, vocab_size=64),
          'bigram:not_a_table': str(root / 'not_a_table.npz')}


def _spec(kind, stores, store='own'):
  """DRAFT_KIND (and `--draft`) of a kind of NO_MODEL, 'rest' on the datastore `store`,
  'bigram' on its table."""
  if kind == 'bigram':
    return f'bigram:{stores["bigram:" + store]}'
  if kind.startswith('rest'):
    return f'rest:{stores.get(store, store)}' + kind[len('rest'):]
  return kind


def _no_model(kind, stores, store='own', **kw):
  return speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None,
      draft_kind=_spec(kind, stores, store), **{'gamma': 3, **kw})


@pytest.mark.parametrize('kind, tree', [(k, None) for k in NO_MODEL] + [
    (k, DynamicTree(4, 3, 2)) for k in ('suffix', 'bigram', 'rest', 'rest+suffix')] + [
        (k, '2,2,1') for k in ('copy', 'bigram')])
def test_drafts_with_no_model_predict_t5x_greedy(setup, stores, kind, tree):
  """Chains of GAMMA, dynamic trees of the retrieved tries and of the bigram's top tokens,
  copy's and the bigram's static trees, lookahead's own tree: T5X's own greedy decode
  token for token, and some calls keep more than one token (the drafts reach the
  decode)."""
  model = _no_model(kind, stores, tree=tree)
  batch = tiny_t5x.batch(B, S, L)
  got, aux = jax.jit(model.predict_batch_with_aux)(setup[1], batch)
  ref = jax.jit(tiny_t5x.greedy_model().predict_batch)(setup[1], batch)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref))
  assert len({tuple(r) for r in np.asarray(got).tolist()}) > 1
  assert np.all(np.asarray(aux['target_calls']) >= 1)
  assert np.max(np.asarray(aux['tokens_per_call'])) > 1.0


@pytest.mark.parametrize('kind', ['rest', 'bigram'])
def test_the_datastore_reaches_the_decode(setup, stores, kind):
  """A datastore (a bigram table) of the target's own decodes saves target calls that one
  of random text does not (same decodes): its arrays, held by the model and not by the
  params tree, feed the draft."""
  batch = tiny_t5x.batch(B, S, L)
  calls, decodes = {}, {}
  for store in ('own', 'other'):
    model = _no_model(kind, stores, store)
    assert model.draft_kind.path == stores[store if kind == 'rest' else f'bigram:{store}']
    got, aux = jax.jit(model.predict_batch_with_aux)(setup[1], batch)
    decodes[store], calls[store] = np.asarray(got), int(np.sum(aux['target_calls']))
  np.testing.assert_array_equal(decodes['own'], decodes['other'])
  assert calls['own'] < calls['other']


@pytest.mark.parametrize('kind', ['copy', 'suffix', 'lookahead:2,2,2', 'bigram', 'rest',
                                  'rest+suffix'])
def test_sampled_drafts_with_no_model_are_specjax_decodes(setup, stores, kind):
  """At T=1 the model's decodes and counts are those of specjax's decode with the proposer
  and params `--draft KIND` resolves to (lookahead: its own tree)."""
  target, target_params, _ = setup
  model = _no_model(kind, stores, temperature=1.0, topk=0)
  batch = tiny_t5x.batch(B, S, L, seed=2)
  got, aux = model.predict_batch_with_aux(dict(target_params), batch, rng=RNG)
  proposer, stored = drafts.resolve_draft(_spec(kind, stores), target, 'tiny', None)
  tree = proposer.tree_spec() if kind.startswith('lookahead') else None
  ref = decoding.predict(target, target_params, proposer, stored,
                         batch['encoder_input_tokens'], max_decode_len=L, gamma=3,
                         sampling=decoding.sampling_from_t5x(temperature=1.0), rng=RNG,
                         tree=tree)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(ref.decodes[:, -1]))
  np.testing.assert_array_equal(np.asarray(aux['target_calls']),
                                np.asarray(ref.aux['target_calls']))


@pytest.mark.parametrize('kind', NO_MODEL)
def test_drafts_with_no_model_add_no_params(stores, kind):
  shapes, types = tiny_t5x.shapes(2, 8, 8)
  model = _no_model(kind, stores)
  variables = jax.eval_shape(lambda: model.get_initial_variables(jax.random.PRNGKey(0),
                                                                 shapes, types))
  assert 'draft' not in variables['params'] and 'draft' not in variables['params_axes']
  assert not model.draft_kind.has_params


LOOKAHEAD_FORM = (r"pass 'lookahead' or 'lookahead:W,N,G' \(window, n-gram size, guesses\), "
                  r"e.g. 'lookahead:5,3,4', with W in 1..32, N in 2..8, G in 1..32")


@pytest.mark.parametrize('kwargs, match', [
    (dict(draft_kind='lookahead:0,3,4'), "DRAFT_KIND 'lookahead:0,3,4': " + LOOKAHEAD_FORM),
    (dict(draft_kind='lookahead:5,9,4'), LOOKAHEAD_FORM),
    (dict(draft_kind='lookahead:5,3'), LOOKAHEAD_FORM),
    (dict(draft_kind='lookahead:a,b,c'), LOOKAHEAD_FORM),
    (dict(draft_kind='suffix', draft_module=tiny_t5x.DRAFT),
     "DRAFT_KIND 'suffix' drafts from the row's own text, with no draft model or checkpoint: "
     'leave DRAFT_MODULE unbound'),
    (dict(draft_kind='lookahead', draft_checkpoint_path='eagle'),
     'leave DRAFT_CHECKPOINT_PATH unbound'),
    (dict(draft_kind='rest:own', draft_checkpoint_path='eagle'),
     "drafts from its datastore, with no draft model or checkpoint: leave "
     'DRAFT_CHECKPOINT_PATH unbound'),
    (dict(draft_kind='rest'), r"DRAFT_KIND 'rest' needs its datastore: pass 'rest:DIR' \(or "
     r"'rest:DIR\+suffix'\), DIR what python -m specjax.datastore build --output DIR wrote"),
    (dict(draft_kind='rest+suffix'), 'needs its datastore'),
    (dict(draft_kind='rest:nowhere'), "DRAFT_KIND 'rest:nowhere': no datastore directory "
     'nowhere; build one with python -m specjax.datastore build'),
    (dict(draft_kind='rest:empty+suffix'), r'is empty \(0 tokens\); rebuild it'),
    (dict(draft_kind='rest:not_a_store'), r'is not a datastore \(no datastore.json\)'),
    (dict(draft_kind='rest:wide'),
     r"built with a vocabulary of 64 ids, more than the target's 32 logits"),
    (dict(draft_kind='restful'), r"draft_kind \(DRAFT_KIND\) takes .*'lookahead\[:W,N,G\]', "
     r"'bigram:TABLE', 'rest:DIR', 'rest:DIR\+suffix' or 'cascade:model/CHEAP\[/K\[/C\]\]', "
     r"got 'restful'"),
    (dict(draft_kind='bigram'), r"DRAFT_KIND 'bigram' needs its table: pass 'bigram:TABLE', "
     r'TABLE the .npz file python -m specjax.datastore bigram wrote'),
    (dict(draft_kind='bigram:own', draft_checkpoint_path='eagle'),
     'drafts from its bigram table, with no draft model or checkpoint: leave '
     'DRAFT_CHECKPOINT_PATH unbound'),
    (dict(draft_kind='bigram:nowhere.npz'), "DRAFT_KIND 'bigram:nowhere.npz': bigram table "
     'nowhere.npz does not exist; build one with python -m specjax.datastore bigram'),
    (dict(draft_kind='bigram:not_a_table'), r'is not a bigram table \(not an .npz archive\)'),
    (dict(draft_kind='bigram:wide'),
     r"built with a vocabulary of 64 ids, more than the target's 32 logits"),
    (dict(draft_kind='suffix', tree='2,2,1'),
     r"speculative.from_model.tree: DRAFT_KIND 'suffix' proposes the trie of what it "
     r'retrieves, not a fixed branching: bind a dynamic tree'),
    (dict(draft_kind='rest:own+suffix', tree='2,2,1'), 'not a fixed branching'),
    (dict(draft_kind='lookahead', tree='2,2'),
     r"DRAFT_KIND 'lookahead:5,3,4' verifies its window and n-grams as one tree of its own "
     r'\(18 nodes, 6 deep\): leave speculative.from_model.tree unbound'),
    (dict(draft_kind='lookahead', tree=DynamicTree(4, 3, 2)), 'one tree of its own'),
    (dict(draft_kind='lookahead:2,2,2', verification='block'),
     r"tree rule; leave verification and draft_threshold unbound, as DRAFT_KIND "
     r"'lookahead:2,2,2' needs"),
])
def test_bad_drafts_with_no_model_are_one_line_errors(setup, stores, kwargs, match):
  kind = kwargs['draft_kind']
  if kind.startswith('bigram:'):
    kwargs['draft_kind'] = 'bigram:' + stores.get(kind, kind[len('bigram:'):])
  if kind.startswith('rest:'):
    name, plus, _ = kind[len('rest:'):].partition('+')
    kwargs['draft_kind'] = f'rest:{stores.get(name, name)}' + (plus and '+suffix')
  path = kwargs.get('draft_checkpoint_path')
  if path is not None:
    kwargs['draft_checkpoint_path'] = setup[2].get(path, path)
  with pytest.raises(ValueError, match=match) as e:
    speculative.SpeculativeEncoderDecoderModel(tiny_t5x.TARGET, tiny_t5x.VOCAB,
                                               tiny_t5x.VOCAB, None, **kwargs)
  assert '\n' not in str(e.value)


def test_a_datastore_of_another_vocabulary_is_refused(tmp_path):
  """With a SentencePiece vocabulary (seqio's, as T5X's gins give it), 'rest:DIR' reads
  only a datastore built with that vocabulary's model file."""
  import specjax.tasks  # pylint: disable=import-outside-toplevel
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  vocab = specjax.tasks.demo_vocabulary()
  sha = datastore.vocab_fingerprint(checkpoints.load_vocab(vocab.sentencepiece_model_file))
  own = _write_store(tmp_path / 'own', [[5, 6, 7, 1]], sha=sha)
  other = _write_store(tmp_path / 'other', [[5, 6, 7, 1]])
  build = lambda d: speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, vocab, vocab, None, draft_kind=f'rest:{d}')
  assert build(own).draft_kind.datastore.vocab_sha256 == sha
  with pytest.raises(ValueError, match=r"DRAFT_KIND 'rest:.*other': datastore .*other was "
                     r'built with another vocabulary \(sha256 000000000000...\) than '
                     r'.*spm.model') as e:
    build(other)
  assert '\n' not in str(e.value)


def test_gin_binds_a_dynamic_tree_for_a_retrieval_draft(tmp_path):
  """The dynamic tree of specjax/t5x/configs/speculative.gin's comment, bound through gin
  for 'rest:DIR+suffix' (the demo task's bundled datastore: the tiny gin target's
  vocabulary)."""
  import gin  # pylint: disable=import-outside-toplevel
  from t5x import gin_utils  # pylint: disable=import-outside-toplevel
  tree_gin = tmp_path / 'tree.gin'
  tree_gin.write_text('from __gin__ import dynamic_registration\n'
                      'from specjax.core import tree\n'
                      'from specjax.t5x import model as speculative\n'
                      'speculative.from_model.tree = @tree.DynamicTree()\n'
                      'tree.DynamicTree.nodes = 8\n'
                      'tree.DynamicTree.depth = 4\n')
  spec = _spec('rest+suffix', datastore.DEFAULT_DATASTORES, 'demo_target')
  with gin.unlock_config():
    gin_utils.parse_gin_flags(
        [str(real_t5x.REPO)], ['tests/t5x/gin/tiny_target.gin', 'tests/t5x/gin/greedy.gin',
                               'specjax/t5x/configs/speculative.gin', str(tree_gin)],
        [f'DRAFT_KIND = {real_t5x.quoted(spec)}'], finalize_config=False)
    model = gin.query_parameter('%MODEL').scoped_configurable_fn()
  gin.clear_config()
  assert model.tree == DynamicTree(8, 4)
  assert model.draft_kind.name == 'rest+suffix'
