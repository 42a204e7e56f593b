"""Token-tree decode calls (`specjax.models.base.Tree`): each node is scored as a chain
decode of its root-to-node path scores it, whether the tree comes in one call or level by
level, an accepted path moved to its chain slots leaves a chain decode's cache, the hidden
state feeds the logits, and a wrong visibility mask is caught.

Every model runs at batch 2, the rows' trees at different bases with different shapes.
"""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models_for_tests import tiny_transformer
from specjax.core import tree as core_tree
from specjax.models import base
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig
from specjax.models.markov import MarkovModel
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny

ATOL = 1e-4
CACHE_LEN = 16  # T
PREFIX = 5  # committed tokens prefilled per row; a row whose base is lower has stale slots
BASES = np.array([3, 5], np.int32)  # [B] each row's tree root slot
# Each row's tree, nodes in breadth-first order (levels of 1, 2 and 3 nodes in both rows):
# row 0: two grandchildren under the first child, one under the second; row 1: the reverse.
PARENTS = np.array([[-1, 0, 0, 1, 1, 2], [-1, 0, 0, 1, 2, 2]])  # [B, M]
LEVELS = ((0, 1), (1, 3), (3, 6))  # [start, end) node ranges of depth 0, 1, 2
MAX_PATH = 3  # the deepest node's path: root, child, grandchild


def _paths(parents: np.ndarray) -> list:
  """Per row, per node: its root-to-node path of node indices."""
  out = []
  for row in parents:
    paths = []
    for m in range(len(row)):
      path = [m]
      while row[path[0]] >= 0:
        path.insert(0, int(row[path[0]]))
      paths.append(path)
    out.append(paths)
  return out


PATHS = _paths(PARENTS)
DEPTH = np.array([[len(p) - 1 for p in row] for row in PATHS], np.int32)  # [B, M]
# visible[b, k, m]: node m is an ancestor of node k, or k itself.
VISIBLE = np.array([[[m in p for m in range(len(row))] for p in row] for row in PATHS])


def _tree(visible=VISIBLE, offset=0) -> base.Tree:
  """The tree of every test; visible [B, K, M] rows of the call's K nodes."""
  return base.Tree(base=jnp.asarray(BASES), offset=jnp.full((2,), offset, jnp.int32),
                   depth=jnp.asarray(DEPTH), visible=jnp.asarray(visible))


def _lm(family: str) -> CausalLM:
  common = dict(family=family, vocab_size=32, eos_id=1, pad_id=0, max_len=64, head_dim=8,
                emb_dim=32, num_heads=4, num_layers=2, mlp_dim=64)
  if family == 'llama':  # grouped-query attention with llama3 rope scaling
    return CausalLM(LMConfig(num_kv_heads=2, rope_type='llama3', rope_factor=4.0,
                             rope_original_max_len=16, **common))
  return CausalLM(LMConfig(num_kv_heads=4, activation='gelu_new', tie_embeddings=True,
                           **common))


def _output_projection(name: str, params, hidden: jax.Array) -> jax.Array:
  """The model's logits of a hidden state [B, K, D], computed here by hand."""
  if name == 't5':  # t5_tiny is v1.1: untied logits_dense
    return jnp.einsum('bkd,dv->bkv', hidden, params['decoder']['logits_dense']['kernel'],
                      precision='highest')
  return jnp.einsum('bkd,dv->bkv', hidden, params['lm_head']['kernel'], precision='highest')


