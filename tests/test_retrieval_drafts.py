"""The retrieval proposers: the trie of retrieved continuations (hand-checked trees and
chains), REST's binary searches of a suffix array against a brute-force scan and its
anchored and floating lookups, the suffix proposer's matches; each sampling the target
exactly (chi-square of the first three tokens against the enumerated distribution, with a
broken tree rule that the same test rejects)."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import tree, tree_accept
from specjax.core.state import LoopConfig
from specjax.models.markov import MarkovModel
from specjax.proposers import rest, suffix, trie
from stats_util import chi_square_pvalue, enumerate_markov

T1 = specjax.SamplingConfig(temperature=1.0)
T07 = specjax.SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)


def _one_program(fn, *args, **static):
  """fn(*args, **static) compiled as one program (static: the Python values it is shaped
  by): the same operations as run one by one, at one compile instead of one per shape."""
  return jax.jit(functools.partial(fn, **static))(*args)


def _continuations(rows):
  """[B, C, D] tokens and valid from lists of token lists (-1: nothing there)."""
  depth = max(len(c) for row in rows for c in row)
  count = max(len(row) for row in rows)
  out = np.full((len(rows), count, depth), -1, np.int32)
  for b, row in enumerate(rows):
    for c, cont in enumerate(row):
      out[b, c, :len(cont)] = cont
  return jnp.asarray(np.maximum(out, 0)), jnp.asarray(out >= 0)


def test_the_trie_keeps_the_heaviest_nodes_breadth_first_with_their_parents():
  # 5 6 7, 5 6 8 and 9: nodes 5 (weight 2), 6 (2) below it, then 9, 7 and 8 (1 each).
  tokens, valid = _continuations([[[5, 6, 7], [5, 6, 8], [9]]])
  weight = jnp.ones((1, 3))
  p = _one_program(trie.tree, tokens, valid, weight, nodes=4, fallback=1, vocab_size=10,
                   greedy=True, state={})
  # Of the weight-1 nodes the shallowest (9) comes first, then 7, retrieved before 8.
  assert p.tokens[0].tolist() == [5, 9, 6, 7]
  assert p.parents[0].tolist() == [-1, -1, 0, 2]
  assert p.depth[0].tolist() == [1, 1, 2, 3]
  assert p.visible[0, 4].tolist() == [True, True, False, True, True]  # 7 sees 5 and 6
  # Weights count: 9 retrieved three times outweighs the path below 5.
  tokens, valid = _continuations([[[5, 6, 7], [9], [9], [9, 2]]])
  p = _one_program(trie.tree, tokens, valid, jnp.ones((1, 4)), nodes=3, fallback=1,
                   vocab_size=10, greedy=True, state={})
  assert p.tokens[0].tolist() == [5, 9, 6] and p.parents[0].tolist() == [-1, -1, 0]


def test_a_small_trie_is_padded_with_fallback_children_of_the_root():
  tokens, valid = _continuations([[[4, 2]], [[-1]]])
  p = _one_program(trie.tree, tokens, valid, jnp.ones((2, 1)), nodes=4, fallback=1,
                   vocab_size=10, greedy=False, state={})
  assert p.tokens.tolist() == [[4, 2, 1, 1], [1, 1, 1, 1]]
  assert p.parents.tolist() == [[-1, 0, -1, -1], [-1, -1, -1, -1]]
  assert p.depth.tolist() == [[1, 2, 1, 1], [1, 1, 1, 1]]
  np.testing.assert_array_equal(p.q, jax.nn.one_hot(p.tokens, 10))  # point masses


def test_the_chain_is_the_heaviest_path_and_drafts_only_what_was_retrieved():
  tokens, valid = _continuations([[[5, 6, 7], [5, 6, 8], [5, 3], [9]], [[-1]]])
  p = _one_program(trie.chain, tokens, valid, jnp.ones(tokens.shape[:2]), gamma=5, fallback=1,
                   vocab_size=10, greedy=True, state={})
  # 5 (3 of 4), then 6 (2 of 3), then 7 (the first retrieved of the tie).
  assert p.tokens.tolist() == [[5, 6, 7, 1, 1], [1, 1, 1, 1, 1]]
  assert p.drafted.tolist() == [3, 1]
  # Weighted: the path of the heavier continuation wins.
  p = _one_program(trie.chain, tokens, valid, jnp.array([[1., 1., 3., 1.], [1.] * 4]), gamma=3,
                   fallback=1, vocab_size=10, greedy=True, state={})
  assert p.tokens[0].tolist() == [5, 3, 1] and int(p.drafted[0]) == 2


def _suffix_array(tokens, width):
  padded = np.concatenate([tokens, np.full(width, -1, tokens.dtype)])
  positions = np.flatnonzero(tokens >= 0)
  return positions[np.lexsort([padded[positions + j] for j in reversed(range(width))])]


def test_binary_search_finds_every_suffix_that_begins_with_the_query():
  rng = np.random.default_rng(0)
  tokens = rng.integers(2, 6, 400).astype(np.int32)
  tokens[rng.choice(400, 40, replace=False)] = -1
  index = _suffix_array(tokens, 4).astype(np.int32)
  queries = rng.integers(2, 6, (30, 4)).astype(np.int32)
  lengths = rng.integers(0, 5, 30).astype(np.int32)
  lo, hi = rest.bounds(jnp.asarray(tokens), jnp.asarray(index), jnp.asarray(queries),
                       jnp.asarray(lengths))
  padded = np.concatenate([tokens, np.full(4, -1, np.int32)])
  for q, m, a, b in zip(queries, lengths, np.asarray(lo), np.asarray(hi)):
    hits = sorted(i for i in range(len(tokens)) if tokens[i] >= 0
                  and list(padded[i:i + m]) == list(q[:m]))
    assert sorted(index[a:b].tolist()) == hits
  assert np.any(np.asarray(hi) - np.asarray(lo) > 1)  # ranges of several matches occur


def _store(documents, max_query, target, samples=rest.SAMPLES):
  tokens = np.concatenate([np.array(d + [-1], np.int32) for d in documents])
  return rest.from_arrays(tokens, _suffix_array(tokens, max_query), max_query, target,
                          samples)


class _Target:  # what from_arrays reads of a target
  eos_id, pad_id = 1, 0

  def __init__(self, encoder: bool, vocab_size: int = 10):
    self.encoder, self.vocab_size = encoder, vocab_size

  def encoded_axes(self):
    return {'mask': ('batch', 'length')} if self.encoder else {}


def test_rest_looks_up_the_documents_that_begin_with_a_short_output_then_any_suffix():
  documents = [[4, 5, 6], [4, 5, 7], [8, 4, 5, 9], [4, 5, 6], [2, 5, 3]]
  draft, params = _store(documents, 2, _Target(encoder=True))
  # T5 rows: the start token 0, then the output. Row 0 wrote 4 5 (2 tokens <= Q): anchored,
  # the documents beginning 4 5 continue 6 (twice) and 7, and the shorter match is the
  # longest suffix, '4 5' anywhere: 6, 6, 7 and 9; row 1 wrote 3 4 5 (3 > Q): floating,
  # '4 5' anywhere, and the shorter match '5' also continues 3; row 2 wrote nothing yet:
  # every document's first token, and no shorter match.
  seq = jnp.array([[0, 4, 5, 0, 0], [0, 3, 4, 5, 0], [0, 0, 0, 0, 0]])
  cont, valid, weight = _one_program(draft.retrieve, params, seq, jnp.array([2, 3, 0]),
                                     depth=2)
  r = draft.samples
  assert cont.shape[1] == 2 * r and weight.shape == cont.shape[:2]
  np.testing.assert_allclose(np.asarray(weight)[:, :r], 1.0)
  assert np.all(np.asarray(weight)[:, r:] * r < 1.0)  # all R below one of the longer's

  def found(part):
    return [sorted(tuple(int(t) for t, v in zip(c, ok) if v) for c, ok in zip(row, vrow)
                   if ok[0]) for row, vrow in zip(np.asarray(cont)[:, part],
                                                  np.asarray(valid)[:, part])]

  longer, shorter = found(slice(None, r)), found(slice(r, None))
  assert longer[0] == [(6,), (6,), (7,)]  # each document ends after it
  assert shorter[0] == [(6,), (6,), (7,), (9,)]
  assert longer[1] == [(6,), (6,), (7,), (9,)]
  assert shorter[1] == [(3,), (6,), (6,), (7,), (9,)]
  assert longer[2] == [(2, 5), (4, 5), (4, 5), (4, 5), (8, 4)] and shorter[2] == []
  # A decoder-only row's text starts at position 0.
  draft, params = _store(documents, 2, _Target(encoder=False))
  cont, valid, _ = _one_program(draft.retrieve, params, jnp.array([[8, 4, 0]]), jnp.array([1]),
                                depth=3)
  assert np.asarray(cont)[0, 0, :2].tolist() == [5, 9]
  assert np.asarray(valid)[0, 0].tolist() == [True, True, False]


def test_the_suffix_draft_retrieves_the_longest_earlier_matches_source_first():
  draft = suffix.SuffixDraft(10, ngram=3, samples=3)
  # output so far: 0 | 4 6 3 4 5 3 4 (its last tokens 5 3 4 at position 7); source 7 3 4 8.
  seq = jnp.array([[0, 4, 6, 3, 4, 5, 3, 4, 0, 0]])
  enc = draft.encode({}, jnp.array([[7, 3, 4, 8, 0]]))
  cont, valid, weight = _one_program(draft.retrieve, enc, seq, jnp.array([7]), depth=2)
  rows = [tuple(int(t) for t, v in zip(c, ok) if v) for c, ok in zip(np.asarray(cont)[0],
                                                                   np.asarray(valid)[0])]
  # '3 4' (length 2) in the source -> 8 (the source ends after it), in the output -> 5 3;
  # then '4' (length 1) at the output's position 1 -> 6 3.
  assert rows == [(8,), (5, 3), (6, 3)]
  assert np.asarray(weight)[0].tolist() == [2.0, 2.0, 1.0]


N, STEPS = 20_000, 3
PROMPT = [3, 4, 3, 5, 3, 2, 4, 3]


def _draws(draft, dp, config, shape=tree.DynamicTree(6, 3, 2)):
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  prompt = jnp.tile(jnp.array([PROMPT]), (N, 1))
  out = specjax.speculative_decode(target, tp, draft, dp, prompt, tree=shape,
                                   max_decode_len=STEPS, sampling=config,
                                   rng=jax.random.PRNGKey(4))
  expected = enumerate_markov(target.transition_probs(tp, config), PROMPT[-1], STEPS)
  return np.asarray(out.tokens), expected, out


# The sampled tests' retrievals per match: no query matches more than 6 of the 21 suffixes
# of _markov_rest's datastore, so 8 retrieve all of them, and the 20,000 rows draw the same
# tokens as with REST's 32 (compared once for every draw of this file) with a quarter of
# the trie's work.
DRAW_SAMPLES = 8


def _markov_rest(samples=rest.SAMPLES):
  documents = [[3, 4, 5, 2], [4, 3, 5, 4], [2, 4, 3, 2, 3], [3, 2, 2, 5], [4, 3, 4, 1]]
  return _store(documents, 3, _Target(encoder=False, vocab_size=6), samples)


# 20,000 rows retrieving in each call. The mixture's decodes run long enough to want the
# optimiser (3.4 s against 3.2 s without it, compile included); REST's and the suffix
# draft's alone compile for longer than they run (1.8 s and 1.3 s without, 3.2 s and 2.3 s
# with).
@pytest.mark.parametrize('config', [T1, T07], ids=['t1', 't0.7-top3-top0.9'])
@pytest.mark.parametrize('kind', ['rest', 'suffix',
                                  pytest.param('rest+suffix', marks=pytest.mark.compute)])
def test_sampled_retrieval_trees_follow_the_target_on_the_first_three_tokens(config, kind):
  own = (suffix.SuffixDraft(6, 3, source=False), {})
  store = _markov_rest(DRAW_SAMPLES)
  draft, dp = {'rest': store, 'suffix': own}.get(kind) or (
      trie.Mixture((store[0], own[0])), {'0': store[1], '1': {}})
  tokens, expected, out = _draws(draft, dp, config)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  assert int(out.stats.accepted.sum()) > 0.1 * N


def test_a_rest_tree_under_a_rule_that_keeps_the_residual_is_rejected(monkeypatch,
                                                                      fresh_programs):
  """The negative control: the same test on a REST tree fails the broken rule."""
  monkeypatch.setattr(tree_accept, 'residual', lambda r, q, q_scale=1.0: r)
  tokens, expected, _ = _draws(*_markov_rest(DRAW_SAMPLES), T1)
  assert chi_square_pvalue(tokens, expected) < 1e-6


def test_a_sampled_rest_chain_follows_the_target():
  target = MarkovModel(6)
  tp = target.init(jax.random.PRNGKey(10), 1.5)
  draft, dp = _markov_rest(DRAW_SAMPLES)
  out = specjax.speculative_decode(target, tp, draft, dp, jnp.tile(jnp.array([PROMPT]), (N, 1)),
                                   gamma=3, max_decode_len=STEPS, sampling=T1,
                                   rng=jax.random.PRNGKey(6))
  expected = enumerate_markov(target.transition_probs(tp, T1), PROMPT[-1], STEPS)
  assert chi_square_pvalue(np.asarray(out.tokens), expected) > 1e-3
  assert int(out.stats.accepted.sum()) > 0


def test_a_shorter_match_fills_the_nodes_the_longest_leaves_unused():
  """'2 4 3' occurs once in the datastore (then 2 3): 2 nodes of a 5-node trie. The other
  3 come from the shorter match '4 3' (then 2 3, 4 1 and 5 4), not from the fallback; in a
  trie of 2 nodes they displace none of the longest match's."""
  draft, params = _markov_rest()
  seq = jnp.array([[3, 5, 3, 2, 4, 3, 0, 0]])
  for nodes, tokens, parents in ((2, [2, 3], [-1, 0]),
                                 (5, [2, 4, 5, 3, 1], [-1, -1, -1, 0, 1])):
    cfg = LoopConfig(gamma=2, max_decode_len=4, tree=tree.DynamicTree(nodes, 2, 3))
    p = _one_program(draft.propose, params, {}, {}, seq, jnp.array([5]), keys=None,
                     sampling=None, cfg=cfg)
    assert p.tokens[0].tolist() == tokens
    assert p.parents[0].tolist() == parents


