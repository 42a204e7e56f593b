"""The jitted decode loops: speculative (draft, verify, accept, commit) and autoregressive.

Both run as ONE jitted call: a `lax.while_loop` over fixed shapes with no host round trip,
per-row lengths so that rows of a batch accept different counts, and finished rows kept
running masked until every row is done. Shape letters: B batch, P prompt, L
max_decode_len, G gamma, V vocab, T cache length.
"""
from __future__ import annotations

import collections
import functools
from typing import Any, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.core import acceptance, sampling
from specjax.core.state import (DecodeState, DecodeStats, LoopConfig, commit,
                                extract_output, gather_rows)
from specjax.core.sampling import SamplingConfig

# How often each loop was traced (one per shape and static config; tests and the bench read it).
TRACE_COUNTS: collections.Counter = collections.Counter()


@flax.struct.dataclass
class DecodeOutput:
  """What a decode returns.

  Attributes:
    tokens: [B, L] int32, generated tokens, EOS included, pad after it.
    lengths: [B] int32, generated tokens per row (EOS included).
    stats: per-row DecodeStats.
    iterations: scalar int32, loop iterations run (None where not recorded).
  """

  tokens: jax.Array
  lengths: jax.Array
  stats: DecodeStats
  iterations: Optional[jax.Array] = None


def _init_state(model, params, draft, draft_params, inputs, rng, cfg: LoopConfig):
  """Encodes, prefills both caches with the decoder prompt, and builds the first state."""
  prompt, prompt_len = model.decoder_prompt(inputs)  # [B, P], [B]
  batch, prompt_width = prompt.shape
  width = cfg.width(prompt_width)
  seq = jnp.zeros((batch, width), jnp.int32).at[:, :prompt_width].set(prompt)
  positions = jnp.zeros((batch,), jnp.int32)

  def prefill(m, p):
    encoded = m.encode(p, inputs)
    cache = m.init_cache(batch, width)
    if prompt_width > 1:  # the last prompt token is fed by the first iteration
      _, cache = m.decode(p, encoded, cache, prompt, positions)
    return encoded, cache

  target_enc, target_cache = prefill(model, params)
  draft_enc, draft_cache = prefill(draft, draft_params) if draft is not None else ({}, {})
  state = DecodeState(
      seq=seq, prompt_len=prompt_len, pos=prompt_len - 1,
      length=jnp.zeros((batch,), jnp.int32), done=jnp.zeros((batch,), bool),
      target_cache=target_cache, draft_cache=draft_cache, rng=rng,
      stats=DecodeStats.zeros(batch, cfg.gamma), step=jnp.zeros((), jnp.int32))
  return state, target_enc, draft_enc


def _pick(logits: jax.Array, key, cfg: LoopConfig):
  """Chooses one token per row from logits [B, V]: x [B] int32, and q [B, V], the warped
  distribution it was drawn from (None when greedy: an argmax needs neither it nor a key)."""
  if cfg.sampling.greedy:
    return sampling.argmax(logits), None
  q = sampling.warp(logits, cfg.sampling)
  return sampling.sample(key, q, False), q


