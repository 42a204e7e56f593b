"""Sharded decode on 8 simulated CPU devices: equal to unsharded, sharded as the rules say."""
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import specjax
from specjax import checkpoints
from specjax.core import decoding, sharded
from specjax.job import decode_job
from specjax.parallel import sharding
from specjax.core.state import LoopConfig
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny, t5_tiny_draft

MESHES = [(1, 8), (2, 4), (8, 1)]
GAMMA, MAX_LEN = 3, 12
RNG = jax.random.PRNGKey(5)


@pytest.fixture(scope='module')
def pair():
  assert jax.device_count() == 8
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  inputs = np.random.default_rng(0).integers(2, 32, (8, 6)).astype(np.int32)
  inputs[:, 4:] = 0
  inputs[1, 2:] = 0  # rows of different lengths
  return target, tp, draft, dp, inputs


@pytest.fixture(scope='module')
def references(pair):
  target, tp, draft, dp, inputs = pair
  refs = {}
  for temperature in (0.0, 1.0):
    refs[temperature] = specjax.speculative_decode(
        target, tp, draft, dp, inputs, gamma=GAMMA, max_decode_len=MAX_LEN, rng=RNG,
        sampling=specjax.SamplingConfig(temperature=temperature))
  return refs


@pytest.mark.parametrize('shape', MESHES)
@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_sharded_speculative_equals_unsharded(pair, references, shape, temperature):
  target, tp, draft, dp, inputs = pair
  mesh = sharding.make_mesh(shape=shape)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                   max_decode_len=MAX_LEN, rng=RNG, mesh=mesh,
                                   sampling=specjax.SamplingConfig(temperature=temperature))
  ref = references[temperature]
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.stats.accepted, ref.stats.accepted)
  np.testing.assert_allclose(out.stats.beta_sum, ref.stats.beta_sum, rtol=1e-5)
  assert out.tokens.sharding.is_fully_replicated  # readable on every host
  if temperature == 0.0:
    assert len(set(np.asarray(ref.lengths).tolist())) > 1 or np.any(ref.stats.accepted)


def test_sharded_autoregressive_equals_unsharded_and_traces_once(pair):
  target, tp, _, _, inputs = pair
  mesh = sharding.make_mesh(shape=(2, 4))
  kwargs = dict(max_decode_len=MAX_LEN, rng=RNG)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kwargs)
  before = decoding.TRACE_COUNTS['sharded_autoregressive']
  out = specjax.autoregressive_decode(target, tp, inputs, mesh=mesh, **kwargs)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  other = specjax.autoregressive_decode(target, tp, inputs[::-1].copy(), mesh=mesh, **kwargs)
  np.testing.assert_array_equal(other.tokens, np.asarray(ref.tokens)[::-1])
  assert decoding.TRACE_COUNTS['sharded_autoregressive'] == before + 1


def test_params_are_sharded_as_the_rules_say(tmp_path):
  mesh = sharding.make_mesh(shape=(2, 4))
  shardings = sharding.param_shardings(T5(t5_tiny), mesh)
  _, tp = checkpoints.load_model('t5_tiny', shardings=shardings)  # random init path
  enc = tp['encoder']['layers_0']
  assert tp['token_embedder']['embedding'].sharding.spec == P('model', None)  # [V, D]
  assert enc['attention']['query']['kernel'].sharding.spec == P(None, 'model')  # 4 heads / 4
  assert enc['attention']['out']['kernel'].sharding.spec == P('model', None)
  assert enc['mlp']['wi_0']['kernel'].sharding.spec == P(None, 'model')
  assert tp['decoder']['relpos_bias']['rel_embedding'].sharding.spec == P('model', None)
  assert tp['decoder']['decoder_norm']['scale'].sharding.spec == P(None)
  query = enc['attention']['query']['kernel']
  assert {s.data.shape for s in query.addressable_shards} == {(8, 3)}  # one head each
  # The draft's 2 heads do not divide model=4: its attention is replicated, the rest not.
  path = checkpoints.save_params(tmp_path / 'draft', T5(t5_tiny_draft).init(
      jax.random.PRNGKey(2)), t5_tiny_draft)
  _, dp = checkpoints.load_model('t5_tiny_draft', path, shardings=sharding.param_shardings(
      T5(t5_tiny_draft), mesh))
  layer = dp['decoder']['layers_0']
  assert layer['self_attention']['query']['kernel'].sharding.spec == P(None, None)
  assert dp['decoder']['relpos_bias']['rel_embedding'].sharding.spec == P(None, None)
  assert layer['mlp']['wi_0']['kernel'].sharding.spec == P(None, 'model')
  # 2-D params: embed over data as well.
  specs = sharding.param_specs(T5(t5_tiny), mesh, sharding.PARAMS_2D_RULES)
  assert specs['token_embedder']['embedding'] == P('model', 'data')
  # model=8 divides neither model's heads: both attentions replicated.
  specs = sharding.param_specs(T5(t5_tiny), sharding.make_mesh(shape=(1, 8)))
  assert specs['encoder']['layers_0']['attention']['query']['kernel'] == P(None, None)
  assert specs['token_embedder']['embedding'] == P('model', None)  # V=32 over 8


