"""Cascades: proposers composed of proposers (Cascade Speculative Drafting).

- Vertical (`VerticalCascade`): the draft model's own chain of G tokens is itself drafted
  speculatively. A cheaper proposer that reads only the sequence (a bigram table, copy,
  REST, suffix) proposes k tokens after the chain so far, the draft model scores them in ONE
  call, and the exact token rule (greedy: exact match) keeps a prefix plus one token of the
  draft's own, until the chain holds G tokens. Each token of the chain is then distributed
  exactly as the draft model alone would have drawn it (the token rule's exactness, with
  the draft in the target's place), and the distribution reported for it is the draft's
  own, so the target's rule stays exact; greedy, the chain is the draft's own argmax chain,
  token for token. What changes is the draft's cost: about G / (tokens per draft call)
  calls of k + 1 tokens in place of G calls of one. The first call also feeds the token
  before the chain's last, as a chain's first call does, so that the draft's cache catches
  up after a fully accepted block without a call of its own. A batch's calls are those of
  its slowest row; with a cap of C calls (`max_calls`) a row still short of G after C
  calls proposes the tokens it holds (the proposal's `drafted`, as a chain cut short by a
  confidence threshold), which stays exact: the target verifies what was proposed.
- Horizontal (`HorizontalCascade`): proposers by depth: the first K drafts from one
  proposer (the better one: the draft model), the rest from another that reads the
  sequence (the cheaper one), which continues after the first's drafts.

Both propose chains. Shape letters: B rows, G gamma (the chain), k the inner proposer's
drafts per call, W sequence width, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import acceptance, sampling as sampling_lib
from specjax.core import proposal as proposal_lib
from specjax.core import steps
from specjax.core.model_proposer import as_proposer
from specjax.core.state import LoopConfig, gather_rows
from specjax.models import base


def _write(rows: jax.Array, block: jax.Array, start: jax.Array) -> jax.Array:
  """rows [B, X, ...] with block [B, K, ...] written at column start [B] of each row."""
  def one(row, new, at):
    return jax.lax.dynamic_update_slice_in_dim(row, new.astype(row.dtype), at, 0)
  return jax.vmap(one)(rows, block, start)


def _window(rows: jax.Array, start: jax.Array, size: int) -> jax.Array:
  """[B, size, ...]: columns start .. start + size - 1 [B] of rows [B, X, ...]."""
  return jax.vmap(lambda row, at: jax.lax.dynamic_slice_in_dim(row, at, size, 0))(rows, start)


def _reads_sequence(proposer) -> None:
  """Raises a one-line ValueError for an inner proposer with state of its own."""
  if proposer.init_cache(1, 1) != {}:
    raise ValueError('the cheaper proposer of a cascade must read only the sequence (bigram, '
                     'copy, rest, suffix): it drafts after the draft\'s own tokens, which '
                     'it never saw')


def _keys(keys: Optional[jax.Array], i, count: int):
  """count [count, B, ...] keys of iteration i, from each row's first key (None: greedy)."""
  if keys is None:
    return None
  row = jax.vmap(jax.random.fold_in, (0, None))(keys[0], i)
  return jnp.swapaxes(jax.vmap(lambda k: jax.random.split(k, count))(row), 0, 1)


