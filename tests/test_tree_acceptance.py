"""Token trees: their static shapes, the greedy and sampled tree rules, the cache
compaction, dynamic trees' drawn first children, and sampled tree decoding against exactly
enumerated target probabilities (with a deliberately broken tree rule, and a broken draw,
that the same test rejects)."""
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import specjax
from specjax.core import sampling, state, steps, tree, tree_accept, tree_draft
from specjax.models.markov import MarkovModel
from stats_util import chi_square_pvalue, enumerate_markov

VOCAB, START, N, STEPS = 6, 3, 20_000, 3


def test_static_shape_lists_nodes_breadth_first():
  shape = tree.TreeShape((2, 2))
  assert shape.num_nodes == 6 and shape.depth_count == 2
  assert shape.parents().tolist() == [-1, -1, 0, 0, 1, 1]
  assert shape.depths().tolist() == [1, 1, 2, 2, 2, 2]
  assert shape.ranks().tolist() == [0, 1, 0, 1, 0, 1]
  assert tree.TreeShape((3, 1, 2)).parents().tolist() == [-1, -1, -1, 0, 1, 2, 3, 3, 4, 4,
                                                           5, 5]
  assert tree.TreeShape.parse('4,2,2,1').num_nodes == 4 + 8 + 16 + 16
  assert tree.TreeShape.chain(3).parents().tolist() == [-1, 0, 1]
  for bad in ('4,0', 'a,b', ''):
    with pytest.raises(ValueError, match='--tree'):
      tree.TreeShape.parse(bad)


def test_ancestors_of_a_small_tree():
  anc = np.asarray(tree.ancestors(np.array([-1, -1, 0, 0, 1, 1])))
  expected = {0: [0], 1: [0, 1], 2: [0, 2], 3: [0, 1, 3], 4: [0, 1, 4], 5: [0, 2, 5],
              6: [0, 2, 6]}
  for slot, row in expected.items():
    assert np.flatnonzero(anc[slot]).tolist() == row


@pytest.mark.parametrize('nodes', [1, 2, 7, 8, 9, 64])
def test_ancestors_of_chains_and_random_trees_per_row(nodes):
  """Deep trees (a chain of N, the deepest) and random ones, one per row: each slot's
  ancestors found by walking its parents up to the root."""
  rng = np.random.default_rng(nodes)
  parents = np.stack([np.arange(-1, nodes - 1)] +  # a chain: node i's parent is i - 1
                     [[rng.integers(-1, i) for i in range(nodes)] for _ in range(5)])
  anc = np.asarray(tree.ancestors(parents))  # [6, N + 1, N + 1]
  assert anc.shape == (6, nodes + 1, nodes + 1)
  for row, tree_parents in zip(anc, parents):
    for slot in range(nodes + 1):
      walk, up = {0, slot}, slot
      while up > 0:
        up = tree_parents[up - 1] + 1
        walk.add(up)
      assert np.flatnonzero(row[slot]).tolist() == sorted(walk)


def test_greedy_takes_the_deepest_matching_path():
  parents = np.array([-1, -1, 0, 0, 1, 1])  # tree (2, 2): slots 1..6
  depth = np.array([1, 1, 2, 2, 2, 2])
  tokens = jnp.array([[7, 8, 4, 5, 6, 9],    # argmax after root 8 -> node 1; after it 9
                      [7, 8, 4, 5, 6, 9],    # root wants 7 -> node 0; after it 5 -> node 3
                      [7, 8, 4, 5, 6, 9]])   # root wants 2: nothing matches
  target = jnp.array([[8, 0, 9, 0, 0, 0, 0],
                      [7, 5, 0, 0, 3, 0, 0],
                      [2, 0, 0, 0, 0, 0, 0]])
  got = tree_accept.accept_tree_greedy(target, tokens, parents, depth, 2)
  assert got.n.tolist() == [2, 2, 0]
  assert got.path.tolist() == [[1, 5], [0, 3], [-1, -1]]
  # after node 5 (slot 6) the target says 0; after node 3 (slot 4) it says 3; else 2
  assert got.y.tolist() == [0, 3, 2]
  block = tree_accept.accepted_tokens(tokens, got.path, got.y, got.n)
  assert block[:, :3].tolist()[:2] == [[8, 9, 0], [7, 5, 3]] and int(block[2, 0]) == 2