def _draft_tokens(draft, draft_params, draft_enc, state: DecodeState, rng, cfg: LoopConfig):
  """Runs G draft steps. Returns x [B, G], q [B, G, V] (None when greedy) and the cache.

  The first step feeds two tokens (positions pos-1 and pos) so that the draft cache catches
  up after a fully accepted block, whose last draft token it never saw. Greedy decoding
  keeps token ids only: no PRNG keys, no [B, V] one-hots.
  """
  greedy = cfg.sampling.greedy
  keys = None if greedy else jax.random.split(rng, cfg.gamma)
  start = jnp.maximum(state.pos - 1, 0)  # [B]
  pair = jnp.stack([gather_rows(state.seq, start), gather_rows(state.seq, start + 1)], axis=1)
  logits, cache = draft.decode(draft_params, draft_enc, state.draft_cache, pair, start)
  logits = jnp.take_along_axis(logits, (state.pos - start)[:, None, None], axis=1)[:, 0]
  x1, q1 = _pick(logits, None if greedy else keys[0], cfg)

  def step(carry, key):
    cache, token, pos = carry
    logits, cache = draft.decode(draft_params, draft_enc, cache, token[:, None], pos)
    x, q = _pick(logits[:, 0], key, cfg)
    return (cache, x, pos + 1), (x, q)

  if cfg.gamma == 1:
    return x1[:, None], None if greedy else q1[:, None], cache
  (cache, _, _), (xs, qs) = jax.lax.scan(step, (cache, x1, state.pos + 1),
                                         None if greedy else keys[1:], length=cfg.gamma - 1)
  x = jnp.concatenate([x1[:, None], xs.T], axis=1)  # [B, G]
  if greedy:
    return x, None, cache
  q = jnp.concatenate([q1[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)  # [B, G, V]
  return x, q, cache


def _speculative_body(target, target_params, target_enc, draft, draft_params, draft_enc,
                      cfg: LoopConfig, state: DecodeState) -> DecodeState:
  """One iteration: draft G tokens, verify them in ONE target call, accept, commit."""
  if cfg.sampling.greedy:  # no randomness: the key is passed through untouched
    rng = draft_rng = accept_rng = state.rng
  else:
    rng, draft_rng, accept_rng = jax.random.split(state.rng, 3)
  x, q, draft_cache = _draft_tokens(draft, draft_params, draft_enc, state, draft_rng, cfg)
  last = gather_rows(state.seq, state.pos)  # [B]
  verify_tokens = jnp.concatenate([last[:, None], x], axis=1)  # [B, G+1]
  logits, target_cache = target.decode(target_params, target_enc, state.target_cache,
                                       verify_tokens, state.pos)  # [B, G+1, V]
  if cfg.sampling.greedy:
    result = acceptance.accept_greedy(sampling.argmax(logits), x)
  else:
    p = sampling.warp(logits, cfg.sampling)  # [B, G+1, V]
    result = acceptance.accept(p, q, x, accept_rng, cfg.sampling.greedy)
  block = jnp.concatenate([x, x[:, :1]], axis=1)  # [B, G+1]
  block = jnp.where(jnp.arange(cfg.gamma + 1)[None] == result.n[:, None], result.y[:, None],
                    block)
  seq, pos, length, done, active = commit(state, block, result.n + 1, cfg)
  # beta counts where the target checked a draft token on the output's own prefix: up to the
  # first rejection, and not past the output's end (after EOS or max_decode_len nothing is
  # generated, so a mismatch there says nothing about alpha).
  verified = jnp.arange(cfg.gamma)[None] < jnp.minimum(result.n + 1, pos - state.pos)[:, None]
  a = active.astype(jnp.int32)
  s = state.stats
  stats = DecodeStats(
      target_calls=s.target_calls + a,
      drafted=s.drafted + a * cfg.gamma,
      accepted=s.accepted + a * result.n,
      accepted_per_position=s.accepted_per_position + a[:, None] * result.accepted,
      beta_sum=s.beta_sum + jnp.where(active, jnp.sum(result.beta * verified, axis=1), 0.0),
      beta_count=s.beta_count + a * jnp.sum(verified, axis=1))
  return state.replace(seq=seq, pos=pos, length=length, done=done, rng=rng, stats=stats,
                       target_cache=target_cache, draft_cache=draft_cache,
                       step=state.step + 1)


def _autoregressive_body(target, target_params, target_enc, cfg: LoopConfig,
                         state: DecodeState) -> DecodeState:
  """One target step of one token per row."""
  last = gather_rows(state.seq, state.pos)  # [B]
  logits, target_cache = target.decode(target_params, target_enc, state.target_cache,
                                       last[:, None], state.pos)  # [B, 1, V]
  rng, key = (state.rng, None) if cfg.sampling.greedy else jax.random.split(state.rng)
  y, _ = _pick(logits[:, 0], key, cfg)
  seq, pos, length, done, active = commit(state, y[:, None], jnp.ones_like(y), cfg)
  stats = state.stats.replace(target_calls=state.stats.target_calls + active.astype(jnp.int32))
  return state.replace(seq=seq, pos=pos, length=length, done=done, rng=rng, stats=stats,
                       target_cache=target_cache, step=state.step + 1)


def _loop(body, state: DecodeState, cfg: LoopConfig) -> DecodeState:
  """Runs `body` until every row is done; returns the final state."""
  # Every iteration produces >= 1 token per active row, so L iterations always suffice.
  cond = lambda s: jnp.logical_and(~jnp.all(s.done), s.step < cfg.max_decode_len)
  return jax.lax.while_loop(cond, body, state)


def _output(state: DecodeState, cfg: LoopConfig) -> DecodeOutput:
  """The DecodeOutput of a final state."""
  return DecodeOutput(tokens=extract_output(state, cfg), lengths=state.length,
                      stats=state.stats, iterations=state.step)


def _run(body, state: DecodeState, cfg: LoopConfig) -> DecodeOutput:
  return _output(_loop(body, state, cfg), cfg)


@functools.partial(jax.jit, static_argnames=('target', 'draft', 'cfg'))
def _speculative_jit(target, target_params, draft, draft_params, inputs, rng, cfg):
  TRACE_COUNTS['speculative'] += 1
  state, target_enc, draft_enc = _init_state(target, target_params, draft, draft_params,
                                             inputs, rng, cfg)
  body = functools.partial(_speculative_body, target, target_params, target_enc, draft,
                           draft_params, draft_enc, cfg)
  return _run(body, state, cfg)


@functools.partial(jax.jit, static_argnames=('target', 'cfg'))
def _autoregressive_jit(target, target_params, inputs, rng, cfg):
  TRACE_COUNTS['autoregressive'] += 1
  state, target_enc, _ = _init_state(target, target_params, None, None, inputs, rng, cfg)
  body = functools.partial(_autoregressive_body, target, target_params, target_enc, cfg)
  return _run(body, state, cfg)


def _check_common(model, inputs, max_decode_len, sampling_config: SamplingConfig):
  if not isinstance(max_decode_len, int) or max_decode_len < 1:
    raise ValueError(f'max_decode_len must be an integer >= 1, got {max_decode_len!r}')
  if getattr(inputs, 'ndim', None) != 2:
    raise ValueError(f'inputs must be a [batch, length] integer array, got shape '
                     f'{getattr(inputs, "shape", None)}')
  sampling_config.validate(model.vocab_size)


def speculative_decode(target, target_params, draft, draft_params, inputs, *, gamma: int,
                       max_decode_len: int, sampling: SamplingConfig = SamplingConfig(),
                       rng: Optional[jax.Array] = None, eos_id: int = 1,
                       pad_id: int = 0, mesh: Optional[jax.sharding.Mesh] = None,
                       rules: Optional[tuple] = None) -> DecodeOutput:
  """Decodes with the target's exact output distribution, G draft tokens per target call.

  Args:
    target: the target model (the contract of specjax.models.base.Model).
    target_params: its params pytree.
    draft: the draft model; must share the target's vocabulary.
    draft_params: its params pytree.
    inputs: [B, S] int32 encoder inputs (or decoder-only prompts), right-padded with 0.
    gamma: G >= 1, draft tokens per iteration.
    max_decode_len: L >= 1, the most tokens generated per row (EOS included).
    sampling: temperature / top-k / top-p, applied identically to target and draft.
    rng: PRNG key for sampling (PRNGKey(0) when None).
    eos_id: end-of-sequence token.
    pad_id: written after EOS.
    mesh: optional ('data', 'model') mesh (`specjax.sharding.make_mesh`): params, caches
      and state are sharded by T5X's logical axis rules and the decode runs as two jitted
      programs (prefill, then the loop with the state donated). B must divide by 'data'.
    rules: logical axis rules for `mesh` (default `sharding.STANDARD_RULES`).

  Returns:
    DecodeOutput(tokens [B, L], lengths [B], stats): greedy output equals the target's own
    greedy decode token for token; sampled output follows the target's distribution.
    With a mesh, the output is replicated on every device (readable on every host).
  """
  if not isinstance(gamma, int) or gamma < 1:
    raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), '
                     f'got {gamma!r}')
  if target.vocab_size != draft.vocab_size:
    raise ValueError(f'target and draft vocab sizes differ ({target.vocab_size} vs '
                     f'{draft.vocab_size}); use a draft trained on the target\'s vocabulary')
  _check_common(target, inputs, max_decode_len, sampling)
  cfg = LoopConfig(gamma=gamma, max_decode_len=max_decode_len, sampling=sampling,
                   eos_id=eos_id, pad_id=pad_id)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  if mesh is not None:
    from specjax.core import sharded  # pylint: disable=import-outside-toplevel (it imports us)
    return sharded.decode(mesh, target, target_params, draft, draft_params, inputs, rng,
                          cfg, rules)
  return _speculative_jit(target, target_params, draft, draft_params,
                          jnp.asarray(inputs, jnp.int32), rng, cfg)


def autoregressive_decode(target, target_params, inputs, *, max_decode_len: int,
                          sampling: SamplingConfig = SamplingConfig(),
                          rng: Optional[jax.Array] = None, eos_id: int = 1,
                          pad_id: int = 0, mesh: Optional[jax.sharding.Mesh] = None,
                          rules: Optional[tuple] = None) -> DecodeOutput:
  """Decodes one token per target call: the reference for every exactness test.

  Args and returns as `speculative_decode`, without the draft; stats count target calls.
  """
  _check_common(target, inputs, max_decode_len, sampling)
  cfg = LoopConfig(gamma=0, max_decode_len=max_decode_len, sampling=sampling, eos_id=eos_id,
                   pad_id=pad_id)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  if mesh is not None:
    from specjax.core import sharded  # pylint: disable=import-outside-toplevel (it imports us)
    return sharded.decode(mesh, target, target_params, None, None, inputs, rng, cfg, rules)
  return _autoregressive_jit(target, target_params, jnp.asarray(inputs, jnp.int32), rng, cfg)

