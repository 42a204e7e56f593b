"""Decoding many inputs through B slots: a finished row takes the next input at once.

A batch of B inputs runs until its slowest row is done, and the rows done before it idle;
with speculative decoding rows finish even further apart, since each accepts its own
counts. Here all N inputs are encoded up front, B slots decode, and after any iteration
in which a slot finishes, its output is written out and the next waiting input takes the
slot: its encoding, a fresh sequence and zeroed counters. The slot's caches are not
cleared: the model contract has queries see keys at positions <= their own only, and
every such position is written by the new row before it is read.

Still ONE jitted call, a `lax.while_loop` over fixed shapes. Each row's output is the
same as a decode of that input alone: the speculative body is the one of `decoding`.
Shape letters: N inputs, B slots, S encoder length, L max_decode_len, W the sequence
buffer width 1 + L + G + 1.
"""
from __future__ import annotations

import functools
from typing import Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.core import decoding
from specjax.core.decoding import DecodeOutput
from specjax.core.state import DecodeState, DecodeStats, LoopConfig, extract_output
from specjax.core.sampling import SamplingConfig


@flax.struct.dataclass
class _Stream:
  """The carry: the B slots' decode state and encodings, the queue, and the outputs."""

  state: DecodeState
  target_enc: object  # the target's encoding of each slot's input, [B, ...] leaves
  draft_enc: object
  slot: jax.Array  # [B] int32, the input each slot decodes (N: none)
  next: jax.Array  # scalar int32, the first input not yet given a slot
  tokens: jax.Array  # [N, L] int32, outputs written as rows finish
  lengths: jax.Array  # [N] int32
  stats: DecodeStats  # [N] rows


def _rows(tree, index):
  return jax.tree.map(lambda a: a[index], tree)


def _where_rows(take, new, old):
  """Per leaf: rows of `new` where take[b], else rows of `old` (leaves [B, ...])."""
  def pick(n, o):
    return jnp.where(take.reshape(take.shape + (1,) * (o.ndim - 1)), n, o)
  return jax.tree.map(pick, new, old)


def _put_rows(dest, src, dest_rows, src_rows, count):
  """dest[dest_rows[j]] = src[src_rows[j]] for j < count, per leaf, one row at a time.

  A row is the whole [...] slab of one input's encoding; writing only the `count` rows that
  change (usually one) costs a row each, where a masked select over all B would rewrite
  every slot's encoding on every refill.
  """
  def put(j, tree):
    def one(d, a):
      row = jax.lax.dynamic_slice_in_dim(a, src_rows[j], 1)
      return jax.lax.dynamic_update_slice_in_dim(d, row.astype(d.dtype), dest_rows[j], 0)
    return jax.tree.map(one, tree, src)
  return jax.lax.fori_loop(0, count, put, dest)


def _fresh_rows(model, inputs, width: int):
  """seq [B, W], prompt_len [B] of rows starting on `inputs` [B, S]."""
  prompt, prompt_len = model.decoder_prompt(inputs)
  seq = jnp.zeros((inputs.shape[0], width), jnp.int32).at[:, :prompt.shape[1]].set(prompt)
  return seq, prompt_len


def _harvest_and_refill(c: _Stream, target, target_all, draft_all, inputs, num_inputs,
                        cfg: LoopConfig) -> _Stream:
  """Writes out the rows that finished and gives their slots the next inputs."""
  s = c.state
  n = inputs.shape[0]
  finished = s.done & (c.slot < n)  # [B], done and not yet written out
  out = jnp.where(finished, c.slot, n)  # row n is out of range: dropped
  tokens = c.tokens.at[out].set(extract_output(s, cfg), mode='drop')
  lengths = c.lengths.at[out].set(s.length, mode='drop')
  stats = jax.tree.map(lambda o, x: o.at[out].set(x, mode='drop'), c.stats, s.stats)
  new = c.next + jnp.cumsum(finished) - 1  # [B], the finished slots in order
  take = finished & (new < num_inputs)
  index = jnp.clip(new, 0, n - 1)
  seq, prompt_len = _fresh_rows(target, inputs[index], s.seq.shape[1])
  state = s.replace(
      seq=jnp.where(take[:, None], seq, s.seq),
      prompt_len=jnp.where(take, prompt_len, s.prompt_len),
      pos=jnp.where(take, prompt_len - 1, s.pos),
      length=jnp.where(take, 0, s.length), done=jnp.where(take, False, s.done),
      stats=_where_rows(take, DecodeStats.zeros(*s.stats.accepted_per_position.shape),
                        s.stats))
  order = jnp.argsort(~take, stable=True)  # the taken slots first, in slot order
  count = jnp.sum(take).astype(jnp.int32)
  refill_rows = functools.partial(_put_rows, dest_rows=order, src_rows=index[order],
                                  count=count)
  return c.replace(
      state=state, target_enc=refill_rows(c.target_enc, target_all),
      draft_enc=refill_rows(c.draft_enc, draft_all),
      slot=jnp.where(finished, jnp.where(take, new, n), c.slot),
      next=c.next + count, tokens=tokens, lengths=lengths,
      stats=stats)


