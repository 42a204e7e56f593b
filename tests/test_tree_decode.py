"""Token trees through the whole decode: greedy output is the target's own, token for token,
for static and dynamic trees, on both bundled pairs' test lines (with refill), on T5 v1.0
and v1.1 shapes, and on Llama and GPT-2 pairs; a tree decode whose cache is not compacted
is not (so the comparison can fail)."""
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import decoder, tree
from specjax.core.sampling import SamplingMode, SamplingParams
from specjax.core.state import LoopConfig
from test_lm_speculative import _pair as lm_pair
from test_lm_speculative import _prompts

TREES = ['3,2,1', tree.DynamicTree(8, 4, 2)]
TREE_IDS = ['static3-2-1', 'dynamic8-4-2']


def _test_lines(prefix: str, count: int):
  """The first test lines of a bundled pair ('demo_' or 'manpages_'), tokenized and padded."""
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import BUNDLED  # pylint: disable=import-outside-toplevel
  from specjax.job.inputs import pad_to_bucket, tokenize  # pylint: disable=import-outside-toplevel
  bundled = BUNDLED[prefix]
  rows = [json.loads(line) for line in pathlib.Path(bundled.test).open()][:count]
  texts = [bundled.prefix + r['en'] if 'en' in r else r['inputs'] for r in rows]
  return pad_to_bucket(tokenize(checkpoints.load_vocab(bundled.vocab), texts, 64, True)[0])


def _demo_lines(count=24):
  return _test_lines('demo_', count)


@pytest.mark.parametrize('shape', TREES, ids=TREE_IDS)
def test_greedy_tree_decode_is_the_targets_on_demo_test_lines(demo_pair, shape):
  target, tp, draft, dp = demo_pair
  inputs = _demo_lines()
  kw = dict(max_decode_len=20, slots=8)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  stats = out.stats
  assert int(stats.accepted.sum()) > 0
  # every call verified N nodes; tokens per call counts the output only
  np.testing.assert_array_equal(stats.drafted, stats.target_calls * tree.TreeShape.parse(
      shape).num_nodes if isinstance(shape, str) else stats.target_calls * shape.nodes)
  assert 1.0 < stats.tokens_per_call <= (4 if isinstance(shape, str) else 5)


def test_greedy_tree_decode_is_the_targets_on_manpages_test_lines(manpages_pair):
  target, tp, draft, dp = manpages_pair
  inputs = _test_lines('manpages_', 8)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree='2,2,1', **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)


@pytest.mark.parametrize('family, shape', [('llama', TREES[0]), ('gpt2', TREES[1])],
                         ids=['llama-' + TREE_IDS[0], 'gpt2-' + TREE_IDS[1]])
def test_greedy_tree_decode_is_the_targets_for_decoder_only_pairs(family, shape):
  target, tp, draft, dp = lm_pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = _prompts(32)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  refill = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=shape, slots=2, **kw)
  np.testing.assert_array_equal(refill.tokens, ref.tokens)


def test_tree_decode_of_tiny_t5_with_refill_and_a_draft_equal_to_the_target(tiny_t5_pair):
  """A draft equal to the target accepts every depth of a chain-shaped path: D + 1 tokens
  per call until the rows end; the output is the target's."""
  target, tp, _, _ = tiny_t5_pair(eos_bias=2.0)
  inputs = np.random.default_rng(0).integers(2, target.vocab_size, (6, 7)).astype(np.int32)
  kw = dict(max_decode_len=12, slots=3)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, target, tp, inputs, tree='2,1,1', **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  stats = out.stats
  full_calls = np.asarray(stats.generated) // 4  # calls that could take all 3 + 1 tokens
  assert np.all(np.asarray(stats.accepted) >= 3 * full_calls)


def test_without_the_cache_compaction_the_comparison_fails(demo_pair, monkeypatch,
                                                            fresh_programs):
  """The negative control: a tree decode that leaves the accepted path where the tree
  put it (siblings' slots) reads wrong keys, and the output is no longer the target's."""
  target, tp, draft, dp = demo_pair
  inputs = _demo_lines(8)
  kw = dict(max_decode_len=20)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  monkeypatch.setattr(tree, 'compact', lambda cache, *args, **kwargs: cache)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree='3,3', **kw)
  assert not np.array_equal(np.asarray(out.tokens), np.asarray(ref.tokens))


@pytest.mark.parametrize('greedy', [True, False], ids=['greedy', 'sampled'])
def test_a_dynamic_trees_depths_are_one_draft_call_in_the_program(tiny_t5_pair, greedy):
  """The depths of a dynamic tree are one loop body: three more depths add less to the
  whole decode's program than one more draft call does. A static tree, whose levels differ
  in width, is unrolled level by level: its program grows by a draft call per level (the
  measure can tell; the depth loop unrolled grew by 550 lines greedy, 997 sampled)."""
  target, tp, draft, dp = tiny_t5_pair()

  def size(shape, depth: int) -> int:
    """Lines of the whole decode's program (StableHLO text)."""
    cfg = LoopConfig(gamma=depth, max_decode_len=8, tree=shape,
                     sampling=SamplingMode(greedy=greedy))
    sampling = SamplingParams.of(specjax.SamplingConfig(temperature=0.0 if greedy else 1.0), 2)
    text = jax.jit(decoder.Decoder(target, draft, cfg).whole).lower(
        tp, dp, jnp.ones((2, 6), jnp.int32), jnp.int32(2), jnp.arange(2),
        jax.random.PRNGKey(0), sampling).as_text()
    return len(text.splitlines())

  static = size(tree.TreeShape((2, 1, 1, 1, 1, 1)), 6) - size(tree.TreeShape((2, 1, 1)), 3)
  dynamic = size(tree.DynamicTree(4, 6, 2), 6) - size(tree.DynamicTree(4, 3, 2), 3)
  assert static > 0 and dynamic < static / 3, (dynamic, static)