class Setup:
  """A model with its params, encoding, a prefilled cache and jitted decodes."""

  def __init__(self, name: str):
    self.name = name
    rng = np.random.default_rng(0)
    if name == 't5':
      self.model = T5(t5_tiny)
      self.params = self.model.init(jax.random.PRNGKey(0))
      inputs = jnp.asarray(rng.integers(2, 32, (2, 6)), jnp.int32)
      self.encoded = jax.jit(self.model.encode)(self.params, inputs)
    elif name == 'toy':
      self.model, self.params = tiny_transformer()
      self.encoded = {}
    else:
      self.model = _lm(name)
      self.params = self.model.init(jax.random.PRNGKey(1))
      self.encoded = {}
    vocab = self.model.vocab_size
    self.tokens = jnp.asarray(rng.integers(2, vocab, (2, PARENTS.shape[1])), jnp.int32)
    self.next_token = jnp.asarray(rng.integers(2, vocab, (2, 1)), jnp.int32)
    self.decode = jax.jit(functools.partial(self.model.decode, self.params, self.encoded),
                          static_argnames='return_hidden')
    prefix = jnp.asarray(rng.integers(2, vocab, (2, PREFIX)), jnp.int32)
    self.prefix_cache = self.decode(self.model.init_cache(2, CACHE_LEN), prefix,
                                    jnp.zeros((2,), jnp.int32))[1]

  def path_tokens(self, node_of_row) -> tuple:
    """Each row's root-to-node path tokens, padded to MAX_PATH ([B, MAX_PATH]), and the
    node's index in it (its depth) [B]."""
    rows, depths = [], []
    for b, node in enumerate(node_of_row):
      path = PATHS[b][node]
      ids = [int(self.tokens[b, m]) for m in path]
      rows.append(ids + [0] * (MAX_PATH - len(ids)))  # padding after: unseen by the path
      depths.append(len(path) - 1)
    return jnp.asarray(rows, jnp.int32), np.array(depths)

  def chain_logits(self, node: int) -> np.ndarray:
    """[B, V]: the logits after `node` from a chain decode of its path over the prefix."""
    path, depth = self.path_tokens([node, node])
    logits = self.decode(self.prefix_cache, path, jnp.asarray(BASES))[0]
    return np.asarray(logits)[np.arange(2), depth]

  def tree_call(self, visible=VISIBLE, return_hidden=False):
    """The whole tree in one verify call over the prefix cache."""
    return self.decode(self.prefix_cache, self.tokens, jnp.asarray(BASES), tree=_tree(visible),
                       return_hidden=return_hidden)


@functools.lru_cache(maxsize=None)
def _setup(name: str) -> Setup:
  return Setup(name)


MODELS = ['t5', 'llama', 'gpt2', 'toy']


def _move_path(model, cache, path: np.ndarray):
  """Copies each row's tree slots BASES + path[b, d] to slots BASES + d along every cache
  leaf's 'length' axis (what the core's compaction does with an accepted path)."""
  src = jnp.asarray(BASES[:, None] + path)  # [B, L]
  dst = jnp.asarray(BASES[:, None] + np.arange(path.shape[1]))

  def move(leaf, axes):
    axis = axes.index('length') - 1  # within a row

    def row(x, s, d):
      index = (slice(None),) * axis + (d,)
      return x.at[index].set(jnp.take(x, s, axis=axis))

    return jax.vmap(row)(leaf, src, dst)

  return jax.tree.map(move, cache, model.cache_axes())


def test_attention_layout_of_a_tree_by_hand():
  # Root at slot 2 with two children; this call feeds the second child (node 2, slot 4).
  tree = base.Tree(base=jnp.array([2]), offset=jnp.array([2]), depth=jnp.array([[0, 1, 1]]),
                   visible=jnp.array([[[True, False, True]]]))
  query_pos, key_pos, mask, start = base.attention_layout(jnp.array([9]), 1, 6, tree)
  np.testing.assert_array_equal(query_pos, [[3]])
  np.testing.assert_array_equal(key_pos, [[0, 1, 2, 3, 3, 5]])  # slot 5: beyond the tree
  np.testing.assert_array_equal(mask, [[[True, True, True, False, True, False]]])
  np.testing.assert_array_equal(start, [4])
  chain = base.attention_layout(jnp.array([1, 4]), 2, 6)
  np.testing.assert_array_equal(chain[0], [[1, 2], [4, 5]])
  np.testing.assert_array_equal(chain[1], np.tile(np.arange(6), (2, 1)))
  np.testing.assert_array_equal(chain[2], base.causal_mask(jnp.array([1, 4]), 2, 6))
  np.testing.assert_array_equal(chain[3], [1, 4])