def test_sampled_rule_on_one_hot_distributions_is_the_greedy_rule():
  """With one-hot p (greedy) and point-mass q, the sampled rule keeps what greedy keeps
  (siblings carry distinct tokens, as a node's top-k children do)."""
  shape = tree.TreeShape((3, 2))
  rng = np.random.default_rng(0)
  parents, depth = shape.parents(), shape.depths()
  batch, vocab = 64, 4
  tokens = np.concatenate([rng.permuted(np.tile(np.arange(vocab), (batch * groups, 1)),
                                        axis=1)[:, :b].reshape(batch, groups * b)
                           for b, groups in ((3, 1), (2, 3))], axis=1)
  tokens = jnp.asarray(tokens, jnp.int32)
  target = jnp.asarray(rng.integers(0, vocab, (batch, shape.num_nodes + 1)), jnp.int32)
  greedy = jax.jit(tree_accept.accept_tree_greedy, static_argnums=4)(target, tokens, parents,
                                                                      depth, 2)
  sampled = jax.jit(tree_accept.accept_tree, static_argnums=6)(
      jax.nn.one_hot(target, vocab), jax.nn.one_hot(tokens, vocab), tokens, parents, depth,
      jax.random.split(jax.random.PRNGKey(0), batch), 2)
  assert sampled.n.tolist() == greedy.n.tolist() and sampled.y.tolist() == greedy.y.tolist()
  # equal tokens in one path, whichever sibling carried them
  got = tree_accept.accepted_tokens(tokens, sampled.path, sampled.y, sampled.n)
  want = tree_accept.accepted_tokens(tokens, greedy.path, greedy.y, greedy.n)
  keep = np.arange(3)[None] <= np.asarray(greedy.n)[:, None]
  assert np.array_equal(np.where(keep, got, 0), np.where(keep, want, 0))
  assert 0 < int(jnp.sum(greedy.n > 0)) < batch  # both outcomes occur


def test_compact_moves_the_accepted_path_into_place():
  cache = {'k': jnp.arange(2 * 3 * 12, dtype=jnp.float32).reshape(2, 3, 12)}  # [B, H, T]
  axes = {'k': ('batch', 'kv', 'length')}
  base = jnp.array([2, 5])
  path = jnp.array([[1, 4], [0, -1]])  # row 0: nodes 1 then 4; row 1: node 0 only
  got = tree.compact(cache, axes, base, path, jnp.array([2, 1]), num_nodes=6)['k']
  want = np.array(cache['k'])
  want[0, :, 3] = want[0, :, 2 + 1 + 1]  # node 1 (slot base+2) -> base+1
  want[0, :, 4] = want[0, :, 2 + 1 + 4]  # node 4 (slot base+5) -> base+2
  want[1, :, 6] = want[1, :, 5 + 1 + 0]  # node 0 stays at base+1
  assert np.array_equal(np.asarray(got), want)
  assert not np.array_equal(np.asarray(got), np.asarray(cache['k']))


def _reference_compact(cache: np.ndarray, axes, base, path, n) -> np.ndarray:
  """compact, written as plain copies on the host: slot base + 1 + path[b, d] -> base + 1 + d
  along the 'length' axis, for d < n[b] (every copy read before any is written)."""
  axis = axes.index('length')
  moved = np.moveaxis(cache, axis, -1).copy()
  src = np.moveaxis(cache, axis, -1)
  for b in range(cache.shape[0]):
    for d in range(int(n[b])):
      moved[b, ..., base[b] + 1 + d] = src[b, ..., base[b] + 1 + path[b, d]]
  return np.moveaxis(moved, -1, axis)


@pytest.mark.parametrize('axes', [('batch', 'layers', 'heads', 'kv', 'length'),
                                  ('batch', 'length', 'heads', 'kv'),
                                  ('batch', 'kv', 'length')])
