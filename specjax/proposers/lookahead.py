"""Lookahead decoding: the target drafts for itself by Jacobi iteration, with no draft model.

Each row keeps a window of guesses in N - 1 levels of W tokens, as lookahead decoding's
paper lays it out, and a pool of n-grams (N tokens each). One target call verifies one tree
below the row's last token, the root, with two branches under one tree mask:

- the lookahead branch: level 0, the trunk, is a chain g_1 .. g_W of guesses of the next W
  tokens; below its d-th node hangs a branch of levels 1 .. N - 2, each level's d-th token
  one position further on. Every node's target argmax is a Jacobi step: a level's next
  guesses are the level above it, and the top level's next guesses are the target's argmax
  at the tips of the branches. An n-gram is read down each branch, the trunk's d-th token,
  the levels' d-th tokens and the argmax at its tip: each token after the first is what
  the target predicted after the tokens before it, so the pool learns the target's own
  continuations (consecutive guesses of one level were each made after other tokens). All
  levels move past the tokens the call committed;
- the verification branch: up to G n-grams of the pool that begin with the root's token,
  their N - 1 tokens after it, the newest first.

Both branches are one trie (`specjax.proposers.trie`: shared prefixes are one node; the
window's branches are always kept) of (W + G)(N - 1) nodes at most, so the target scores
the lookahead and the verification in the same call, in fixed shapes. The pool keeps the
source's n-grams (an encoder-decoder's input: what a summary copies), the committed text's
and the W n-grams each call reads, in a ring of fixed capacity per row. Every node is a
point mass: the exact tree rule keeps the target's output (greedy) and its distribution
(sampled); the guesses come from the target's argmax of earlier calls, never from this
call's randomness.

The window and the pool are the proposer's state, laid out as a cache with a 'batch' axis
(a mesh shards it by rows); a row's state starts afresh at its first call and whenever its
root does not move forward (a refilled slot's new input), so each input's proposals depend
on its own decode alone. A fresh window guesses an encoder-decoder's output to be its input
copied in place, and a decoder-only row's next tokens to repeat its last ones.

Shape letters: B rows, L = N - 1 levels, W window, N n-gram size, G guesses verified,
P pool capacity, M tree slots, D depth.
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
    ngram: N >= 2, the n-grams' length (the window's N - 1 levels).
    guesses: G >= 1, the n-grams verified per call.
    pool: P, the n-grams kept per row.
    source: an encoder-decoder's input seeds a row's pool (its first P n-grams) and its
      window's first guesses (`_first_guesses`).
    window_from_source: off, the window's first guesses are the row's last tokens
      whatever `source` says (as before the source seeded them; compared in
      scripts/lookahead_trees.py).
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  window: int = 5
  ngram: int = 3
  guesses: int = 4
  pool: int = 256
  source: bool = True
  window_from_source: bool = True
  eos_id: int = 1
  pad_id: int = 0
  wants_scores = True

  def __post_init__(self):
    for name, least in (('window', 1), ('ngram', 2), ('guesses', 1)):
      if getattr(self, name) < least:
        raise ValueError(f'lookahead needs {name} >= {least}, got {getattr(self, name)}')
    if self.pool < max(self.guesses, self.window):
      raise ValueError(f'a lookahead pool of {self.pool} n-grams cannot take the '
                       f'{self.window} a call reads and supply {self.guesses} guesses')

  @property
  def levels(self) -> int:
    """L = N - 1, the window's levels."""
    return self.ngram - 1

  def tree_spec(self) -> tree_lib.DynamicTree:
    """The tree every call verifies: (W + G)(N - 1) nodes, W + N - 2 deep."""
    nodes = (self.window + self.guesses) * self.levels
    return tree_lib.DynamicTree(nodes, self.window + self.levels - 1, nodes)

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
    """An empty window [B, L, W] and pool [B, P, N] per row; root -1 (no call yet)."""
    del length, dtype
    return {'window': jnp.zeros((batch, self.levels, self.window), jnp.int32),
            'pool': jnp.full((batch, self.pool, self.ngram), -1, jnp.int32),
            'next': jnp.zeros((batch,), jnp.int32),
            'root': jnp.full((batch,), -1, jnp.int32)}

  def cache_axes(self) -> dict:
    return {'window': ('batch', None, None), 'pool': ('batch', None, None),
            'next': ('batch',), 'root': ('batch',)}

  def prefill(self, params, encoded, state, prompt: jax.Array) -> dict:
    del params, encoded, prompt
    return state

  def _first_guesses(self, encoded: dict, seq: jax.Array, pos: jax.Array) -> jax.Array:
    """A fresh row's window [B, L, W]: level l's d-th guess, for the token d + l places
    after the root, is the source's token at pos + d + l (an encoder-decoder's output
    guessed as its input copied in place); where the source holds none there (or
    `source` is off: a decoder-only target), the row's last W tokens, level l starting
    l places on (the root repeated past its end).

    Jacobi iteration may start from any guesses. The row's own last tokens are all one
    token at an encoder-decoder's first call (the decoder's start), so every column of
    the window would be the same guess and every branch read the same n-gram; the source
    gives each column its own (the EnDe task's greedy tokens per call 1.15 against 1.28
    with W, N, G = 5, 3, 4: docs/benchmarks.md, "Lookahead decoding").
    """
    offset = jnp.arange(self.window)[None, None] + jnp.arange(self.levels)[None, :, None]
    back = jnp.clip(pos[:, None, None] - self.window + 1 + offset, 0, pos[:, None, None])
    guess = jnp.take_along_axis(seq[:, None], back, axis=2)  # [B, L, W]
    src = encoded.get('source') if self.source and self.window_from_source else None
    if src is None:
      return guess
    at = jnp.clip(pos[:, None, None] + offset, 0, src.shape[1] - 1)  # [B, L, W]
    copied = jnp.take_along_axis(src[:, None], at, axis=2)
    return jnp.where(copied >= 0, copied, guess)  # padding (negative) is no guess

  def _fresh(self, state: dict, encoded: dict, seq: jax.Array, pos: jax.Array,
             depth: int) -> dict:
    """The state, started afresh in rows whose root did not move forward (the window's
    first guesses, `_first_guesses`; the pool seeded by the source), then with the
    n-grams of the tokens committed since the last call."""
    fresh = (pos <= state['root']) | (state['root'] < 0)  # [B]: a new input
    guess = self._first_guesses(encoded, seq, pos)
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
    pool, nxt = self._push(pool, nxt, grams, ok)
    return {'window': pick(guess, state['window']), 'pool': pool, 'next': nxt,
            'root': state['root']}

  def _push(self, pool: jax.Array, nxt: jax.Array, grams: jax.Array, ok: jax.Array):
    """(pool, next) with the n-grams grams [B, K, N] where ok [B, K] in the ring's next
    slots."""
    slots = (nxt[:, None] + jnp.cumsum(ok, axis=1) - 1) % self.pool
    slots = jnp.where(ok, slots, self.pool)  # dropped
    pool = jax.vmap(lambda p, s, g: p.at[s].set(g, mode='drop'))(pool, slots, grams)
    return pool, (nxt + jnp.sum(ok, axis=1)) % self.pool

  def _branches(self, window: jax.Array, depth: int) -> jax.Array:
    """[B, W, D]: branch d is the trunk's first d + 1 tokens, then the d-th token of each
    level 1 .. L - 1 (window [B, L, W]); the rest of its depth repeats its last."""
    j = jnp.arange(depth)[None, :]  # [1, D]
    d = jnp.arange(self.window)[:, None]  # [W, 1]
    level = jnp.where(j <= d, 0, jnp.clip(j - d, 0, self.levels - 1))  # [W, D]
    column = jnp.where(j <= d, j, d)
    return window[:, level, column]

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """The trie of the window's branches and of the pool's n-grams after the root (module
    doc).

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
    batch, depth, w = pos.shape[0], spec.depth, self.window
    state = self._fresh(state, encoded, seq, pos, depth)
    root = gather_rows(seq, pos)  # [B]
    pool = state['pool']  # [B, P, N]
    age = (state['next'][:, None] - 1 - jnp.arange(self.pool)[None]) % self.pool  # [B, P]
    match = pool[:, :, 0] == root[:, None]
    rank = jnp.where(match, self.pool - age, 0)  # the newest first
    best, where = jax.lax.top_k(rank, self.guesses)  # [B, G]
    grams = jnp.take_along_axis(pool, where[:, :, None], axis=1)[:, :, 1:]  # [B, G, N-1]
    grams = jnp.pad(grams, ((0, 0), (0, 0), (0, depth - self.levels)))
    cont = jnp.concatenate([self._branches(state['window'], depth), grams], axis=1)
    ok_window = jnp.broadcast_to(jnp.arange(depth)[None] <= jnp.arange(w)[:, None]
                                 + self.levels - 1, (batch, w, depth))
    ok_grams = ((best > 0)[:, :, None] & (jnp.arange(depth) < self.levels)[None, None]
                & (grams >= 0))
    valid = jnp.concatenate([ok_window, ok_grams], axis=1)
    valid = jnp.cumsum(~valid, axis=-1) == 0
    weight = jnp.concatenate([jnp.full((batch, w), WINDOW_WEIGHT),
                              jnp.ones((batch, self.guesses))], axis=1)
    proposal, node_of = trie.tree_and_nodes(jnp.maximum(cont, 0), valid, weight, spec.nodes,
                                            self.eos_id, self.vocab_size,
                                            cfg.sampling.greedy, state)
    tips = node_of[:, jnp.arange(w), jnp.arange(w) + self.levels - 1]  # [B, W]
    return proposal._replace(state={**state, 'nodes': tips})

  def accepted(self, state, proposal, path, n, pos, target_tokens=None) -> dict:
    """The next window (the Jacobi step, moved past the n + 1 committed tokens) and the
    pool with the n-grams read down the branches."""
    del proposal, path
    if target_tokens is None:
      raise ValueError('lookahead learns from the target\'s verdict on every node: the loop '
                       'passes it (wants_scores)')
    w, window = self.window, state['window']  # [B, L, W]
    top = jnp.take_along_axis(target_tokens, state['nodes'] + 1, axis=1)  # [B, W]: the tips'
    grams = jnp.concatenate([jnp.swapaxes(window, 1, 2), top[:, :, None]], axis=2)  # [B,W,N]
    pool, nxt = self._push(state['pool'], state['next'], grams,
                           jnp.ones(grams.shape[:2], bool))
    levels = jnp.concatenate([window[:, 1:], top[:, None]], axis=1)  # [B, L, W]
    shift = jnp.minimum(jnp.clip(n, 0, w - 1)[:, None] + jnp.arange(w)[None], w - 1)
    levels = jnp.take_along_axis(levels, jnp.broadcast_to(shift[:, None], levels.shape), 2)
    return {'window': levels, 'pool': pool, 'next': nxt, 'root': pos.astype(jnp.int32)}
