"""The proposer protocol: what drafts the tokens that the target verifies.

A proposer owns its state (a draft model's KV cache, nothing at all for a copy of the
input or a bigram table, later heads or n-gram pools), proposes a tree of N nodes per row
below each row's last token, and is told what the target accepted. A chain of G drafts
is the tree whose node i has parent i - 1; the token and block rules read chains, the tree
rule (`specjax.core.tree_accept`) any tree. The loop (`specjax.core.steps`,
`specjax.core.tree_steps`) speaks to a proposer only through this protocol; a draft model
becomes one through `specjax.core.model_proposer.as_proposer`.

Exactness needs one thing of a proposer: the children of a node are drawn independently of
the target's randomness and of each other, each from the distribution it reports (`q`,
a one-hot for a deterministic choice such as a top-k or a copied token).

Shape letters: B rows, N nodes (G for a chain), M = N + 1 tree slots, D depth, V vocab,
W sequence width, P decoder prompt length.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional, Protocol

import jax
import jax.numpy as jnp
import numpy as np

PyTree = Any


class Proposal(NamedTuple):
  """A tree of N nodes per row below each row's last token (the root, depth 0).

  Attributes:
    tokens: [B, N] int32, the nodes' tokens, breadth-first (a parent before its children).
    parents: [B, N] int32, each node's parent (-1 the root).
    depth: [B, N] int32, each node's depth, 1 .. D.
    visible: [B, M, M] (or [M, M] when every row has the same shape) bool,
      ancestor-or-self of each tree slot (slot 0 the root, slot i + 1 node i): the verify
      call's mask and the accepted path's lookup, made once.
    q: [B, N, V] float32, the distribution each token was drawn from (a one-hot for a
      deterministic choice); None when greedy.
    state: the proposer's state after proposing (`Proposer.accepted` gets it back).
    nonfinite: [B] bool, rows whose draft scores held a NaN or an infinity.
    drafted: [B] int32, how many of the N nodes each row proposes (a chain cut short by a
      confidence threshold proposes fewer; otherwise N).
    slots: [B, N] int32, the proposer's own scratch slot of each node (a draft model's
      tree cache layout), or None when its state has no tree layout.
    scratch: the number of those scratch slots (static).
  """

  tokens: jax.Array
  parents: jax.Array
  depth: jax.Array
  visible: Any
  q: Optional[jax.Array]
  state: Any
  nonfinite: jax.Array
  drafted: jax.Array
  slots: Optional[jax.Array] = None
  scratch: int = 0


class Scorer(NamedTuple):
  """Next-token scores of a proposer that is not a model, in the shape the chain and tree
  builders (`specjax.core.steps.draft_block`, `specjax.core.tree_draft`) read from a draft
  model: `decode(state, tokens [B, K], positions [B], tree=None)` -> (logits [B, K, V],
  state), the logits after each token.

  Attributes:
    decode: that function.
  """

  decode: Callable


def chain(tokens: jax.Array, q: Optional[jax.Array], state: Any, nonfinite: jax.Array,
          drafted: jax.Array) -> Proposal:
  """The Proposal of a chain of G drafts x [B, G] (node i's parent is i - 1)."""
  batch, gamma = tokens.shape
  rows = lambda a: jnp.broadcast_to(jnp.asarray(a, jnp.int32), (batch, gamma))
  visible = np.tril(np.ones((gamma + 1, gamma + 1), bool))  # [M, M]: every earlier slot
  return Proposal(tokens=tokens, parents=rows(np.arange(gamma) - 1),
                  depth=rows(np.arange(1, gamma + 1)), visible=visible, q=q, state=state,
                  nonfinite=nonfinite, drafted=drafted)


def chain_path(n: jax.Array, gamma: int) -> jax.Array:
  """The accepted nodes of a chain whose first n [B] drafts were accepted: [B, G] (-1
  past n)."""
  nodes = jnp.arange(gamma, dtype=jnp.int32)[None]
  return jnp.where(nodes < n[:, None], nodes, -1)


class Proposer(Protocol):
  """What the decode loop needs of a proposer.

  A proposer is a static, hashable description (as a model is); its params (a draft
  model's weights, a bigram table, {} for a copy) are passed to every call, never closed
  over. Its per-row state is laid out like a model's cache: `init_cache` and
  `cache_axes` (each leaf names its 'batch' axis, and its 'length' axis where it has one),
  so a mesh shards it and a refill resets it as it does a cache. A proposer that drafts
  from the target's own layers sets `reads_target` (see `draft_view`), and one whose
  layers are the target's first ones may draft in the target's own cache
  (`shares_cache`); one that drafts from the target's hidden states sets `wants_hidden`
  (see `wants_hidden`).

  Attributes:
    vocab_size: V, the target's.
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  eos_id: int
  pad_id: int

  def init(self, rng: jax.Array) -> PyTree:
    """Params (random for a model, a uniform table, {})."""

  def param_axes(self) -> PyTree:
    """The params' logical axes."""

  def encode(self, params: PyTree, inputs: jax.Array) -> PyTree:
    """What it keeps of each input [B, S] (an encoder's output, the source ids)."""

  def encoded_axes(self) -> PyTree:
    """Its leaves' logical axes."""

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> PyTree:
    """Its per-row state for sequences of `length` W."""

  def cache_axes(self) -> PyTree:
    """The state's logical axes."""

  def prefill(self, params: PyTree, encoded: PyTree, state: PyTree,
              prompt: jax.Array) -> PyTree:
    """The state after the decoder prompt [B, P] (its last token comes with the first
    proposal)."""

  def propose(self, params: PyTree, encoded: PyTree, state: PyTree, seq: jax.Array,
              pos: jax.Array, keys: Optional[jax.Array], sampling: Any, cfg: Any,
              active: Optional[jax.Array] = None) -> Proposal:
    """The tree below each row's last token.

    Args:
      params, encoded, state: its own (`draft_view`: with the target's where it reads
        the target).
      seq: [B, W] int32, the rows' committed tokens; pos: [B] the last one's position.
      keys: [D, B, ...] a key per depth (a chain: per draft) and row; None when greedy.
      sampling: the rows' `specjax.core.sampling.SamplingParams`.
      cfg: the `specjax.core.state.LoopConfig`: cfg.tree the shape (None: a chain of
        cfg.gamma drafts), cfg.sampling the static mode, cfg.rule the threshold.
      active: [B] bool, the rows still decoding.
    """

  def accepted(self, state: PyTree, proposal: Proposal, path: jax.Array, n: jax.Array,
               pos: jax.Array) -> PyTree:
    """The state once the target kept path [B, D] (node indices, -1 past n [B]) below the
    root at pos [B]."""


def reads_target(draft) -> bool:
  """Whether `draft` drafts from the target's own params and encoding (layer-skip; its
  `reads_target` attribute): it is then handed both, {'target': the target's, 'own': its
  own}."""
  return bool(getattr(draft, 'reads_target', False))


def shares_cache(draft) -> bool:
  """Whether `draft` drafts in the target's own cache (layer-skip; its `shares_cache`
  attribute).

  Its layers are the target's first M, so the target's cache already holds their K/V of
  every committed token. The loop then hands `propose` the target's cache as the state and
  verifies with the proposal's state. The draft writes only at the row's last position and
  after: slots that the target writes before it reads them (the verify call's own, and
  any past them in a later call), so the target's cache holds the target's own K/V of
  the committed tokens, as it would alone.
  The proposer keeps no state of its own (`init_cache` is empty) and `accepted` is not
  called.
  """
  return bool(getattr(draft, 'shares_cache', False))


def wants_hidden(draft) -> bool:
  """Whether `draft` drafts from the target's final hidden states (Medusa heads, EAGLE;
  its `wants_hidden` attribute): the verify call then returns them, and `accepted` gets
  hidden [B, D+1, H], the target's at the root and at each kept node in path order
  (entries past n are the root's: unused). hidden[b, n[b]] is the one after the last kept
  token, whose logits chose the next root."""
  return bool(getattr(draft, 'wants_hidden', False))


def wants_scores(draft) -> bool:
  """Whether `draft` learns from the target's verdict on every node it proposed (lookahead
  decoding's Jacobi window; its `wants_scores` attribute): `accepted` then gets
  target_tokens [B, M], the target's argmax after each tree slot (slot 0 the root, slot
  i + 1 node i), accepted or not."""
  return bool(getattr(draft, 'wants_scores', False))


def max_depth(draft) -> Optional[int]:
  """The most tokens below the root `draft` can propose (Medusa heads: as many as they are;
  its `max_depth` attribute), or None for no bound."""
  return getattr(draft, 'max_depth', None)


def min_depth(draft) -> int:
  """The fewest tokens below the root `draft` can propose as a chain (a horizontal cascade:
  one more than its first proposer's; its `min_depth` attribute), else 1."""
  return getattr(draft, 'min_depth', 1)


def draft_view(draft, tp: PyTree, dp: PyTree, target_enc: PyTree,
               draft_enc: PyTree) -> tuple:
  """The (params, encoding) a proposer drafts with: its own, or for one that reads the
  target (`reads_target`) {'target': ..., 'own': ...} of each."""
  if reads_target(draft):
    return {'target': tp, 'own': dp}, {'target': target_enc, 'own': draft_enc}
  return dp, draft_enc


class Stateless:
  """The state methods of a proposer that keeps none (a copy, a bigram table; layer-skip,
  which drafts in the target's cache: `shares_cache`)."""

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> dict:
    """No state: what it reads is the committed sequence the loop passes."""
    del batch, length, dtype
    return {}

  def cache_axes(self) -> dict:
    return {}

  def prefill(self, params, encoded, state, prompt: jax.Array) -> dict:
    del params, encoded, prompt
    return state

  def accepted(self, state, proposal, path, n, pos):
    """Nothing to update."""
    del proposal, path, n, pos
    return state
