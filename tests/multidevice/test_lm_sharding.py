"""A Llama pair on 8 simulated CPU devices: sharded decodes equal unsharded ones, and params
and KV caches are sharded over heads and KV heads as the rules say."""
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import specjax
from specjax.core import api
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules
import hf_for_tests

GAMMA, MAX_LEN = 3, 10
RNG = jax.random.PRNGKey(3)
# Target: 8 query heads over 4 KV heads; draft: 4 over 2 (2x4: its KV heads stay whole).
TARGET = LMConfig(vocab_size=32, emb_dim=32, num_heads=8, num_kv_heads=4, head_dim=4,
                  num_layers=2, mlp_dim=64, rope_type='linear', rope_factor=2.0, eos_id=1,
                  pad_id=0)
DRAFT = TARGET.replace(emb_dim=16, num_heads=4, num_kv_heads=2, num_layers=1, mlp_dim=32,
                       tie_embeddings=True)


@pytest.fixture(scope='module')
def pair_and_inputs():
  assert jax.device_count() == 8
  target, draft = CausalLM(TARGET), CausalLM(DRAFT)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  tp['lm_head']['kernel'] = tp['lm_head']['kernel'].at[:, 1].add(0.5)  # rows stop apart
  inputs = np.zeros((8, 6), np.int32)
  for i, n in enumerate((6, 2, 4, 1, 5, 3, 6, 2)):
    inputs[i, :n] = np.random.default_rng(i).integers(2, 32, n)
  return target, tp, draft, dp, inputs


@pytest.fixture(scope='module')
def references(pair_and_inputs):
  target, tp, draft, dp, inputs = pair_and_inputs
  return {t: specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                        max_decode_len=MAX_LEN, rng=RNG,
                                        sampling=specjax.SamplingConfig(temperature=t))
          for t in (0.0, 1.0)}


@pytest.mark.parametrize('shape', [(1, 8), (2, 4)])
@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_sharded_llama_pair_equals_unsharded(pair_and_inputs, references, shape, temperature):
  target, tp, draft, dp, inputs = pair_and_inputs
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA,
                                   max_decode_len=MAX_LEN, rng=RNG,
                                   mesh=mesh_lib.make_mesh(shape=shape),
                                   sampling=specjax.SamplingConfig(temperature=temperature))
  ref = references[temperature]
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.stats.accepted, ref.stats.accepted)
  np.testing.assert_allclose(out.stats.beta_sum, ref.stats.beta_sum, rtol=1e-5)
  assert len(set(np.asarray(ref.lengths).tolist())) > 1
  assert 0 < ref.stats.acceptance_rate < 1


def test_an_eagle_head_of_the_llama_target_on_a_mesh_equals_unsharded(pair_and_inputs):
  """The head is one of the target's layers (its KV heads, its cache and feature buffer
  sharded like the target's): a dynamic tree with refill on a 2x4 mesh, sampled and greedy
  rows in one run, equals the unsharded decode, and its greedy rows are the target's."""
  from specjax.core.tree import DynamicTree  # pylint: disable=import-outside-toplevel
  from specjax.proposers.eagle import EagleHead  # pylint: disable=import-outside-toplevel
  target, tp, _, _, inputs = pair_and_inputs
  head = EagleHead(target)
  rows = [specjax.SamplingConfig(temperature=t) for t in (0.0, 1.0) * 4]
  kw = dict(tree=DynamicTree(6, 3, 2), max_decode_len=MAX_LEN, rng=RNG, sampling=rows)
  ref = specjax.speculative_decode(target, tp, head, head.from_target(tp), inputs, slots=4,
                                   **kw)
  out = specjax.speculative_decode(target, tp, head, head.from_target(tp), inputs, slots=4,
                                   mesh=mesh_lib.make_mesh(shape=(2, 4)), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.stats.accepted, ref.stats.accepted)
  assert int(ref.stats.accepted.sum()) > 0
  alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(np.asarray(out.tokens)[::2], np.asarray(alone.tokens)[::2])


def test_params_and_kv_caches_shard_over_heads_and_kv_heads(pair_and_inputs):
  target, tp, draft, dp, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  specs = axis_rules.param_specs(target, mesh)
  att = specs['layers_0']['attention']
  assert att['query']['kernel'] == P(None, 'model', None)  # [D, N=8, H]
  assert att['key']['kernel'] == P(None, 'model', None)  # [D, M=4, H]
  assert att['out']['kernel'] == P('model', None, None)
  assert specs['layers_0']['mlp']['gate']['kernel'] == P(None, 'model')
  assert specs['embed']['embedding'] == P('model', None)
  assert specs['lm_head']['kernel'] == P(None, 'model')
  assert axis_rules.param_specs(draft, mesh)['layers_0']['attention']['key']['kernel'] == P(
      None, None, None)  # 2 KV heads do not split 4 ways
  decoder = api.decoder_of(target, draft, gamma=GAMMA, max_decode_len=MAX_LEN, rows=8,
                           sampling=specjax.SamplingConfig(), mesh=mesh)
  sampling = specjax.SamplingParams.of(specjax.SamplingConfig(), 8)
  programs, args = decoder.placed(tp, dp, inputs, 8, np.arange(8), RNG, sampling)
  state = programs.start(*args).state
  k = state.target_cache[0]['k']  # [B, M=4, H, T]
  assert k.sharding.spec == P('data', 'model', None, None)
  assert {s.data.shape[:2] for s in k.addressable_shards} == {(4, 1)}
  assert state.draft_cache[0]['v'].sharding.spec == P('data', None, None, None)


def test_a_llama_directory_loads_onto_the_mesh_as_the_rules_say(tmp_path):
  """--target DIR --mesh data=2,model=4: the config comes with the checkpoint, the params
  are then placed by the rules (query and KV heads over 'model')."""
  hf_for_tests.require('transformers')
  from lm_for_tests import hf_model, write_tokenizer_json  # pylint: disable=import-outside-toplevel
  from specjax.job import decode_job, pair  # pylint: disable=import-outside-toplevel
  hf_model('llama', num_attention_heads=8, num_key_value_heads=4).save_pretrained(
      tmp_path / 'target')
  write_tokenizer_json(tmp_path / 'target' / 'tokenizer.json')
  job = decode_job.DecodeJob(target=str(tmp_path / 'target'), draft=str(tmp_path / 'target'),
                             mesh='data=2,model=4')
  mesh = pair.job_mesh(job)
  target, tp, _, dp, _ = pair.load_pair(job, mesh)
  att = tp['layers_0']['attention']
  assert att['query']['kernel'].sharding.spec == P(None, 'model', None)  # [D, N=8, H=4]
  assert att['key']['kernel'].sharding.spec == P(None, 'model', None)  # [D, M=4, H=4]
  assert tp['lm_head']['kernel'].sharding.spec == P(None, 'model')
  assert target.config.num_kv_heads == 4
