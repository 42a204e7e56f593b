"""T5X logical axis rules -> PartitionSpecs, replication of non-dividing dims, meshes, plans."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

import specjax
from specjax.core import api
from specjax.decode import parse_args
from specjax.job.decode_job import DecodeJob
from specjax.job.pair import job_mesh
from specjax.models.t5 import T5
from specjax.models.t5_config import T5_CONFIGS, t5_tiny, t5_tiny_draft
from specjax.speed import memory_plan
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules

MESH_2X4 = AbstractMesh((2, 4), ('data', 'model'))
MESH_1X8 = AbstractMesh((1, 8), ('data', 'model'))


def test_standard_rules_are_t5x_ones():
  rules = dict(axis_rules.STANDARD_RULES)
  assert rules['batch'] == 'data'
  for name in ('vocab', 'mlp', 'heads', 'joined_kv'):
    assert rules[name] == 'model'
  for name in ('embed', 'kv', 'length', 'relpos_buckets', 'layers'):
    assert rules[name] is None
  assert dict(axis_rules.PARAMS_2D_RULES)['embed'] == 'data'
  with pytest.raises(ValueError, match='parameter_partitioning_dims must be 1 or 2'):
    axis_rules.standard_logical_axis_rules(3)


@pytest.mark.parametrize('axes, shape, rules, spec', [
    (('vocab', 'embed'), (32128, 4096), axis_rules.STANDARD_RULES, P('model', None)),
    (('vocab', 'embed'), (32128, 4096), axis_rules.PARAMS_2D_RULES, P('model', 'data')),
    (('embed', 'mlp'), (512, 1024), axis_rules.STANDARD_RULES, P(None, 'model')),
    (('mlp', 'embed'), (10, 512), axis_rules.STANDARD_RULES, P(None, None)),  # 10 % 4 != 0
    (('heads', 'relpos_buckets'), (6, 32), axis_rules.STANDARD_RULES, P(None, None)),
    (('heads', 'relpos_buckets'), (64, 32), axis_rules.STANDARD_RULES, P('model', None)),
    (('batch', 'length', 'embed'), (3, 7, 8), axis_rules.STANDARD_RULES, P(None, None, None)),
    (('batch', 'length', 'embed'), (8, 7, 8), axis_rules.PARAMS_2D_RULES, P('data', None, None)),
    ((None, 'unknown'), (8, 8), axis_rules.STANDARD_RULES, P(None, None)),
])
def test_logical_to_spec(axes, shape, rules, spec):
  assert axis_rules.logical_to_spec(axes, shape, MESH_2X4, rules) == spec


def test_joined_kv_is_sharded_in_whole_heads_only():
  # t5_tiny_draft: 2 heads of 4 -> joined_kv 8 divides model=4 but its heads do not.
  assert axis_rules.logical_to_spec(('embed', 'joined_kv'), (8, 8), MESH_2X4) == P(None, 'model')
  specs = axis_rules.param_specs(T5(t5_tiny_draft), MESH_2X4)
  assert specs['encoder']['layers_0']['attention']['query']['kernel'] == P(None, None)
  assert specs['encoder']['layers_0']['attention']['out']['kernel'] == P(None, None)


def test_t5_small_draft_replicates_its_attention_on_8_but_not_on_2():
  small = T5(T5_CONFIGS['t5_small'])  # 6 heads
  specs = axis_rules.param_specs(small, MESH_1X8)
  layer = specs['decoder']['layers_0']
  assert layer['self_attention']['query']['kernel'] == P(None, None)
  assert specs['decoder']['relpos_bias']['rel_embedding'] == P(None, None)
  assert layer['mlp']['wi_0']['kernel'] == P(None, 'model')
  assert specs['decoder']['logits_dense']['kernel'] == P(None, 'model')
  specs = axis_rules.param_specs(small, AbstractMesh((4, 2), ('data', 'model')))
  assert specs['decoder']['layers_0']['self_attention']['query']['kernel'] == P(None, 'model')


def test_t5_xxl_shards_every_big_param_on_16():
  mesh = AbstractMesh((1, 16), ('data', 'model'))
  xxl = T5(T5_CONFIGS['t5_xxl'])
  shapes = axis_rules.abstract_params(xxl)
  specs = axis_rules.param_specs(xxl, mesh)
  is_spec = lambda s: isinstance(s, P)
  for x, spec in zip(jax.tree.leaves(shapes), jax.tree.leaves(specs, is_leaf=is_spec)):
    assert x.ndim == 1 or 'model' in spec, (x.shape, spec)  # only the norm scales replicate


def test_caches_and_encodings_shard_by_the_axes_the_model_declares():
  model = T5(t5_tiny)  # 4 heads
  cache = jax.eval_shape(lambda: model.init_cache(8, 10))
  specs = lambda tree, axes: jax.tree.map(lambda s: s.spec, axis_rules.axes_shardings(
      tree, axes, MESH_2X4))
  assert specs(cache, model.cache_axes())['layers_0']['k'] == P('data', 'model', None, None)
  params = axis_rules.abstract_params(model)
  encoded = jax.eval_shape(model.encode, params, jax.ShapeDtypeStruct((8, 5), jnp.int32))
  enc = specs(encoded, model.encoded_axes())
  assert enc['mask'] == P('data', None)
  assert enc['cross']['layers_1']['v'] == P('data', 'model', None, None)
  draft = T5(t5_tiny_draft)  # 2 heads do not divide model=4: batch only
  assert specs(jax.eval_shape(lambda: draft.init_cache(8, 10)), draft.cache_axes())[
      'layers_0']['k'] == P('data', None, None, None)
  # The axes are read, not guessed from the rank: a [B, T, N, H] layout shards its heads.
  assert specs(jax.ShapeDtypeStruct((8, 10, 4, 3), jnp.float32),
               ('batch', 'length', 'heads', 'kv')) == P('data', None, 'model', None)
  rows = axis_rules.batch_major_shardings(
      {'seq': jax.ShapeDtypeStruct((8, 10), jnp.int32),
       'odd': jax.ShapeDtypeStruct((3, 10), jnp.int32),
       'step': jax.ShapeDtypeStruct((), jnp.int32)}, MESH_2X4)
  assert (rows['seq'].spec, rows['odd'].spec, rows['step'].spec) == (P('data', None),
                                                                     P(None, None), P())


def test_mesh_spec_parsing_and_errors_are_one_line():
  assert mesh_lib.parse_mesh_spec('data=2,model=4') == (2, 4)
  assert mesh_lib.parse_mesh_spec('model=8') == (1, 8)
  for bad in ('data=2,modle=4', 'data=x', 'model=0'):
    with pytest.raises(ValueError, match='--mesh data=D,model=M') as err:
      mesh_lib.parse_mesh_spec(bad)
    assert '\n' not in str(err.value)
  with pytest.raises(ValueError, match=r'--num-partitions 2 does not divide the 1 devices'):
    mesh_lib.make_mesh(num_partitions=2)
  with pytest.raises(ValueError, match='pass exactly one of num_partitions'):
    mesh_lib.make_mesh()
  mesh = mesh_lib.make_mesh(num_partitions=1)
  assert mesh_lib.mesh_shape(mesh) == (1, 1)
  assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 2
  with pytest.raises(ValueError, match='batch 3 is not divisible .* --batch-size a multiple'):
    axis_rules.check_batch(3, MESH_2X4)


def test_cli_flags_reach_the_job():
  args = parse_args(['--mesh', 'data=1,model=1', '--parameter-partitioning-dims', '2'])
  assert (args.mesh, args.parameter_partitioning_dims, args.multihost) == ('data=1,model=1',
                                                                           2, False)
  assert parse_args(['--num-partitions', '4']).num_partitions == 4
  assert job_mesh(DecodeJob()) is None
  assert mesh_lib.mesh_shape(job_mesh(DecodeJob(mesh='data=1,model=1'))) == (1, 1)
  with pytest.raises(ValueError, match='either --num-partitions or --mesh'):
    job_mesh(DecodeJob(mesh='model=1', num_partitions=1))


@pytest.mark.parametrize('env, flag, expected', [
    ({}, False, False), ({}, True, True), ({'SPECJAX_MULTIHOST': '1'}, False, True),
    ({'TPU_WORKER_HOSTNAMES': 'localhost'}, False, False),
    ({'TPU_WORKER_HOSTNAMES': '10.0.0.2,10.0.0.3'}, False, True),
])
def test_distributed_init_only_when_the_env_says_so(env, flag, expected):
  assert mesh_lib.should_init_distributed(flag, env) is expected
  if not expected:
    assert mesh_lib.init_distributed(flag, env) is False


def test_one_device_mesh_decode_equals_unsharded_and_traces_once():
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  inputs = jnp.array([[3, 4, 5, 0], [6, 7, 0, 0]], jnp.int32)
  mesh = mesh_lib.make_mesh(shape=(1, 1))
  kwargs = dict(gamma=2, max_decode_len=8, sampling=specjax.SamplingConfig(temperature=1.0),
                rng=jax.random.PRNGKey(3))
  ref = specjax.speculative_decode(target, tp, draft, dp, inputs, **kwargs)
  decoder = api.decoder_of(target, draft, gamma=2, max_decode_len=8, rows=2, mesh=mesh,
                           sampling=kwargs['sampling'])
  before = decoder.traces
  for _ in range(2):
    out = specjax.speculative_decode(target, tp, draft, dp, inputs, mesh=mesh, **kwargs)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert decoder.traces == before + 1


def test_memory_plan_of_a_tiny_pair():
  mesh = mesh_lib.make_mesh(shape=(1, 1))
  row = memory_plan.plan_decode(mesh, t5_tiny, t5_tiny_draft, gamma=3, batch=2, input_len=5,
                                max_decode_len=6)
  n_params = sum(x.size for x in jax.tree.leaves(axis_rules.abstract_params(T5(t5_tiny))))
  n_params += sum(x.size for x in jax.tree.leaves(axis_rules.abstract_params(T5(t5_tiny_draft))))
  assert row.params == 4 * n_params  # float32
  # bfloat16 caches: target 2 layers x k,v x [2, 1+6+3+1, 4, 3], cross [2, 5, 4, 3] ...
  target_cache = 2 * 2 * (2 * 11 * 4 * 3 + 2 * 5 * 4 * 3) * 2
  draft_cache = 1 * 2 * (2 * 11 * 2 * 4 + 2 * 5 * 2 * 4) * 2
  assert row.caches == target_cache + draft_cache
  assert row.loop['argument'] >= row.params + row.caches and row.fits
  assert row.peak >= row.loop['argument']
  table = memory_plan.to_markdown([row])
  assert '| 1 | 1x1 | float32 | 2 | 6 |' in table and '| yes |' in table
  assert 'fits every planned B and L' in memory_plan.summarize([row])
  assert memory_plan.PlanRow.from_json(row.to_json()) == row  # the resumable .json rows
  assert memory_plan.plan_grid([mesh], [2], [6], ['float32'], done=[row.key], target=t5_tiny,
                               draft=t5_tiny_draft, gamma=3, input_len=5) == []
  bf16 = memory_plan.plan_decode(mesh, t5_tiny, t5_tiny_draft, gamma=3, batch=2,
                                 input_len=5, max_decode_len=6, param_dtype='bfloat16')
  assert bf16.params * 2 == row.params
