"""Scanned layers on 8 simulated CPU devices: a scanned T5 pair and a scanned Llama pair,
sharded over a 2x4 ('data', 'model') mesh, decode token for token as the unrolled pairs do
unsharded (greedy and T=1, chain and tree, refill); stacked params and caches shard over
heads and batch with the 'layers' axis whole."""
import dataclasses
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import specjax
from specjax.core.tree import DynamicTree
from specjax.models import scan
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.models.t5 import STACKS
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules

LLAMA = LMConfig(vocab_size=32, emb_dim=32, num_heads=8, num_kv_heads=4, head_dim=4,
                 num_layers=3, mlp_dim=64, eos_id=1, pad_id=0)
LLAMA_DRAFT = LLAMA.replace(emb_dim=16, num_heads=4, num_kv_heads=2, num_layers=1,
                            mlp_dim=32, tie_embeddings=True)


def _scanned(model, params, stacks):
  config = dataclasses.replace(model.config, scan_layers=True)
  return dataclasses.replace(model, config=config), scan.to_scanned(params, stacks)


@pytest.fixture(scope='module')
def llama_pair():
  target, draft = CausalLM(LLAMA), CausalLM(LLAMA_DRAFT)
  tp, dp = target.init(jax.random.PRNGKey(1)), draft.init(jax.random.PRNGKey(2))
  tp['lm_head']['kernel'] = tp['lm_head']['kernel'].at[:, 1].add(0.5)  # rows stop apart
  inputs = np.zeros((8, 6), np.int32)
  for i, n in enumerate((6, 2, 4, 1, 5, 3, 6, 2)):
    inputs[i, :n] = np.random.default_rng(i).integers(2, 32, n)
  return target, tp, draft, dp, inputs


@pytest.mark.parametrize('temperature', [0.0, 1.0])
@pytest.mark.parametrize('family', ['t5', 'llama'])
def test_scanned_on_a_mesh_equals_unrolled_unsharded(pair_and_inputs, llama_pair, family,
                                                     temperature):
  target, tp, draft, dp, inputs = pair_and_inputs if family == 't5' else llama_pair
  stacks = STACKS if family == 't5' else ((),)
  s_target, s_tp = _scanned(target, tp, stacks)
  s_draft, s_dp = _scanned(draft, dp, stacks)
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  for shape in (dict(gamma=3), dict(tree=DynamicTree(nodes=6, depth=3, top=2))):
    kw = dict(max_decode_len=10, slots=4, rng=jax.random.PRNGKey(3),
              sampling=specjax.SamplingConfig(temperature=temperature), **shape)
    ref = specjax.speculative_decode(target, tp, draft, dp, inputs, **kw)
    out = specjax.speculative_decode(s_target, s_tp, s_draft, s_dp, inputs, mesh=mesh, **kw)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))
    np.testing.assert_array_equal(np.asarray(out.lengths), np.asarray(ref.lengths))
  if temperature == 0:
    alone = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=10)
    np.testing.assert_array_equal(np.asarray(out.tokens), np.asarray(alone.tokens))


def test_stacked_params_and_cache_shard_over_heads_not_layers(llama_pair):
  target, tp, _, _, _ = llama_pair
  s_target, s_tp = _scanned(target, tp, ((),))
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  specs = axis_rules.param_specs(s_target, mesh)
  assert specs[scan.LAYERS]['attention']['query']['kernel'] == P(None, None, 'model', None)
  cache = jax.eval_shape(lambda: s_target.init_cache(8, 16))
  shardings = axis_rules.axes_shardings(cache, s_target.cache_axes(), mesh)
  assert shardings[scan.LAYERS]['k'].spec == P('data', None, 'model', None, None)
  placed = jax.device_put(s_tp, axis_rules.param_shardings(s_target, mesh))
  kernel = placed[scan.LAYERS]['attention']['query']['kernel']  # [L, D, N, H]
  assert kernel.addressable_shards[0].data.shape == (3, 32, 2, 4)