def test_a_mixture_weighs_each_parts_retrievals_to_one():
  """REST's 64 retrievals weigh as much as the suffix draft's few: one trie of both."""
  rest_draft, params = _markov_rest()
  own = suffix.SuffixDraft(6, 3, samples=2, source=False)
  mixture = trie.Mixture((rest_draft, own))
  seq = jnp.array([[3, 5, 3, 2, 4, 3, 0, 0]])
  # REST: '2 4 3' occurs once, then 2 (weight 1), and the shorter match '4 3' continues
  # 2, 4 and 5 (1/33 each); scaled to 1 in all: 2 0.94, 4 and 5 0.03 each. The suffix
  # draft: '3' at positions 0 and 2, then 5 and 2 (1/2 each). 2 weighs 1.44, 5 0.53 and
  # 4 0.03: the two heaviest, then all three in the order retrieved.
  for nodes, expected in ((2, [2, 5]), (3, [2, 4, 5])):
    cfg = LoopConfig(gamma=1, max_decode_len=4, tree=tree.DynamicTree(nodes, 1, 3))
    p = _one_program(mixture.propose, {'0': params, '1': {}}, {'0': {}, '1': {}}, {}, seq,
                     jnp.array([5]), keys=None, sampling=None, cfg=cfg)
    assert p.tokens[0].tolist() == expected
    assert p.parents[0].tolist() == [-1] * nodes


def test_a_static_tree_is_refused_in_one_line():
  draft, dp = _markov_rest()
  cfg = LoopConfig(gamma=2, max_decode_len=4, tree=tree.TreeShape((2, 1)))
  with pytest.raises(ValueError, match='--tree-nodes N --tree-depth D'):
    draft.propose(dp, {}, {}, jnp.zeros((1, 8), jnp.int32), jnp.zeros((1,), jnp.int32),
                  None, None, cfg)