@pytest.mark.parametrize('dtype', [jnp.float32, jnp.bfloat16, jnp.int32])
def test_compact_writes_the_path_in_place_on_any_layout(axes, dtype):
  """Leaves of any layout ('batch' first, 'length' anywhere: a scanned stack's
  [B, L, N, H, T] included) and dtype, rows with different bases, depths and paths, one
  of them keeping nothing; the move is exact (no arithmetic on the values), and a path
  node past n is not read (-1, or a slot the cache never held)."""
  rng = np.random.default_rng(1)
  sizes = {'batch': 3, 'layers': 2, 'heads': 3, 'kv': 2, 'length': 14}
  shape = tuple(sizes[a] for a in axes)
  values = rng.standard_normal(shape) * 1e3
  values[0, 0] = np.inf  # a nonfinite entry elsewhere must not leak into the picks
  cache = {'k': jnp.asarray(values if dtype != jnp.int32 else rng.integers(-99, 99, shape),
                            dtype)}
  base = np.array([1, 4, 2])
  path = np.array([[2, 5, 7, 8], [0, 1, 2, 3], [3, -1, -1, -1]])  # node indices
  n = np.array([4, 0, 1])
  num_nodes = 9
  got = jax.jit(lambda c, b, p, k: tree.compact(c, {'k': axes}, b, p, k, num_nodes))(
      cache, jnp.asarray(base), jnp.asarray(path), jnp.asarray(n))
  want = _reference_compact(np.asarray(cache['k']), axes, base, path, n)
  assert got['k'].dtype == cache['k'].dtype and got['k'].shape == cache['k'].shape
  np.testing.assert_array_equal(np.asarray(got['k']), want)
  assert not np.array_equal(want, np.asarray(cache['k']))  # the move moved something
  # negative control: the reference with row 0 keeping one node less differs from it
  short = _reference_compact(np.asarray(cache['k']), axes, base, path, n - [1, 0, 0])
  assert not np.array_equal(short, np.asarray(got['k']))


def test_compact_refuses_a_leaf_without_batch_first():
  with pytest.raises(ValueError, match='batch'):
    tree.compact({'k': jnp.zeros((2, 3, 8))}, {'k': ('kv', 'batch', 'length')},
                 jnp.zeros((2,), jnp.int32), jnp.zeros((2, 2), jnp.int32),
                 jnp.ones((2,), jnp.int32), 4)


def _markov_pair():
  target = MarkovModel(VOCAB)
  tp = target.init(jax.random.PRNGKey(10), scale=1.5)
  dp = target.init(jax.random.PRNGKey(11), scale=3.0)
  return target, tp, dp


def _tree_samples(config, shape, seed=0):
  target, tp, dp = _markov_pair()
  out = specjax.speculative_decode(target, tp, target, dp, jnp.full((N, 1), START, jnp.int32),
                                   tree=shape, max_decode_len=STEPS, sampling=config,
                                   rng=jax.random.PRNGKey(seed))
  expected = enumerate_markov(target.transition_probs(tp, config), START, STEPS)
  return np.asarray(out.tokens), expected, out


CONFIGS = [specjax.SamplingConfig(temperature=1.0),
           specjax.SamplingConfig(temperature=0.7, top_k=3, top_p=0.9)]


@pytest.mark.parametrize('shape', ['2,1,2', tree.DynamicTree(6, 3, 2)],
                         ids=['static2-1-2', 'dynamic6-3-2'])
@pytest.mark.parametrize('config', CONFIGS, ids=['t1', 't0.7-top3-top0.9'])
def test_sampled_tree_decode_follows_the_target_on_the_first_three_tokens(config, shape):
  tokens, expected, out = _tree_samples(config, shape)
  assert chi_square_pvalue(tokens, expected) > 1e-3
  rate = float(out.stats.accepted.sum()) / float(out.stats.target_calls.sum())
  assert 0.05 < rate  # the tree was used: some of its tokens were accepted


def test_a_tree_rule_that_keeps_the_residual_between_siblings_is_rejected(monkeypatch,
                                                                            fresh_programs):
  """Not removing a rejected sibling's mass from the residual: the same test must fail."""
  monkeypatch.setattr(tree_accept, 'residual', lambda r, q, q_scale=1.0: r)
  tokens, expected, _ = _tree_samples(CONFIGS[0], '2,1,2')
  assert chi_square_pvalue(tokens, expected) < 1e-6


