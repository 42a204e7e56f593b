"""Every proposer through the proposer protocol: the copy's trees of several earlier
matches and the bigram table's top-k trees are greedy-exact on both bundled pairs' test
lines (with refill) and on Llama and GPT-2 pairs, and sample the target exactly (chi-square
of the first three tokens, with a broken tree rule that the same test rejects); a copy
refuses a dynamic tree and copy + model refuses any tree, in one line."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import tree, tree_accept
from specjax.job import drafts
from specjax.models.markov import MarkovModel
from specjax.proposers.bigram import BigramDraft, table_from_counts
from specjax.proposers.copy import CopyDraft, best_matches
from specjax.proposers.hybrid import HybridDraft
from stats_util import chi_square_pvalue, enumerate_markov
from test_lm_speculative import _pair as lm_pair
from test_lm_speculative import _prompts
from test_tree_decode import _demo_lines, _test_lines

T1 = specjax.SamplingConfig(temperature=1.0)
T07 = specjax.SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)


def test_best_matches_are_the_longest_then_the_source_then_the_earliest_and_differ():
  # output so far 3 4 3 5 3 2 | 4 3 (the query ends at position 7: its last tokens 4 3)
  output = jnp.array([[3, 4, 3, 5, 3, 2, 4, 3, -1, -1]])
  source = jnp.array([[9, 3, 2, 8, 4, 3, 7, -2]])
  history = jnp.array([[[4, 3]]])
  query = jnp.array([[7]])
  tokens, found = best_matches(history, [(output, False), (source, True)], query, 5, 2)
  # length 2: '4 3' -> 5 (output, positions 1-2) and -> 7 (source): the source first;
  # length 1: '3' -> 2 (source, ahead of the output's at equal length), then 4 (output,
  # position 0, the earliest); 5 and 2 are not repeated; nothing else follows a '3'.
  assert tokens[0, 0].tolist()[:4] == [7, 5, 2, 4]
  assert found[0, 0].tolist() == [True, True, True, True, False]


@pytest.fixture(scope='module')
def demo_bigram(_demo_pair):
  target = _demo_pair[0]
  return drafts.resolve_draft('bigram', target, 'demo_target', None)


@pytest.mark.parametrize('kind, shape', [('copy', '3,1,1'), ('bigram', '2,2,1'),
                                         ('bigram', tree.DynamicTree(8, 4, 2))],
                         ids=['copy-3-1-1', 'bigram-2-2-1', 'bigram-dynamic8-4-2'])
def test_greedy_trees_of_copy_and_bigram_are_the_targets_on_demo_lines(demo_pair, demo_bigram,
                                                                      kind, shape):
  target, tp, _, _ = demo_pair
  draft, dp = (drafts.copy_draft(target), {}) if kind == 'copy' else demo_bigram
  inputs = _demo_lines(16)
  kw = dict(max_decode_len=20, slots=8)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=shape, **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


def test_greedy_copy_and_bigram_trees_are_the_targets_on_manpages_lines(manpages_pair):
  target, tp, _, _ = manpages_pair
  inputs = _test_lines('manpages_', 8)
  kw = dict(max_decode_len=16)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, drafts.copy_draft(target), {}, inputs,
                                   tree='4,1,1', **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  # a summary copies its page: several tokens per call
  assert out.stats.tokens_per_call > 1.5
  bigram, table = drafts.resolve_draft('bigram', target, 'manpages_target', None)
  out = specjax.speculative_decode(target, tp, bigram, table, inputs, tree='3,2,1', **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0


@pytest.mark.parametrize('family', ['llama', 'gpt2'])
def test_greedy_copy_and_bigram_trees_are_the_targets_for_decoder_only_pairs(family):
  target, tp, _, _ = lm_pair(family, vocab=32, eos_bias=0.6 if family == 'llama' else 1.6)
  inputs = _prompts(32)
  kw = dict(max_decode_len=16, slots=2)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  table = table_from_counts(np.random.default_rng(3).integers(0, 9, (32, 32)), 3)
  for draft, dp, shape in ((drafts.copy_draft(target), {}, '2,1,1'),
                           (BigramDraft(32, 3), table, tree.DynamicTree(6, 3, 2))):
    out = specjax.speculative_decode(target, tp, draft, dp, inputs, tree=shape, **kw)
    np.testing.assert_array_equal(out.tokens, ref.tokens)


N, STEPS = 20_000, 3
# Three earlier continuations of '3' (4, 5, 2) and one of '4 3' (5): a tree '3,1,1' tries
# three different first tokens.
PROMPT = [3, 4, 3, 5, 3, 2, 4, 3]


def _copy_tree_samples(config, shape='3,1,1'):
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  copy = CopyDraft(6, ngram=2, source=False)
  prompt = jnp.tile(jnp.array([PROMPT]), (N, 1))
  out = specjax.speculative_decode(target, tp, copy, {}, prompt, tree=shape,
                                   max_decode_len=STEPS, sampling=config,
                                   rng=jax.random.PRNGKey(4))
  expected = enumerate_markov(target.transition_probs(tp, config), PROMPT[-1], STEPS)
  return np.asarray(out.tokens), expected, out


@pytest.mark.parametrize('config', [T1, T07], ids=['t1', 't0.7-top3-top0.9'])
def test_sampled_copy_tree_follows_the_target_on_the_first_three_tokens(config):
  tokens, expected, out = _copy_tree_samples(config)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  # The second and third children were accepted: a row whose first token is 4 or 2 and
  # whose 3 tokens came from one call took it from the tree (under the first child alone,
  # 5, a first token of 4 or 2 is the target's own draw, and a second call follows).
  one_call = np.asarray(out.stats.target_calls) == 1
  first = {t: sum(p for seq, p in expected.items() if seq[0] == t) for t in (4, 2)}
  if config == T1:  # (top-k 3 and top-p 0.9 leave both out after a 3)
    assert min(first.values()) > 0.01
  for token, p in first.items():
    if p > 0.01:  # over 200 of the 20,000 rows start with it
      assert np.any(one_call & (tokens[:, 0] == token)), token


def test_a_copy_tree_under_a_rule_that_keeps_the_residual_is_rejected(monkeypatch,
                                                                      fresh_programs):
  """The negative control: the same test on a copy tree fails the broken rule."""
  monkeypatch.setattr(tree_accept, 'residual', lambda r, q, q_scale=1.0: r)
  tokens, expected, _ = _copy_tree_samples(T1)
  assert chi_square_pvalue(tokens, expected) < 1e-6


def test_sampled_bigram_tree_follows_the_target():
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  table = table_from_counts(np.random.default_rng(1).integers(0, 9, (6, 6)), 3)
  out = specjax.speculative_decode(target, tp, BigramDraft(6, 3), table,
                                   jnp.full((N, 1), 3, jnp.int32), tree='2,2,1',
                                   max_decode_len=STEPS, sampling=T1,
                                   rng=jax.random.PRNGKey(5))
  expected = enumerate_markov(target.transition_probs(tp, T1), 3, STEPS)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert int(out.stats.accepted.sum()) > 0


def test_a_dynamic_copy_tree_and_a_copy_plus_model_tree_are_refused():
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(0))
  prompt = jnp.array([PROMPT])
  with pytest.raises(ValueError, match='static trees only'):
    specjax.speculative_decode(target, tp, CopyDraft(6, source=False), {}, prompt,
                               tree=tree.DynamicTree(4, 2, 2), max_decode_len=4)
  with pytest.raises(ValueError, match='chains only'):
    specjax.speculative_decode(target, tp, HybridDraft(CopyDraft(6, source=False), target),
                               tp, prompt, tree='2,1', max_decode_len=4)