@pytest.mark.parametrize('name', MODELS)
def test_tree_call_scores_each_node_as_its_paths_chain_decode(name):
  s = _setup(name)
  logits = np.asarray(s.tree_call()[0])  # [B, M, V]
  for node in range(PARENTS.shape[1]):
    np.testing.assert_allclose(logits[:, node], s.chain_logits(node), atol=ATOL,
                               err_msg=f'node {node}')


@pytest.mark.parametrize('name', MODELS)
def test_a_wrong_visibility_mask_changes_the_logits(name):
  """The negative control of the test above: node 4 also sees its sibling 3."""
  s = _setup(name)
  wrong = VISIBLE.copy()
  wrong[:, 4, 3] = True
  logits = np.asarray(s.tree_call(wrong)[0])
  np.testing.assert_allclose(logits[:, 3], s.chain_logits(3), atol=ATOL)
  assert np.abs(logits[:, 4] - s.chain_logits(4)).max(axis=-1).min() > 100 * ATOL


@pytest.mark.parametrize('name', ['t5', 'llama'])
def test_a_tree_fed_level_by_level_scores_as_in_one_call(name):
  s = _setup(name)
  whole = np.asarray(s.tree_call()[0])
  cache = s.prefix_cache
  for start, end in LEVELS:
    logits, cache = s.decode(cache, s.tokens[:, start:end], jnp.asarray(BASES),
                             tree=_tree(VISIBLE[:, start:end], offset=start))
    np.testing.assert_allclose(logits, whole[:, start:end], atol=1e-5,
                               err_msg=f'nodes {start}..{end - 1}')


@pytest.mark.parametrize('name', MODELS)
def test_the_accepted_path_moved_to_its_chain_slots_is_a_chain_decodes_cache(name):
  s = _setup(name)
  tree_cache = s.tree_call()[1]
  # Row 0 accepts root -> 2 -> 5, row 1 root -> 2 -> 4: both moved off their tree slots.
  path = np.array([PATHS[0][5], PATHS[1][4]])  # [B, L]
  moved = _move_path(s.model, tree_cache, path)
  chain_cache = s.decode(s.prefix_cache, s.path_tokens([5, 4])[0], jnp.asarray(BASES))[1]
  filled = np.arange(CACHE_LEN)[None] < (BASES + path.shape[1])[:, None]  # [B, T]
  for got, want, axes in zip(jax.tree.leaves(moved), jax.tree.leaves(chain_cache),
                             jax.tree.leaves(s.model.cache_axes(),
                                             is_leaf=lambda x: isinstance(x, tuple))):
    keep = filled.reshape((2,) + (1,) * (axes.index('length') - 1) + (CACHE_LEN,))
    np.testing.assert_allclose(np.where(keep, got, 0), np.where(keep, want, 0), atol=1e-5)
  after = BASES + path.shape[1]
  got = s.decode(moved, s.next_token, jnp.asarray(after))[0]
  want = s.decode(chain_cache, s.next_token, jnp.asarray(after))[0]
  np.testing.assert_allclose(got, want, atol=ATOL)


def _compacted(s, tree_cache, nodes, n):
  """The core's compaction of each row's path to `nodes` (tree slots, root 0) kept to
  depth n [B]: `specjax.core.tree.compact`, the root at slot BASES."""
  path = np.full((2, MAX_PATH - 1), -1, np.int32)
  for b, node in enumerate(nodes):
    kept = [m - 1 for m in PATHS[b][node][1:]][:int(n[b])]  # node index = tree slot - 1
    path[b, :len(kept)] = kept
  return core_tree.compact(tree_cache, s.model.cache_axes(), jnp.asarray(BASES),
                           jnp.asarray(path), jnp.asarray(n, jnp.int32),
                           PARENTS.shape[1] - 1)


