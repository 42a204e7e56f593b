"""predict_batch_with_aux under T5X's own partitioner on 8 simulated CPU devices: the
params, the draft's included, are sharded by T5X's rules (a bigram table's and a datastore's
arrays, constants of the decode, replicated), and the decodes and scores equal the unsharded
ones. Its own pytest process (the device count is fixed when jax starts)."""
import functools
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import real_t5x  # pylint: disable=wrong-import-position

real_t5x.require_t5x()

import flax  # pylint: disable=wrong-import-position
import jax  # pylint: disable=wrong-import-position
import numpy as np  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position
from t5x import partitioning  # pylint: disable=wrong-import-position
from t5x import utils  # pylint: disable=wrong-import-position

import tiny_t5x  # pylint: disable=wrong-import-position

B, S, L = 8, 8, 10
RNG = jax.random.PRNGKey(4)
SETTINGS = {'greedy': (1, {}), 'sampled': (2, {'temperature': 1.0, 'topk': 0})}


class MeshPartitioner(partitioning.PjitPartitioner):
  """T5X's PjitPartitioner on the ('data', 'model') mesh num_partitions makes on GPUs
  (T5X's get_gpu_mesh): on CPU, T5X's default mesh puts every device on 'model' whatever
  num_partitions says."""

  def __init__(self, num_partitions: int):
    super().__init__(num_partitions=num_partitions)
    self.num_model = num_partitions

  @functools.cached_property
  def mesh(self):
    return partitioning.get_gpu_mesh(self.num_model)


@pytest.fixture(scope='module')
def setup():
  assert jax.device_count() == 8
  model = tiny_t5x.speculative_model()
  params = flax.core.freeze(tiny_t5x.params(model, seed=5))  # as T5X holds them
  return model, params, tiny_t5x.batch(B, S, L, seed=6)


def _predict(model, setting):
  num_decodes, decoder_params = SETTINGS[setting]
  return functools.partial(model.predict_batch_with_aux, num_decodes=num_decodes,
                           return_all_decodes=True, decoder_params=decoder_params)


@pytest.fixture(scope='module')
def unsharded(setup):
  model, params, batch = setup
  return {s: jax.device_get(jax.jit(_predict(model, s))(params, batch, RNG)) for s in SETTINGS}


def _placed(model, params, partitioner):
  """(the params' T5X partition axes, the params placed by them)."""
  shapes, types = tiny_t5x.shapes(B, S, L)
  init = utils.TrainStateInitializer(None, model.get_initial_variables, shapes, partitioner,
                                     types)
  axes = init.train_state_axes.params
  return axes, partitioner.partition(lambda p: p, in_axis_resources=None,
                                     out_axis_resources=axes)(params)


def _assert_partitioned_equal(model, setting, partitioner, axes, placed, batch, ref):
  """The partitioned predict's (decodes, aux), asserted to equal `ref`'s decodes and target
  calls (ref: the unsharded (decodes, aux))."""
  predict = partitioner.partition(
      _predict(model, setting), in_axis_resources=(axes, partitioner.data_partition_spec, None),
      out_axis_resources=None)
  decodes, aux = jax.device_get(predict(placed, batch, RNG))
  np.testing.assert_array_equal(decodes, ref[0])
  np.testing.assert_array_equal(aux['target_calls'], ref[1]['target_calls'])
  return decodes, aux