def _grown(sample_first: bool, config=CONFIGS[0], spec=tree.DynamicTree(6, 3, 2), rows=64):
  """A dynamic tree the Markov draft grows below START, and the draft's params."""
  target, _, dp = _markov_pair()
  params = sampling.SamplingParams.of(config, rows)
  cfg = state.LoopConfig(gamma=spec.depth, max_decode_len=STEPS, sampling=params.mode(),
                         tree=spec)
  seq = jnp.full((rows, 4), START, jnp.int32)
  keys = jax.random.split(jax.random.PRNGKey(3), spec.depth * rows).reshape(
      spec.depth, rows, -1)
  grow = jax.jit(lambda p, s, k, sp: tree_draft.grow_dynamic(
      steps.Bound(target, p, {}), target.init_cache(rows, 8), s, jnp.zeros((rows,), jnp.int32),
      k, sp, cfg, sample_first=sample_first))
  return grow(dp, seq, keys, params), target, dp


def test_dynamic_tree_draws_each_expanded_nodes_first_child():
  """Sampling: the root's first child is always verified and carries the warped draft
  distribution it was drawn from as its q (drawn: it varies over rows), its siblings are
  the likeliest other tokens (point masses, never the drawn token); without
  sample_first every q is a point mass (as before)."""
  proposal, target, dp = _grown(True)
  tokens, q, parents = (np.asarray(a) for a in (proposal.tokens, proposal.q,
                                               proposal.parents))
  warped = target.transition_probs(dp, CONFIGS[0])  # [V, V]
  assert (parents[:, 0] == -1).all()
  np.testing.assert_allclose(q[:, 0], np.broadcast_to(warped[START], q[:, 0].shape),
                             atol=1e-6)
  assert len(set(tokens[:, 0].tolist())) > 1  # drawn, not the argmax every time
  one_hot = q.max(-1) == 1.0
  drawn = ~one_hot
  assert drawn.sum() > tokens.shape[0]  # deeper expansions draw too
  for b in range(tokens.shape[0]):
    for node in np.flatnonzero(drawn[b]):
      siblings = np.flatnonzero(parents[b] == parents[b, node])
      assert siblings[0] == node  # a drawn child is its parent's first
      assert tokens[b, node] not in tokens[b, siblings[1:]].tolist()
      parent_token = START if parents[b, node] < 0 else tokens[b, parents[b, node]]
      np.testing.assert_allclose(q[b, node], warped[parent_token], atol=1e-6)
  point, _, _ = _grown(False)
  assert (np.asarray(point.q).max(-1) == 1.0).all()


@pytest.mark.parametrize('config', CONFIGS, ids=['t1', 't0.7-top3-top0.9'])
def test_dynamic_tree_with_drawn_first_children_follows_the_target(config):
  """Deeper than the test above's (depth 3, top 3, 8 nodes): the drawn children, their
  point-mass siblings and the global ranking together keep the target's distribution."""
  tokens, expected, out = _tree_samples(config, tree.DynamicTree(8, 3, 3))
  assert chi_square_pvalue(tokens, expected) > 1e-3
  rate = float(out.stats.accepted.sum()) / float(out.stats.target_calls.sum())
  assert 0.05 < rate


def test_a_drawn_child_that_does_not_follow_its_q_is_rejected(monkeypatch, fresh_programs):
  """The negative control: the draft's 'draw' is its argmax while the tree rule is told it
  was drawn from q; the same test must fail."""
  broken = types.SimpleNamespace(**{k: getattr(sampling, k) for k in dir(sampling)
                                    if not k.startswith('__')})
  broken.sample = lambda keys, q: jnp.argmax(q, axis=-1).astype(jnp.int32)
  monkeypatch.setattr(tree_draft, 'sampling', broken)
  tokens, expected, _ = _tree_samples(CONFIGS[0], tree.DynamicTree(8, 3, 3))
  assert chi_square_pvalue(tokens, expected) < 1e-6