def test_caches_and_cross_kv_are_sharded_batch_over_data_heads_over_model(pair):
  target, tp, draft, dp, inputs = pair
  mesh = sharding.make_mesh(shape=(2, 4))
  cfg = LoopConfig(gamma=GAMMA, max_decode_len=MAX_LEN, sampling=specjax.SamplingConfig())
  dec = sharded.build(mesh, target, draft, cfg, 8, inputs.shape[1])
  tp, dp = jax.device_put(tp, dec.target_shardings), jax.device_put(dp, dec.draft_shardings)
  x = jax.device_put(inputs, dec.inputs_sharding)
  state, target_enc, draft_enc = dec.prefill(tp, dp, x, jax.device_put(RNG, dec.rng_sharding))
  k = state.target_cache['layers_0']['k']  # [B, N=4, H, T]
  assert k.sharding.spec == P('data', 'model', None, None)
  assert {s.data.shape[:2] for s in k.addressable_shards} == {(4, 1)}
  assert target_enc['cross']['layers_1']['v'].sharding.spec == P('data', 'model', None, None)
  assert target_enc['mask'].sharding.spec == P('data', None)
  # The draft has 2 heads: its caches shard the batch only.
  assert state.draft_cache['layers_0']['k'].sharding.spec == P('data', None, None, None)
  assert draft_enc['cross']['layers_0']['k'].sharding.spec == P('data', None, None, None)
  assert state.seq.sharding.spec == P('data', None)
  assert state.rng.sharding.is_fully_replicated
  out, final = dec.loop(tp, dp, target_enc, draft_enc, state)
  assert state.target_cache['layers_0']['k'].is_deleted()  # the state was donated
  assert final.target_cache['layers_0']['k'].sharding.spec == P('data', 'model', None, None)
  assert out.tokens.shape == (8, MAX_LEN)


def test_batch_not_divisible_by_data_is_refused(pair):
  target, tp, draft, dp, inputs = pair
  mesh = sharding.make_mesh(shape=(4, 2))
  with pytest.raises(ValueError, match=r'batch 6 .* data axis \(4\); pass --batch-size a '
                     r'multiple of 4') as err:
    specjax.speculative_decode(target, tp, draft, dp, inputs[:6], gamma=GAMMA,
                               max_decode_len=MAX_LEN, mesh=mesh)
  assert '\n' not in str(err.value)
  # The CLI job refuses before loading anything.
  with pytest.raises(ValueError, match='--batch-size a multiple of 4'):
    decode_job.run(decode_job.DecodeJob(target='t5_xxl', draft='t5_small', batch_size=6,
                          mesh='data=4,model=2'))
  with pytest.raises(ValueError, match='--num-partitions 3 does not divide the 8 devices'):
    decode_job.job_mesh(decode_job.DecodeJob(num_partitions=3))
  assert sharding.mesh_shape(decode_job.job_mesh(decode_job.DecodeJob(num_partitions=2))) == (4, 2)


def test_mesh_from_spec_uses_a_prefix_of_the_devices():
  mesh = sharding.mesh_from_spec('data=2,model=2')
  assert sharding.mesh_shape(mesh) == (2, 2) and mesh.devices.size == 4
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
  with pytest.raises(ValueError, match='needs 16 devices but 8 are available'):
    sharding.mesh_from_spec('data=2,model=8')