def _same_prefix(got_cache, want_cache, model, filled_to) -> bool:
  """Whether two caches agree on every row's slots below filled_to [B]."""
  filled = np.arange(CACHE_LEN)[None] < np.asarray(filled_to)[:, None]  # [B, T]
  for got, want, axes in zip(jax.tree.leaves(got_cache), jax.tree.leaves(want_cache),
                             jax.tree.leaves(model.cache_axes(),
                                             is_leaf=lambda x: isinstance(x, tuple))):
    keep = filled.reshape((2,) + (1,) * (axes.index('length') - 1) + (CACHE_LEN,))
    if not np.allclose(np.where(keep, got, 0), np.where(keep, want, 0), atol=1e-5):
      return False
  return True


@pytest.mark.parametrize('name', MODELS)
def test_core_compaction_leaves_a_chain_decodes_cache(name):
  """`core.tree.compact` on each model's own cache after a tree call: row 0 keeps root ->
  2 -> 5 (both nodes off their chain slots), row 1 root -> 2 only (n = 1); the cache
  then equals a chain decode's of the kept tokens, and the next token scores alike. The
  negative controls differ from it: the cache left as the tree call wrote it, and row 0's
  other path of the same depth (root -> 1 -> 4) compacted instead."""
  s = _setup(name)
  tree_cache = s.tree_call()[1]
  n = np.array([2, 1])
  moved = _compacted(s, tree_cache, [5, 2], n)
  chain_cache = s.decode(s.prefix_cache, s.path_tokens([5, 2])[0], jnp.asarray(BASES))[1]
  assert _same_prefix(moved, chain_cache, s.model, BASES + 1 + n)
  after = BASES + 1 + n
  got = s.decode(moved, s.next_token, jnp.asarray(after))[0]
  want = s.decode(chain_cache, s.next_token, jnp.asarray(after))[0]
  np.testing.assert_allclose(got, want, atol=ATOL)
  assert not _same_prefix(tree_cache, chain_cache, s.model, BASES + 1 + n)
  wrong = _compacted(s, tree_cache, [4, 2], n)  # another path of the same depths
  assert not _same_prefix(wrong, chain_cache, s.model, BASES + 1 + n)


@pytest.mark.parametrize('name', ['t5', 'llama'])
def test_hidden_state_feeds_the_logits(name):
  s = _setup(name)
  logits, _, hidden = s.tree_call(return_hidden=True)
  assert hidden.shape == PARENTS.shape + (s.model.config.emb_dim,)
  np.testing.assert_allclose(logits, s.tree_call()[0], atol=1e-6)
  np.testing.assert_allclose(_output_projection(name, s.params, hidden), logits, atol=ATOL)


@pytest.mark.parametrize('name', MODELS)
def test_a_chain_call_equals_one_token_calls(name):
  s = _setup(name)
  path, _ = s.path_tokens([5, 4])
  whole, whole_cache = s.decode(s.prefix_cache, path, jnp.asarray(BASES))
  cache = s.prefix_cache
  for k in range(MAX_PATH):
    logits, cache = s.decode(cache, path[:, k:k + 1], jnp.asarray(BASES + k))
    np.testing.assert_allclose(logits[:, 0], whole[:, k], atol=ATOL)
  for got, want in zip(jax.tree.leaves(cache), jax.tree.leaves(whole_cache)):
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_table_models_take_a_tree():
  """A Markov chain's logits depend on each token alone: a tree call is the chain call."""
  tokens, tree = jnp.array([[3, 4, 5]]), base.Tree(
      base=jnp.array([0]), offset=jnp.array([0]), depth=jnp.array([[0, 1, 1]]),
      visible=jnp.array([[[1, 0, 0], [1, 1, 0], [1, 0, 1]]], bool))
  markov = MarkovModel(8)
  params = markov.init(jax.random.PRNGKey(0))
  chain = markov.decode(params, {}, {}, tokens, jnp.array([0]))[0]
  np.testing.assert_array_equal(markov.decode(params, {}, {}, tokens, tree.base, tree)[0],
                                chain)
  assert not np.array_equal(chain[0, 0], chain[0, 1])  # the comparison can fail
  with pytest.raises(NotImplementedError, match='hidden'):
    markov.decode(params, {}, {}, tokens, jnp.array([0]), return_hidden=True)