def _stream(target, tp, draft, dp, inputs, num_inputs, rng, cfg: LoopConfig, slots: int):
  n = inputs.shape[0]
  prompt, _ = target.decoder_prompt(inputs[:1])
  if prompt.shape[1] != 1:
    raise ValueError('streaming needs a decoder prompt of one token (an encoder-decoder '
                     'model); decode decoder-only prompts in fixed batches')
  # [N, ...] leaves. The barrier keeps them computed once, here: without it XLA sinks the
  # cross-attention K/V projections of all N inputs into the refill branch, which would
  # then project every input again each time a row finishes.
  target_all, draft_all = jax.lax.optimization_barrier(
      (target.encode(tp, inputs), draft.encode(dp, inputs) if draft is not None else {}))
  width = cfg.width(1)
  first = jnp.arange(slots)
  has_input = first < num_inputs
  seq, prompt_len = _fresh_rows(target, inputs[:slots], width)
  state = DecodeState(
      seq=seq, prompt_len=prompt_len, pos=prompt_len - 1,
      length=jnp.zeros((slots,), jnp.int32), done=~has_input,
      target_cache=target.init_cache(slots, width),
      draft_cache=draft.init_cache(slots, width) if draft is not None else {}, rng=rng,
      stats=DecodeStats.zeros(slots, cfg.gamma), step=jnp.zeros((), jnp.int32))
  init = _Stream(
      state=state, target_enc=_rows(target_all, first), draft_enc=_rows(draft_all, first),
      slot=jnp.where(has_input, first, n).astype(jnp.int32),
      next=jnp.minimum(num_inputs, slots).astype(jnp.int32),
      tokens=jnp.full((n, cfg.max_decode_len), cfg.pad_id, jnp.int32),
      lengths=jnp.zeros((n,), jnp.int32), stats=DecodeStats.zeros(n, cfg.gamma))

  def body(c: _Stream) -> _Stream:
    if draft is None:
      state = decoding._autoregressive_body(target, tp, c.target_enc, cfg, c.state)  # pylint: disable=protected-access
    else:
      state = decoding._speculative_body(target, tp, c.target_enc, draft, dp, c.draft_enc,  # pylint: disable=protected-access
                                         cfg, c.state)
    c = c.replace(state=state)
    refill = functools.partial(_harvest_and_refill, target=target, target_all=target_all,
                               draft_all=draft_all, inputs=inputs, num_inputs=num_inputs,
                               cfg=cfg)
    return jax.lax.cond(jnp.any(state.done & (c.slot < n)), refill, lambda x: x, c)

  # Every iteration adds >= 1 token to each busy slot, so N * L iterations always suffice.
  cond = lambda c: jnp.any(c.slot < n) & (c.state.step < n * cfg.max_decode_len)
  c = jax.lax.while_loop(cond, body, init)
  return DecodeOutput(tokens=c.tokens, lengths=c.lengths, stats=c.stats,
                      iterations=c.state.step)


@functools.partial(jax.jit, static_argnames=('target', 'draft', 'cfg', 'slots'))
def _stream_jit(target, tp, draft, dp, inputs, num_inputs, rng, cfg, slots):
  decoding.TRACE_COUNTS['streaming' if draft is not None else 'streaming_autoregressive'] += 1
  return _stream(target, tp, draft, dp, inputs, num_inputs, rng, cfg, slots)


def stream_decode(target, target_params, draft, draft_params, inputs, *, slots: int,
                  gamma: int, max_decode_len: int, sampling: SamplingConfig = SamplingConfig(),
                  rng: Optional[jax.Array] = None, num_inputs: Optional[int] = None,
                  eos_id: int = 1, pad_id: int = 0):
  """Decodes N inputs through `slots` rows that take the next input as soon as they finish.

  Args:
    target, target_params: the target model and its params.
    draft, draft_params: the draft and its params, or None, None for the target alone
      (one token per target call: the reference decode).
    inputs: [N, S] int32 encoder inputs, right-padded with 0.
    slots: B, rows decoded at once.
    gamma: G >= 1 draft tokens per iteration (ignored without a draft).
    max_decode_len: L, the most tokens per output (EOS included).
    sampling: as `speculative_decode`.
    rng: PRNG key (PRNGKey(0) when None).
    num_inputs: decode only the first n rows of `inputs` (a traced value: inputs padded
      to a fixed N compile once); all N when None.
    eos_id, pad_id: as `speculative_decode`.

  Returns:
    DecodeOutput with tokens [N, L], lengths [N], per-input stats and the iterations run:
    rows past num_inputs are pad with length 0. Greedy outputs equal each input's target-alone
    greedy decode token for token; sampled ones follow the target's distribution.
  """
  if not isinstance(slots, int) or slots < 1:
    raise ValueError(f'slots must be an integer >= 1, got {slots!r}')
  speculative = draft is not None
  if speculative and (not isinstance(gamma, int) or gamma < 1):
    raise ValueError(f'gamma must be an integer >= 1 (draft tokens per target call), '
                     f'got {gamma!r}')
  decoding._check_common(target, inputs, max_decode_len, sampling)  # pylint: disable=protected-access
  if speculative and target.vocab_size != draft.vocab_size:
    raise ValueError(f'target and draft vocab sizes differ ({target.vocab_size} vs '
                     f'{draft.vocab_size}); use a draft trained on the target\'s vocabulary')
  cfg = LoopConfig(gamma=gamma if speculative else 0, max_decode_len=max_decode_len,
                   sampling=sampling, eos_id=eos_id, pad_id=pad_id)
  inputs = jnp.asarray(inputs, jnp.int32)
  n = inputs.shape[0]
  num = jnp.asarray(n if num_inputs is None else min(int(num_inputs), n), jnp.int32)
  rng = jax.random.PRNGKey(0) if rng is None else rng
  return _stream_jit(target, target_params, draft, draft_params, inputs, num, rng, cfg,
                     min(slots, n))
