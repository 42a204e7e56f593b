"""REST retrieves R = max(32, N / 2) continuations per match for a trie of N nodes
(`RestDraft.sized_for`): the decode's trace retrieves that many, a 128-node trie stays the
target's own greedy output, and rest+suffix sizes its REST part alone."""
import numpy as np
import pytest

import specjax
from specjax.core import tree
from specjax.job import drafts
from specjax.proposers import rest, suffix, trie
from test_retrieval_decode import _vocab
from test_tree_decode import _test_lines


def _rest(target, spec='rest'):
  return drafts.resolve_draft(spec, target, 'manpages_target', None,
                              vocab=_vocab('manpages_target'))


def test_r_is_half_the_nodes_above_twice_the_default(manpages_pair):
  draft, _ = _rest(manpages_pair[0])
  assert draft.samples == rest.SAMPLES == 32
  assert [draft.sized_for(n).samples for n in (9, 64, 65, 128, 256)] == [32, 32, 32, 64, 128]
  assert draft.sized_for(64) == draft  # the shipped trie's proposer, unchanged
  wider = draft.sized_for(512)
  assert wider.sized_for(64).samples == 256  # never fewer than it was built with
  mixture, _ = _rest(manpages_pair[0], 'rest+suffix')
  assert isinstance(mixture, trie.Mixture)
  sized = mixture.sized_for(256)
  assert [type(p) for p in sized.parts] == [rest.RestDraft, suffix.SuffixDraft]
  assert sized.parts[0].samples == 128 and sized.parts[1] == mixture.parts[1]


@pytest.mark.parametrize('shape, expected', [(4, 32), (tree.DynamicTree(64, 10, 4), 32),
                                             (tree.DynamicTree(128, 12, 8), 64)],
                         ids=['chain4', 'trie64', 'trie128'])
def test_the_decode_retrieves_r_for_its_trie(manpages_pair, monkeypatch, fresh_programs,
                                             shape, expected):
  target, tp, _, _ = manpages_pair
  draft, dp = _rest(target)
  seen = []
  retrieve = rest.RestDraft.retrieve

  def recorded(self, params, seq, pos, depth):
    out = retrieve(self, params, seq, pos, depth)
    seen.append((self.samples, out[0].shape[1]))
    return out

  monkeypatch.setattr(rest.RestDraft, 'retrieve', recorded)
  gamma, shape = (shape, None) if isinstance(shape, int) else (None, shape)
  specjax.speculative_decode(target, tp, draft, dp, _test_lines('manpages_', 2), gamma=gamma,
                             tree=shape, max_decode_len=8)
  assert seen and set(seen) == {(expected, 2 * expected)}


def test_a_128_node_trie_is_the_targets_greedy_output_with_refill(manpages_pair):
  target, tp, _, _ = manpages_pair
  draft, dp = _rest(target)
  inputs = _test_lines('manpages_', 12)
  kw = dict(max_decode_len=24, slots=4)
  ref = specjax.autoregressive_decode(target, tp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs,
                                   tree=tree.DynamicTree(128, 12, 8), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert int(out.stats.accepted.sum()) > 0