@dataclasses.dataclass(frozen=True)
class VerticalCascade:
  """The draft model's chain, drafted by `inner` and verified by the draft (module doc).

  Params {'draft': the model's, 'inner': the inner proposer's}; the state is the draft
  model's cache, k + 1 slots longer than the sequence (its last call may run past G).

  Attributes:
    draft: the draft model (`specjax.models.base.Model`).
    inner: a proposer that reads only the sequence (`proposal.Stateless`).
    inner_gamma: k, the inner proposer's drafts per call of the draft model.
    max_calls: C, the draft model's calls per proposal at most (None: until every row
      holds G tokens, at most G calls).
  """

  draft: Any
  inner: Any
  inner_gamma: int = 3
  max_calls: Optional[int] = None

  def __post_init__(self):
    _reads_sequence(self.inner)
    if self.inner_gamma < 1:
      raise ValueError(f'a cascade\'s inner proposer drafts k >= 1 tokens per call, got '
                       f'{self.inner_gamma}')
    if self.max_calls is not None and self.max_calls < 1:
      raise ValueError(f'a cascade makes C >= 1 calls of its draft model, got '
                       f'{self.max_calls}')

  @property
  def vocab_size(self) -> int:
    return self.draft.vocab_size

  @property
  def eos_id(self) -> int:
    return self.draft.eos_id

  @property
  def pad_id(self) -> int:
    return self.draft.pad_id

  @property
  def config(self):
    """The draft model's config (sharding rules read head sizes from it)."""
    return getattr(self.draft, 'config', None)

  def init(self, rng: jax.Array) -> dict:
    return {'draft': self.draft.init(rng), 'inner': self.inner.init(rng)}

  def param_axes(self) -> dict:
    return {'draft': self.draft.param_axes(), 'inner': self.inner.param_axes()}

  def encode(self, params, inputs: jax.Array) -> dict:
    return {'draft': self.draft.encode(params['draft'], inputs),
            'inner': self.inner.encode(params['inner'], inputs)}

  def encoded_axes(self) -> dict:
    return {'draft': self.draft.encoded_axes(), 'inner': self.inner.encoded_axes()}

  def init_cache(self, batch: int, length: int, dtype: Any = None):
    """The draft model's cache, k + 1 slots longer than the sequence."""
    return self.draft.init_cache(batch, length + self.inner_gamma + 1, dtype)

  def cache_axes(self):
    return self.draft.cache_axes()

  def prefill(self, params, encoded, state, prompt: jax.Array):
    return base.prefill(self.draft, params['draft'], encoded['draft'], state, prompt)

  def accepted(self, state, proposal, path, n, pos):
    """The draft's cache is rolled back by position (as a chain's)."""
    del proposal, path, n, pos
    return state

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """The draft model's chain of cfg.gamma tokens, k at a time (module doc).

    Raises:
      ValueError: a token tree (a cascade drafts chains).
    """
    if cfg.tree is not None:
      raise ValueError('a cascade drafts chains: drop the tree')
    gamma, k, greedy = cfg.gamma, self.inner_gamma, cfg.sampling.greedy
    calls = gamma if self.max_calls is None else min(gamma, self.max_calls)
    batch = pos.shape[0]
    active = jnp.ones((batch,), bool) if active is None else active
    draft = steps.Bound(self.draft, params['draft'], encoded['draft'])
    inner = steps.Bound(self.inner, params['inner'], encoded['inner'])
    inner_cfg = dataclasses.replace(cfg, gamma=k, tree=None)
    pos = pos.astype(jnp.int32)
    ids = jnp.pad(seq.astype(jnp.int32), ((0, 0), (0, gamma + k + 2)))
    width = gamma + k + 1
    x = jnp.zeros((batch, width), jnp.int32)
    q = None if greedy else jnp.zeros((batch, width, self.vocab_size), jnp.float32)

    def cond(c):
      i, _, _, _, _, made, _ = c
      return (i < calls) & jnp.any(active & (made < gamma))

    def body(c, catch_up=False):
      i, cache, ids, x, q, made, bad = c
      at = pos + jnp.minimum(made, gamma)  # [B], the chain's last token
      step_keys = _keys(keys, i, k + 1)
      guess = inner.propose({}, ids, at, None if greedy else step_keys[:k], sampling,
                            inner_cfg, active & (made < gamma))
      if catch_up:  # the first call: [the token before, the last, the k guesses] (row 0:
        # the last, the guesses, one slot more): the token before may be a fully accepted
        # block's last draft, which the draft's cache never saw (`steps.first_call`).
        fed_at = jnp.maximum(at - 1, 0)  # [B]
        fed = _window(_write(ids, guess.tokens, at + 1), fed_at, k + 2)  # [B, k+2]
      else:
        fed_at = at
        fed = jnp.concatenate([gather_rows(ids, at)[:, None], guess.tokens], axis=1)  # [B, k+1]
      logits, cache = draft.decode(cache, fed, fed_at)  # [B, k+1 (+1), V]
      if catch_up:
        logits = _window(logits, at - fed_at, k + 1)  # [B, k+1, V]: after the last .. each guess
      if greedy:
        result = acceptance.accept_greedy(sampling_lib.argmax(logits), guess.tokens,
                                          guess.drafted)
        own = None
      else:
        own = sampling_lib.warp(logits, sampling, cfg.sampling)  # [B, k+1, V]
        result = acceptance.accept(own, guess.q, guess.tokens, step_keys[k], 1.0,
                                   guess.drafted)
      block = jnp.concatenate([guess.tokens, guess.tokens[:, :1]], axis=1)  # [B, k+1]
      block = jnp.where(jnp.arange(k + 1)[None] == result.n[:, None], result.y[:, None], block)
      going = active & (made < gamma)
      start = jnp.minimum(made, gamma)
      x = jnp.where(going[:, None], _write(x, block, start), x)
      if own is not None:
        q = jnp.where(going[:, None, None], _write(q, own, start), q)
      ids = jnp.where(going[:, None], _write(ids, block, at + 1), ids)
      made = made + jnp.where(going, result.n + 1, 0)
      bad = bad | (going & (steps.nonfinite(logits) | guess.nonfinite))
      return i + 1, cache, ids, x, q, made, bad

    carry = (jnp.int32(0), state, ids, x, q, jnp.zeros((batch,), jnp.int32),
             jnp.zeros((batch,), bool))
    carry = body(carry, catch_up=True)  # every chain takes one call at least
    _, cache, _, x, q, made, bad = jax.lax.while_loop(cond, body, carry)
    # Rows past the cap propose what they hold; rows not decoding, all G as before.
    drafted = jnp.where(active, jnp.minimum(made, gamma), gamma)
    return proposal_lib.chain(x[:, :gamma], None if greedy else q[:, :gamma], cache, bad,
                              drafted)


