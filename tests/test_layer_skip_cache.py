"""Layer-skip drafts in the target's own cache: no cache of its own, nothing written below
the rows' last positions (where the target's K/V of the committed tokens are), the
committed K/V read; greedy output stays the target's with a draft threshold and a dynamic
tree, the two paths the other layer-skip tests leave out."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import loop, model_proposer, proposal
from specjax.core.sampling import SamplingConfig, SamplingParams
from specjax.core.state import LoopConfig
from specjax.core.tree import DynamicTree, TreeShape
from specjax.proposers.layer_skip import LayerSkip, first_layers, truncated
from test_tree_decode import _demo_lines

B, W, M = 2, 24, 2  # rows, cache width, the draft's layers (of the demo target's 4)
POS = np.array([5, 9], np.int32)  # each row's last token


def _cache(target):
  """A target cache of random K/V (not what any model computes): a write shows at once."""
  shapes = target.init_cache(B, W)
  leaves, treedef = jax.tree.flatten(shapes)
  keys = jax.random.split(jax.random.PRNGKey(5), len(leaves))
  return jax.tree.unflatten(treedef, [jax.random.normal(k, x.shape, x.dtype)
                                      for k, x in zip(keys, leaves)])


def _args(tree):
  """propose's (seq, pos, keys, sampling, cfg) after its params, encoding and state:
  greedy, a chain of 3 or the tree `tree` ('2,1' or a DynamicTree)."""
  seq = jnp.asarray(np.random.default_rng(0).integers(2, 50, (B, W)), jnp.int32)
  cfg = LoopConfig(gamma=3, max_decode_len=8,
                   tree=TreeShape.parse(tree) if isinstance(tree, str) else tree)
  return seq, jnp.asarray(POS), None, SamplingParams.of(SamplingConfig(), B), cfg


def _below_pos(leaf):  # [B, N, H, T] -> each row's slots before its POS
  return [np.asarray(leaf[b, ..., :POS[b]]) for b in range(B)]


@pytest.mark.parametrize('tree', [None, '2,1', DynamicTree(6, 3, 2)],
                         ids=['chain3', 'static2-1', 'dynamic6-3-2'])
def test_the_draft_writes_only_at_and_past_each_rows_last_position(demo_pair, tree):
  target, tp, _, _ = demo_pair
  skip = LayerSkip(target, M)
  assert proposal.shares_cache(skip) and jax.tree.leaves(skip.init_cache(B, W)) == []
  enc = {'target': target.encode(tp, jnp.ones((B, 6), jnp.int32)), 'own': {}}
  cache = _cache(target)
  out = skip.propose({'target': tp, 'own': {}}, enc, cache, *_args(tree)).state
  assert set(out) == set(cache)
  for name in cache:
    for kv in ('k', 'v'):
      before, after = cache[name][kv], out[name][kv]
      for b, (x, y) in enumerate(zip(_below_pos(before), _below_pos(after))):
        np.testing.assert_array_equal(x, y, err_msg=f'{name}.{kv} row {b}')
      written = np.asarray(before[np.arange(B), ..., POS] != after[np.arange(B), ..., POS])
      if int(name.split('_')[1]) < M:  # the draft's layers: its K/V of the last token
        assert written.all(), name
      else:  # the target's other layers: untouched
        assert not written.any(), name
  # Negative control: the same cut model catching up as a draft model does (the pair at
  # pos - 1 and pos) writes into the committed slots, and the check above sees it.
  catching_up = model_proposer.ModelProposer(truncated(target, M))
  head = catching_up.propose(tp, enc['target'], first_layers(cache, catching_up.cache_axes()),
                             *_args(tree)).state
  changed = [not np.array_equal(x, y) for x, y in zip(_below_pos(cache['layers_0']['k']),
                                                      _below_pos(head['layers_0']['k']))]
  assert all(changed)


def test_the_draft_reads_the_committed_keys_and_values_of_the_target(demo_pair):
  """Its second layer attends over the committed slots: other K/V there, other K/V of its
  own at the last position (its first layer's do not depend on them)."""
  target, tp, _, _ = demo_pair
  skip = LayerSkip(target, M)
  enc = {'target': target.encode(tp, jnp.ones((B, 6), jnp.int32)), 'own': {}}
  params = {'target': tp, 'own': {}}
  one, other = _cache(target), jax.tree.map(lambda x: x * 0.5, _cache(target))
  a, b = (skip.propose(params, enc, c, *_args(None)).state for c in (one, other))
  at_pos = lambda c, name: np.asarray(c[name]['k'][np.arange(B), ..., POS])
  np.testing.assert_array_equal(at_pos(a, 'layers_0'), at_pos(b, 'layers_0'))
  assert not np.allclose(at_pos(a, 'layers_1'), at_pos(b, 'layers_1'))


def test_a_decode_keeps_no_draft_state(demo_pair):
  target, tp, _, _ = demo_pair
  skip = LayerSkip(target, M)
  inputs = jnp.ones((B, 6), jnp.int32)
  run = jax.eval_shape(lambda: loop.start(
      target, tp, skip, {}, inputs, jnp.int32(B), jnp.arange(B), jax.random.PRNGKey(0),
      SamplingParams.of(SamplingConfig(), B), LoopConfig(gamma=3, max_decode_len=8),
      B))
  assert jax.tree.leaves(run.state.draft_cache) == []
  assert len(jax.tree.leaves(run.state.target_cache)) == 2 * target.config.num_decoder_layers


@pytest.mark.parametrize('kw', [dict(gamma=4, draft_threshold=0.6),
                                dict(gamma=None, tree=DynamicTree(6, 3, 2))],
                         ids=['chain4-threshold', 'dynamic6-3-2'])
def test_greedy_layer_skip_with_a_threshold_or_a_dynamic_tree_is_the_targets(demo_pair, kw):
  target, tp, _, _ = demo_pair
  inputs = _demo_lines(8)
  ref = specjax.autoregressive_decode(target, tp, inputs, max_decode_len=20)
  out = specjax.speculative_decode(target, tp, LayerSkip(target, M), {}, inputs,
                                   max_decode_len=20, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0
