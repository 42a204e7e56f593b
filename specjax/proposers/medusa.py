"""Medusa heads: K small heads on the target's last hidden state propose the next K tokens.

Head k (k = 1 .. K) reads the target's final hidden state h [D] after the last kept token
(the one whose logits chose the token now at the root) and proposes the token k past the
root: h_k = h + SiLU(h W_k + b_k), then the target's own output projection (frozen;
`Model.project`). A head costs one D x D product per row; the K heads run together, once
per iteration, and none reads a draft token, so a tree is the heads' top tokens per depth:
below every node at depth k - 1 the same top b_k of head k (the Medusa tree).

The target's hidden states come with the verify call (`specjax.core.proposal.wants_hidden`:
the loop asks the target for them and hands the proposer the one after the last kept
token); the params the projection needs are the target's (`reads_target`). The state is
that hidden state [B, D] and the root's position it belongs to [B]: a row whose root has
no hidden state yet (the first call after its prompt, a refilled row) is drafted from a
zero hidden state, the same whatever the row held before, so that sampled outputs do not
depend on the batch or the refill.

Exact like any proposer: a chain of one head per depth draws each token from its head's
warped distribution (q), a tree's several children per depth are point masses; the
target's verify decides. Typical acceptance (Medusa's lossy rule) is not implemented.

Shape letters: B rows, K heads, D the target's hidden width, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import steps, tree_draft
from specjax.proposers.of_target import OfTarget


def head_states(heads: dict, hidden: jax.Array) -> jax.Array:
  """Each head's residual block on hidden [B, D] (or [B, T, D]): [B, K, D] (or
  [B, T, K, D]), h + SiLU(h W_k + b_k)."""
  h = hidden.astype(jnp.float32)
  z = jnp.einsum('...D,KDE->...KE', h, heads['w'].astype(jnp.float32)) + heads['b'].astype(
      jnp.float32)
  return h[..., None, :] + jax.nn.silu(z)


@dataclasses.dataclass(frozen=True)
class MedusaHeads(OfTarget):
  """K Medusa heads over `target`'s hidden states (params {'w': [K, D, D], 'b': [K, D]}).

  Attributes:
    target: the target model (its `project` and sizes).
    num_heads: K, the most tokens past the root a proposal reaches.
  """

  target: Any
  num_heads: int = 4

  wants_hidden = True

  @property
  def max_depth(self) -> int:
    """K: no chain or tree reaches past the heads (`specjax.core.proposal.max_depth`)."""
    return self.num_heads

  @property
  def width(self) -> int:
    """D, the target's hidden width."""
    return self.target.config.emb_dim

  @property
  def config(self):
    """The target's config (sharding rules read sizes from it)."""
    return self.target.config

  def init(self, rng: jax.Array, scale: float = 0.0) -> dict:
    """Zero residuals (W = 0, b = 0, as Medusa initialises them: every head starts as the
    target's own projection of h, which proposes the root again until trained), or
    random W with `scale` > 0 (tests)."""
    w = scale * jax.random.normal(rng, (self.num_heads, self.width, self.width)) / (
        self.width ** 0.5)
    return {'w': w.astype(jnp.float32),
            'b': jnp.zeros((self.num_heads, self.width), jnp.float32)}

  def param_axes(self) -> dict:
    return {'w': (None, 'embed', 'mlp'), 'b': (None, 'mlp')}

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> dict:
    del length, dtype
    return {'hidden': jnp.zeros((batch, self.width), jnp.float32),
            'at': jnp.full((batch,), -1, jnp.int32)}

  def cache_axes(self) -> dict:
    return {'hidden': ('batch', 'embed'), 'at': ('batch',)}

  def prefill(self, params, encoded, state, prompt: jax.Array) -> dict:
    """No hidden state before the first verify."""
    del params, encoded, prompt
    return {'hidden': jnp.zeros_like(state['hidden']), 'at': jnp.full_like(state['at'], -1)}

  def logits(self, params, state, pos: jax.Array, count: Optional[int] = None) -> jax.Array:
    """The first `count` heads' logits (default all K) below each row's root at pos [B]:
    [B, count, V] float32."""
    hidden = jnp.where((state['at'] == pos)[:, None], state['hidden'], 0.0)  # [B, D]
    own = jax.tree.map(lambda a: a[:count], params['own'])
    h = head_states(own, hidden)  # [B, count, D]
    return self.target.project(params['target'], h.astype(jnp.dtype(
        self.target.config.dtype)))

  def _check(self, depth: int, what: str) -> None:
    if depth > self.num_heads:
      raise ValueError(f'{what} drafts {depth} tokens deep but the Medusa heads reach '
                       f'{self.num_heads}: pass a gamma or tree depth <= {self.num_heads}')

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma head tokens, or the tree cfg.tree of the heads' top tokens."""
    del encoded, active
    depth = cfg.tree.depth_count if cfg.tree is not None else cfg.gamma
    self._check(depth, 'the tree' if cfg.tree is not None else f'gamma {cfg.gamma}')
    heads = self.logits(params, state, pos, depth)  # [B, D, V]: the heads the depth needs
    if cfg.tree is not None:
      # The tree grower's calls: the nodes fed at depth d - 1 get head d.
      scorer = proposal_lib.Scorer(self._tree_scores(heads, pos))
      p = tree_draft.propose(scorer, state, seq, pos, keys, sampling, cfg)
      return p._replace(slots=None, scratch=0)
    scorer = proposal_lib.Scorer(self._chain_scores(heads, pos))
    d = steps.draft_block(scorer, state, seq, pos, keys, sampling, cfg)
    return proposal_lib.chain(d.x, d.q, state, d.nonfinite, d.confidence)

  def _chain_scores(self, heads: jax.Array, root: jax.Array):
    """A chain builder's scores: after the token at position p, head p - root + 1."""
    def decode(state, tokens, positions, tree=None):
      del tree
      at = positions[:, None] + jnp.arange(tokens.shape[1])[None] - root[:, None]  # [B, K']
      return self._pick(heads, at), state
    return decode

  def _tree_scores(self, heads: jax.Array, root: jax.Array):
    """A tree grower's scores: after a node at depth d (its slot's depth), head d + 1."""
    def decode(state, tokens, positions, tree=None):
      if tree is None:  # the catch-up of positions p - 1, p: the root is the last
        at = positions[:, None] + jnp.arange(tokens.shape[1])[None] - root[:, None]
      else:
        slots = tree.offset[:, None] + jnp.arange(tokens.shape[1])[None]  # [B, K']
        at = jnp.take_along_axis(tree.depth, slots, axis=1)
      return self._pick(heads, at), state
    return decode

  def _pick(self, heads: jax.Array, at: jax.Array) -> jax.Array:
    """heads [B, D, V] at depth `at` [B, K'] (0: the root, head 1): [B, K', V]."""
    index = jnp.clip(at, 0, heads.shape[1] - 1)
    return jnp.take_along_axis(heads, index[..., None], axis=1)

  def accepted(self, state, proposal, path, n, pos, hidden=None) -> dict:
    """The target's hidden state after the last kept token, for the root at pos + n + 1."""
    del proposal, path
    if hidden is None:
      return state
    last = jnp.take_along_axis(hidden, n[:, None, None], axis=1)[:, 0]  # [B, D]
    return {'hidden': last.astype(jnp.float32), 'at': (pos + n + 1).astype(jnp.int32)}
