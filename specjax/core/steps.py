"""One iteration of the decode loop: draft G tokens, verify them in ONE target call,
accept, commit (or, for the target alone, one token per call).

`draft_step`, `draft_block` and `verify` are the functions the benchmark times as the
costs c and v(K) of the paper's formula; the loop runs exactly these. Shape letters:
B rows, G gamma, V vocab, W sequence width.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from specjax.core import acceptance, sampling
from specjax.core.sampling import SamplingParams
from specjax.core.state import DecodeState, DecodeStats, LoopConfig, commit, gather_rows, split_keys


class Bound(NamedTuple):
  """A model with its params and the encoding of the rows it decodes.

  Attributes:
    model: the model (the contract of `specjax.models.base.Model`).
    params: its params pytree.
    encoded: what `model.encode` returned for these rows ([B, ...] leaves).
  """

  model: Any
  params: Any
  encoded: Any

  def decode(self, cache, tokens: jax.Array, positions: jax.Array):
    """model.decode of tokens [B, K] at positions [B]: (logits [B, K, V], cache)."""
    return self.model.decode(self.params, self.encoded, cache, tokens, positions)


def pick(logits: jax.Array, keys: Optional[jax.Array], params: SamplingParams,
         cfg: LoopConfig) -> Tuple[jax.Array, Optional[jax.Array]]:
  """Chooses one token per row from logits [B, V]: x [B] int32, and q [B, V], the warped
  distribution it was drawn from (None when every row is greedy: an argmax needs neither
  it nor a key)."""
  if cfg.sampling.greedy:
    return sampling.argmax(logits), None
  q = sampling.warp(logits, params, cfg.sampling)
  return sampling.sample(keys, q), q


def draft_step(draft: Bound, cache, token: jax.Array, pos: jax.Array, keys, params,
               cfg: LoopConfig):
  """One draft step: token [B] at positions pos [B] -> (x [B], q [B, V] or None, cache)."""
  logits, cache = draft.decode(cache, token[:, None], pos)
  x, q = pick(logits[:, 0], keys, params, cfg)
  return x, q, cache


def draft_block(draft: Bound, cache, seq: jax.Array, pos: jax.Array,
                keys: Optional[jax.Array], params: SamplingParams, cfg: LoopConfig):
  """Runs G draft steps. Returns x [B, G], q [B, G, V] (None when greedy) and the cache.

  The first step feeds two tokens (positions pos-1 and pos) so that the draft cache catches
  up after a fully accepted block, whose last draft token it never saw.

  Args:
    draft: the draft and its rows' encoding.
    cache: the draft's cache.
    seq: [B, W] the rows' sequences; pos: [B] the position of each row's last token.
    keys: [G, B, ...] one key per step and row (None when greedy).
    params: the rows' sampling settings.
    cfg: the static loop config.
  """
  greedy = cfg.sampling.greedy
  start = jnp.maximum(pos - 1, 0)  # [B]
  pair = jnp.stack([gather_rows(seq, start), gather_rows(seq, start + 1)], axis=1)  # [B, 2]
  logits, cache = draft.decode(cache, pair, start)
  logits = jnp.take_along_axis(logits, (pos - start)[:, None, None], axis=1)[:, 0]
  x1, q1 = pick(logits, None if greedy else keys[0], params, cfg)
  if cfg.gamma == 1:
    return x1[:, None], None if greedy else q1[:, None], cache

  def step(carry, step_keys):
    cache, token, p = carry
    x, q, cache = draft_step(draft, cache, token, p, step_keys, params, cfg)
    return (cache, x, p + 1), (x, q)

  (cache, _, _), (xs, qs) = jax.lax.scan(step, (cache, x1, pos + 1),
                                         None if greedy else keys[1:], length=cfg.gamma - 1)
  x = jnp.concatenate([x1[:, None], xs.T], axis=1)  # [B, G]
  if greedy:
    return x, None, cache
  return x, jnp.concatenate([q1[:, None], jnp.swapaxes(qs, 0, 1)], axis=1), cache  # [B, G, V]


def verify(target: Bound, cache, last: jax.Array, x: jax.Array, pos: jax.Array):
  """The ONE target call of an iteration: [last, x_1..x_G] at pos -> logits [B, G+1, V]."""
  return target.decode(cache, jnp.concatenate([last[:, None], x], axis=1), pos)


def speculative_step(target: Bound, draft: Bound, cfg: LoopConfig,
                     state: DecodeState) -> DecodeState:
  """One iteration: draft G tokens, verify them in ONE target call, accept, commit."""
  g = cfg.gamma
  if cfg.sampling.greedy:  # no randomness: the keys are passed through untouched
    keys, draft_keys, accept_keys = state.keys, None, None
  else:
    split = split_keys(state.keys, g + 2)  # [G+2, B, ...]
    keys, draft_keys, accept_keys = split[0], split[1:g + 1], split[g + 1]
  x, q, draft_cache = draft_block(draft, state.draft_cache, state.seq, state.pos, draft_keys,
                                  state.sampling, cfg)
  logits, target_cache = verify(target, state.target_cache, gather_rows(state.seq, state.pos),
                                x, state.pos)  # [B, G+1, V]
  if cfg.sampling.greedy:
    result = acceptance.accept_greedy(sampling.argmax(logits), x)
  else:
    p = sampling.warp(logits, state.sampling, cfg.sampling)  # [B, G+1, V]
    result = acceptance.accept(p, q, x, accept_keys)
  block = jnp.concatenate([x, x[:, :1]], axis=1)  # [B, G+1]
  block = jnp.where(jnp.arange(g + 1)[None] == result.n[:, None], result.y[:, None], block)
  seq, pos, length, done, active = commit(state, block, result.n + 1, cfg)
  # beta counts where the target checked a draft token on the output's own prefix: up to the
  # first rejection, and not past the output's end (after EOS or max_decode_len nothing is
  # generated, so a mismatch there says nothing about alpha).
  verified = jnp.arange(g)[None] < jnp.minimum(result.n + 1, pos - state.pos)[:, None]
  a = active.astype(jnp.int32)
  s = state.stats
  stats = DecodeStats(
      target_calls=s.target_calls + a,
      drafted=s.drafted + a * g,
      accepted=s.accepted + a * result.n,
      accepted_per_position=s.accepted_per_position + a[:, None] * result.accepted,
      beta_sum=s.beta_sum + jnp.where(active, jnp.sum(result.beta * verified, axis=1), 0.0),
      beta_count=s.beta_count + a * jnp.sum(verified, axis=1))
  return state.replace(seq=seq, pos=pos, length=length, done=done, keys=keys, stats=stats,
                       target_cache=target_cache, draft_cache=draft_cache,
                       step=state.step + 1)


def autoregressive_step(target: Bound, cfg: LoopConfig, state: DecodeState) -> DecodeState:
  """One target step of one token per row."""
  last = gather_rows(state.seq, state.pos)  # [B]
  if cfg.sampling.greedy:
    keys, draw_keys = state.keys, None
  else:
    keys, draw_keys = split_keys(state.keys, 2)
  y, _, target_cache = draft_step(target, state.target_cache, last, state.pos, draw_keys,
                                  state.sampling, cfg)
  seq, pos, length, done, active = commit(state, y[:, None], jnp.ones_like(y), cfg)
  stats = state.stats.replace(target_calls=state.stats.target_calls + active.astype(jnp.int32))
  return state.replace(seq=seq, pos=pos, length=length, done=done, keys=keys, stats=stats,
                       target_cache=target_cache, step=state.step + 1)


def step(target: Bound, draft: Optional[Bound], cfg: LoopConfig,
         state: DecodeState) -> DecodeState:
  """The loop body: speculative when cfg.gamma >= 1, else the target alone."""
  if cfg.gamma:
    return speculative_step(target, draft, cfg, state)
  return autoregressive_step(target, cfg, state)