@pytest.mark.parametrize('num_partitions', [2, 4])
@pytest.mark.parametrize('setting', list(SETTINGS))
def test_partitioned_equals_unsharded(setup, unsharded, num_partitions, setting):
  model, params, batch = setup
  partitioner = MeshPartitioner(num_partitions)
  assert dict(partitioner.mesh.shape) == {'data': 8 // num_partitions, 'model': num_partitions}
  axes, placed = _placed(model, params, partitioner)
  draft_logits = placed['draft']['decoder']['logits_dense']['kernel']
  assert 'model' in tuple(draft_logits.sharding.spec)  # the draft is sharded by T5X's rules
  assert len(draft_logits.sharding.device_set) == 8
  decodes, aux = _assert_partitioned_equal(model, setting, partitioner, axes, placed, batch,
                                           unsharded[setting])
  np.testing.assert_allclose(aux['scores'], unsharded[setting][1]['scores'], atol=1e-5)
  assert decodes.shape == (B, SETTINGS[setting][0], L)


@pytest.fixture(scope='module')
def heads_setup(setup, tmp_path_factory):
  """The tiny target's params with an EAGLE head (from its last layer) and two random
  Medusa heads, written as train_draft writes them: {kind: (model, params)}."""
  from specjax.drafting import heads_io  # pylint: disable=import-outside-toplevel
  from specjax.proposers.eagle import EagleHead  # pylint: disable=import-outside-toplevel
  from specjax.proposers.medusa import MedusaHeads  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  from specjax.t5x import restore  # pylint: disable=import-outside-toplevel
  model, params, _ = setup
  target_params = {k: v for k, v in flax.core.unfreeze(params).items() if k != 'draft'}
  target, _ = model.specjax_models(params)
  root = tmp_path_factory.mktemp('heads')
  sizes = {'target': 'tiny', 'hidden': target.config.emb_dim,
           'vocab_size': target.vocab_size}
  written = {
      'eagle': (EagleHead(target).from_target(target_params), {'layers': 1}),
      'medusa': (MedusaHeads(target, 2).init(jax.random.PRNGKey(1), scale=1.0),
                 {'num_heads': 2})}
  out = {}
  for kind, (heads, extra) in written.items():
    path = heads_io.save_heads(str(root / kind), heads, {'kind': kind, **sizes, **extra})
    built = speculative.SpeculativeEncoderDecoderModel(
        tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_kind=kind,
        draft_checkpoint_path=path, gamma=2)
    out[kind] = built, flax.core.freeze({**target_params,
                                         'draft': restore.read_heads(path)[1]})
  return out


@pytest.mark.parametrize('setting', list(SETTINGS))
@pytest.mark.parametrize('kind, sharded', [('eagle', ('layer', 'mlp', 'wo', 'kernel')),
                                           ('medusa', ('w',))])
def test_partitioned_heads_equal_unsharded(heads_setup, setup, kind, sharded, setting):
  """Trained heads (DRAFT_KIND 'eagle', 'medusa') under T5X's partitioner: their params,
  whose logical axes include None, are sharded by T5X's rules, and the decodes equal the
  unsharded ones."""
  model, params = heads_setup[kind]
  batch = setup[2]
  ref_decodes, ref_aux = jax.device_get(jax.jit(_predict(model, setting))(params, batch, RNG))
  partitioner = MeshPartitioner(2)
  axes, placed = _placed(model, params, partitioner)
  leaf = placed['draft']
  for key in sharded:
    leaf = leaf[key]
  assert 'model' in tuple(leaf.sharding.spec)  # sharded by T5X's rules
  _assert_partitioned_equal(model, setting, partitioner, axes, placed, batch,
                            (ref_decodes, ref_aux))


@pytest.mark.parametrize('setting', list(SETTINGS))
@pytest.mark.parametrize('kind', ['rest+suffix', 'lookahead:2,2,2', 'bigram'])
def test_partitioned_drafts_with_no_model_equal_unsharded(setup, tmp_path, kind, setting):
  """The drafts with no draft model (DRAFT_KIND 'rest:DIR+suffix', 'lookahead:W,N,G',
  'bigram:TABLE') under T5X's partitioner: nothing is added to the params tree, the
  datastore's and the table's arrays reach the partitioned decode as replicated constants,
  lookahead's per-row state is split with the rows, and the decodes equal the unsharded
  ones."""
  from specjax import datastore  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  _, params, batch = setup
  target_params = flax.core.freeze({k: v for k, v in flax.core.unfreeze(params).items()
                                    if k != 'draft'})
  rng = np.random.default_rng(8)
  documents = [rng.choice([11, 19, 23, 31], 12).tolist() + [tiny_t5x.EOS] for _ in range(64)]
  if kind.startswith('rest'):
    datastore.write(datastore.build(documents, tiny_t5x.VOCAB_SIZE, '0' * 64),
                    str(tmp_path / 'store'))
    kind = f'rest:{tmp_path / "store"}+suffix'
  if kind == 'bigram':
    from specjax.proposers import bigram  # pylint: disable=import-outside-toplevel
    counts = bigram.counts_of(documents, tiny_t5x.VOCAB_SIZE)
    bigram.save_table(str(tmp_path / 'table.npz'), bigram.table_from_counts(counts, 4))
    kind = f'bigram:{tmp_path / "table.npz"}'
  model = speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_kind=kind, gamma=2)
  ref_decodes, ref_aux = jax.device_get(jax.jit(_predict(model, setting))(target_params,
                                                                          batch, RNG))
  partitioner = MeshPartitioner(2)
  axes, placed = _placed(model, target_params, partitioner)
  assert 'draft' not in placed
  _assert_partitioned_equal(model, setting, partitioner, axes, placed, batch,
                            (ref_decodes, ref_aux))


@pytest.mark.parametrize('setting', list(SETTINGS))
@pytest.mark.parametrize('kind', ['cascade:model/suffix/2/2', 'cascade:model:1,suffix',
                                  'cascade:model/bigram:TABLE/2/2'])
def test_partitioned_cascades_equal_unsharded(setup, tmp_path, kind, setting):
  """Cascades (DRAFT_KIND 'cascade:model/CHEAP/K/C', 'cascade:model:K,CHEAP') under T5X's
  partitioner: the draft model's params are sharded by T5X's rules as for DRAFT_KIND
  'model', the capped cascade's per-row counts are split with the rows, a bigram table
  (CHEAP 'bigram:TABLE') reaches the partitioned decode as replicated constants beside the
  sharded draft, and the decodes equal the unsharded ones."""
  from specjax.proposers import bigram  # pylint: disable=import-outside-toplevel
  from specjax.t5x import model as speculative  # pylint: disable=import-outside-toplevel
  _, params, batch = setup
  if 'TABLE' in kind:
    rng = np.random.default_rng(9)
    documents = [rng.choice([11, 19, 23, 31], 12).tolist() + [tiny_t5x.EOS] for _ in range(64)]
    bigram.save_table(str(tmp_path / 'table.npz'),
                      bigram.table_of(documents, tiny_t5x.VOCAB_SIZE, 4))
    kind = kind.replace('TABLE', str(tmp_path / 'table.npz'))
  model = speculative.SpeculativeEncoderDecoderModel(
      tiny_t5x.TARGET, tiny_t5x.VOCAB, tiny_t5x.VOCAB, None, draft_module=tiny_t5x.DRAFT,
      draft_kind=kind, gamma=3)
  ref_decodes, ref_aux = jax.device_get(jax.jit(_predict(model, setting))(params, batch, RNG))
  partitioner = MeshPartitioner(2)
  axes, placed = _placed(model, params, partitioner)
  draft_logits = placed['draft']['decoder']['logits_dense']['kernel']
  assert 'model' in tuple(draft_logits.sharding.spec)
  _assert_partitioned_equal(model, setting, partitioner, axes, placed, batch,
                            (ref_decodes, ref_aux))
