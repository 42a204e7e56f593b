"""Lookahead decoding: the target drafts for itself by Jacobi iteration, with no draft model.

Each row keeps a window of W guesses of its next tokens and a pool of n-grams (N tokens
each). One target call verifies one tree below the row's last token, the root, with two
branches under one tree mask:

- the lookahead branch: the window, a chain g_1 .. g_W. The target's argmax after the root
  and after each g_d is a Jacobi step of the window: h_0 is the true next token, h_d the
  target's guess of the token after g_1 .. g_d. The next window is h_0 .. h_(W-1), moved
  past the tokens the call committed;
- the verification branch: up to G n-grams of the pool that begin with the root's token,
  their N - 1 tokens after it.

Both branches are one trie (`specjax.proposers.trie`: shared prefixes are one node; the
window's W nodes always come first) of W + G (N - 1) nodes at most, so the target scores
the window (the lookahead) and the candidates (the verification) in the same call, in fixed
shapes. The pool then takes the window's new n-grams, N consecutive tokens of
h_0 .. h_(W-1) each (the Jacobi trajectory), in a ring of fixed capacity per row. Every
node is a point mass: the exact tree rule keeps the target's output (greedy) and its
distribution (sampled); the guesses come from the target's argmax of earlier calls, never
from this call's randomness.

The window and the pool are the proposer's state, laid out as a cache with a 'batch' axis
(a mesh shards it by rows); a row's state starts afresh at its first call and whenever its
root does not move forward (a refilled slot's new input), so each input's proposals depend
on its own decode alone.

Shape letters: B rows, W window, N n-gram size, G guesses verified, P pool capacity,
M tree slots, D depth.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import tree as tree_lib
from specjax.core.state import LoopConfig, gather_rows
from specjax.proposers import copy as copy_lib
from specjax.proposers import trie

# The window's weight in the trie: above anything G n-grams can sum to, so its W nodes
# are always verified.
WINDOW_WEIGHT = 1e6


@dataclasses.dataclass(frozen=True)
class LookaheadDraft(copy_lib.SourceReader):
  """Lookahead decoding's proposer (module doc). No params.

  Attributes:
    vocab_size: V (the target's).
    window: W >= 1, the Jacobi window.
    ngram: N >= 2, the n-grams' length.
    guesses: G >= 1, the n-grams verified per call.
    pool: P, the n-grams kept per row.
    source: an encoder-decoder's input seeds a row's pool (its first P n-grams).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  window: int = 5
  ngram: int = 3
  guesses: int = 4
  pool: int = 64
  source: bool = True
  eos_id: int = 1
  pad_id: int = 0
  wants_scores = True

  def __post_init__(self):
    for name, least in (('window', 1), ('ngram', 2), ('guesses', 1)):
      if getattr(self, name) < least:
        raise ValueError(f'lookahead needs {name} >= {least}, got {getattr(self, name)}')
    if self.pool < self.guesses:
      raise ValueError(f'a lookahead pool of {self.pool} n-grams cannot supply '
                       f'{self.guesses} guesses')

  def tree_spec(self) -> tree_lib.DynamicTree:
    """The tree every call verifies: W + G (N - 1) nodes, max(W, N - 1) deep."""
    nodes = self.window + self.guesses * (self.ngram - 1)
    return tree_lib.DynamicTree(nodes, max(self.window, self.ngram - 1), nodes)

  def _seed(self, encoded: dict, batch: int):
    """A fresh pool [B, P, N], the source's first n-grams (-1: none), and how many."""
    empty = jnp.full((batch, self.pool, self.ngram), -1, jnp.int32)
    src = encoded.get('source') if self.source else None
    count = 0 if src is None else min(self.pool, max(src.shape[1] - self.ngram + 1, 0))
    if not count:
      return empty, 0
    grams = jnp.stack([src[:, i:i + self.ngram] for i in range(count)], axis=1)
    grams = jnp.where(jnp.all(grams >= 0, axis=-1, keepdims=True), grams, -1)
    return empty.at[:, :count].set(grams), count

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> dict:
    """An empty window and pool per row; root -1 (no call yet)."""
    del length, dtype
    return {'window': jnp.zeros((batch, self.window), jnp.int32),
            'pool': jnp.full((batch, self.pool, self.ngram), -1, jnp.int32),
            'next': jnp.zeros((batch,), jnp.int32),
            'root': jnp.full((batch,), -1, jnp.int32)}

  def cache_axes(self) -> dict:
    return {'window': ('batch', None), 'pool': ('batch', None, None), 'next': ('batch',),
            'root': ('batch',)}

  def prefill(self, params, encoded, state, prompt: jax.Array) -> dict:
    del params, encoded, prompt
    return state

  def _fresh(self, state: dict, encoded: dict, seq: jax.Array, pos: jax.Array,
             depth: int) -> dict:
    """The state, started afresh in rows whose root did not move forward (the window
    guesses that the last W tokens repeat; the pool seeded by the source), then with the
    n-grams of the tokens committed since the last call."""
    fresh = (pos <= state['root']) | (state['root'] < 0)  # [B]: a new input
    back = jnp.clip(pos[:, None] - self.window + 1 + jnp.arange(self.window)[None], 0,
                    seq.shape[1] - 1)
    guess = jnp.take_along_axis(seq, back, axis=1)  # [B, W]
    pick = lambda new, old: jnp.where(fresh.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)
    seed, seeded = self._seed(encoded, pos.shape[0])
    pool = pick(seed, state['pool'])
    nxt = pick(jnp.full_like(state['next'], seeded % self.pool), state['next'])
    since = jnp.where(fresh, -1, state['root'])  # the last call's root: committed after it
    # The n-grams ending at pos - j, j = 0 .. D (a call commits at most D + 1 tokens).
    ends = pos[:, None] - jnp.arange(depth + 1)[None]  # [B, D+1]
    starts = ends - self.ngram + 1
    ok = (ends > since[:, None]) & (starts >= 0)
    idx = jnp.clip(starts[:, :, None] + jnp.arange(self.ngram)[None, None], 0, seq.shape[1] - 1)
    grams = jnp.take_along_axis(seq[:, None], idx, axis=2)  # [B, D+1, N]
    slots = (nxt[:, None] + jnp.cumsum(ok, axis=1) - 1) % self.pool
    slots = jnp.where(ok, slots, self.pool)  # dropped
    pool = jax.vmap(lambda p, s, g: p.at[s].set(g, mode='drop'))(pool, slots, grams)
    nxt = (nxt + jnp.sum(ok, axis=1)) % self.pool
    return {'window': pick(guess, state['window']), 'pool': pool, 'next': nxt,
            'root': state['root']}

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """The trie of the window and of the pool's n-grams after the root (module doc).

    Raises:
      ValueError: a chain, or a tree other than `tree_spec()`.
    """
    del params, keys, sampling, active
    spec = self.tree_spec()
    if cfg.tree is None or (cfg.tree.num_nodes, cfg.tree.depth_count) != (
        spec.nodes, spec.depth):
      raise ValueError(f'lookahead verifies its window and its n-grams as one tree of '
                       f'{spec.nodes} nodes, {spec.depth} deep: pass --draft '
                       f'lookahead:W,N,G alone (no --gamma, --tree or --tree-nodes)')
    seq, pos = seq.astype(jnp.int32), pos.astype(jnp.int32)
    batch, depth = pos.shape[0], spec.depth
    state = self._fresh(state, encoded, seq, pos, depth)
    root = gather_rows(seq, pos)  # [B]
    pool = state['pool']  # [B, P, N]
    age = (state['next'][:, None] - 1 - jnp.arange(self.pool)[None]) % self.pool  # [B, P]
    match = pool[:, :, 0] == root[:, None]
    rank = jnp.where(match, self.pool - age, 0)  # the newest first
    best, where = jax.lax.top_k(rank, self.guesses)  # [B, G]
    grams = jnp.take_along_axis(pool, where[:, :, None], axis=1)[:, :, 1:]  # [B, G, N-1]
    pad = lambda a, width: jnp.pad(a, ((0, 0), (0, 0), (0, depth - width)))
    cont = jnp.concatenate([pad(state['window'][:, None], self.window),
                            pad(grams, self.ngram - 1)], axis=1)  # [B, 1+G, D]
    ok_window = jnp.broadcast_to(jnp.arange(depth) < self.window, (batch, 1, depth))
    ok_grams = ((best > 0)[:, :, None] & (jnp.arange(depth) < self.ngram - 1)[None, None]
                & (pad(grams, self.ngram - 1) >= 0))
    valid = jnp.concatenate([ok_window, ok_grams], axis=1)
    valid = jnp.cumsum(~valid, axis=-1) == 0
    weight = jnp.concatenate([jnp.full((batch, 1), WINDOW_WEIGHT),
                              jnp.ones((batch, self.guesses))], axis=1)
    proposal, node_of = trie.tree_and_nodes(jnp.maximum(cont, 0), valid, weight, spec.nodes,
                                            self.eos_id, self.vocab_size,
                                            cfg.sampling.greedy, state)
    window_nodes = node_of[:, 0, :self.window]  # [B, W]: the node of g_1 .. g_W
    return proposal._replace(state={**state, 'nodes': window_nodes})

  def accepted(self, state, proposal, path, n, pos, target_tokens=None) -> dict:
    """The next window (the Jacobi step, moved past the n + 1 committed tokens) and the
    pool with the step's n-grams."""
    del proposal, path
    if target_tokens is None:
      raise ValueError('lookahead learns from the target\'s verdict on every node: the loop '
                       'passes it (wants_scores)')
    w, size = self.window, self.ngram
    nodes = state['nodes']  # [B, W]
    after = jnp.concatenate([jnp.zeros_like(nodes[:, :1]), nodes[:, :w - 1] + 1], axis=1)
    step = jnp.take_along_axis(target_tokens, after, axis=1)  # [B, W]: h_0 .. h_(W-1)
    shift = jnp.clip(n + 1, 0, w)[:, None] + jnp.arange(w)[None]  # [B, W]
    window = jnp.take_along_axis(step, jnp.minimum(shift, w - 1), axis=1)
    count = max(w - size + 1, 0)
    pool, nxt = state['pool'], state['next']
    if count:
      grams = jnp.stack([step[:, i:i + size] for i in range(count)], axis=1)  # [B, c, N]
      slots = (nxt[:, None] + jnp.arange(count)[None]) % self.pool  # [B, c]
      pool = jax.vmap(lambda p, s, g: p.at[s].set(g))(pool, slots, grams)
      nxt = (nxt + count) % self.pool
    return {'window': window, 'pool': pool, 'next': nxt, 'root': pos.astype(jnp.int32)}