@dataclasses.dataclass(frozen=True)
class HorizontalCascade:
  """The first `depth` drafts from `first` (a proposer), the rest from `rest`, which reads
  only the sequence and continues after the first's drafts.

  Params, encoding and state {'first': ..., 'rest': ...} (the rest's state is empty).

  Attributes:
    first: the proposer of depths 1 .. K: a draft model as a proposer
      (`specjax.core.model_proposer.as_proposer`), or any proposer of chains that reads
      no hidden states of the target.
    rest: the proposer of the depths after K (bigram, copy, rest, suffix).
    depth: K >= 1.
  """

  first: Any
  rest: Any
  depth: int = 2

  def __post_init__(self):
    _reads_sequence(self.rest)
    if self.depth < 1:
      raise ValueError(f'a horizontal cascade\'s first proposer drafts K >= 1 tokens, got '
                       f'{self.depth}')

  @property
  def min_depth(self) -> int:
    """K + 1: a chain shorter leaves the rest nothing (`specjax.core.proposal.min_depth`)."""
    return self.depth + 1

  @property
  def vocab_size(self) -> int:
    return self.first.vocab_size

  @property
  def eos_id(self) -> int:
    return self.first.eos_id

  @property
  def pad_id(self) -> int:
    return self.first.pad_id

  @property
  def config(self):
    return getattr(self.first, 'config', None)

  def init(self, rng: jax.Array) -> dict:
    return {'first': self.first.init(rng), 'rest': self.rest.init(rng)}

  def param_axes(self) -> dict:
    return {'first': self.first.param_axes(), 'rest': self.rest.param_axes()}

  def encode(self, params, inputs: jax.Array) -> dict:
    return {'first': self.first.encode(params['first'], inputs),
            'rest': self.rest.encode(params['rest'], inputs)}

  def encoded_axes(self) -> dict:
    return {'first': self.first.encoded_axes(), 'rest': self.rest.encoded_axes()}

  def init_cache(self, batch: int, length: int, dtype: Any = None):
    return self.first.init_cache(batch, length, dtype)

  def cache_axes(self):
    return self.first.cache_axes()

  def prefill(self, params, encoded, state, prompt: jax.Array):
    return self.first.prefill(params['first'], encoded['first'], state, prompt)

  def accepted(self, state, proposal, path, n, pos):
    """The first proposer's state, told how many of its K drafts were kept."""
    depth = self.depth
    return self.first.accepted(state, proposal, path[:, :depth], jnp.minimum(n, depth), pos)

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg: LoopConfig, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain: K drafts of the first proposer, then G - K of the rest.

    Raises:
      ValueError: a token tree, or G <= K (nothing left for the rest).
    """
    if cfg.tree is not None:
      raise ValueError('a cascade drafts chains: drop the tree')
    gamma, depth = cfg.gamma, self.depth
    if gamma <= depth:
      raise ValueError(f'a horizontal cascade drafts its first {depth} tokens with one '
                       f'proposer and the rest with the other: pass gamma > {depth}')
    first = self.first.propose(params['first'], encoded['first'], state, seq, pos,
                               None if keys is None else keys[:depth], sampling,
                               dataclasses.replace(cfg, gamma=depth), active)
    ids = jnp.pad(seq.astype(jnp.int32), ((0, 0), (0, depth)))
    ids = _write(ids, first.tokens, pos.astype(jnp.int32) + 1)
    more = self.rest.propose(params['rest'], encoded['rest'], {}, ids, pos + depth,
                             None if keys is None else keys[depth:], sampling,
                             dataclasses.replace(cfg, gamma=gamma - depth), active)
    x = jnp.concatenate([first.tokens, more.tokens], axis=1)
    q = None if first.q is None else jnp.concatenate([first.q, more.q], axis=1)
    # A row proposes past K only if the first proposed all K.
    drafted = jnp.where(first.drafted >= depth, depth + more.drafted, first.drafted)
    return proposal_lib.chain(x, q, first.state, first.nonfinite | more.nonfinite, drafted)


def of_parts(vertical: bool, model: Any, cheap: Any, count: int,
             calls: Optional[int] = None) -> Any:
  """The cascade of a draft model `model` (`specjax.models.base.Model`) and a proposer
  `cheap` that reads only the sequence: vertical, `cheap` drafting `count` tokens per call
  of `model`, in at most `calls` of them; else horizontal, `model`'s first `count` drafts."""
  if vertical:
    return VerticalCascade(model, cheap, count, calls)
  return HorizontalCascade(as_proposer(model), cheap, count)


def params_of(vertical: bool, model_params: Any, cheap_params: Any) -> dict:
  """`of_parts`' cascade's params, from its draft model's and its cheap proposer's."""
  if vertical:
    return {'draft': model_params, 'inner': cheap_params}
  return {'first': model_params, 'rest': cheap_params}
