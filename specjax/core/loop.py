"""THE decode loop: every driver (one device, a mesh, a refilled stream, the benchmark)
runs `start`, then `run`, then `outputs`.

N inputs are decoded through B rows (slots). With B = N (a fixed batch) the loop runs until
every row is done. With B < N (refill) a row that finishes writes its output out and the
next waiting input takes its slot at once: its encoding, a fresh sequence, its own key and
sampling settings, zeroed counters (and, for a decoder-only prompt, its prompt written into
the slot's caches). The caches are not cleared: the model contract has queries see keys at
positions <= their own only, and every such position is written by the new row before it
is read. Either way it is ONE `lax.while_loop` over fixed shapes, with no host round trip,
and each row's output is that of its input decoded alone.

Shape letters: N inputs, B slots, S encoder length, P decoder prompt length, L
max_decode_len, W the sequence width P + L + G + 1.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional

import flax.struct
import jax
import jax.numpy as jnp

from specjax.core import steps, tree_steps
from specjax.core.sampling import SamplingParams
from specjax.core.state import (DecodeOutput, DecodeState, DecodeStats, LoopConfig,
                                extract_output)
from specjax.core.proposal import draft_view
from specjax.core.steps import Bound
from specjax.models import base


@flax.struct.dataclass
class Queue:
  """Refill only: the N inputs, their encodings, and the outputs of finished rows.

  Attributes:
    inputs: [N, S] int32.
    target_enc: the target's encoding of every input ([N, ...] leaves).
    draft_enc: the draft's ({} for the target alone).
    keys: [N, ...] each input's PRNG key.
    sampling: each input's SamplingParams, [N].
    num_inputs: scalar int32, inputs to decode (the first n of N).
    next: scalar int32, the first input not yet given a slot.
    slot: [B] int32, the input each slot decodes (N: none).
    tokens: [N, L] int32, outputs written as rows finish; lengths: [N] int32.
    stats: DecodeStats of [N] inputs.
  """

  inputs: jax.Array
  target_enc: Any
  draft_enc: Any
  keys: jax.Array
  sampling: SamplingParams
  num_inputs: jax.Array
  next: jax.Array
  slot: jax.Array
  tokens: jax.Array
  lengths: jax.Array
  stats: DecodeStats


@flax.struct.dataclass
class Run:
  """The loop's carry.

  Attributes:
    state: the B rows' DecodeState.
    target_enc: the target's encoding of the rows' inputs ([B, ...] leaves).
    draft_enc: the draft's ({} for the target alone).
    queue: the waiting inputs and finished outputs when refilling (B < N), else None.
  """

  state: DecodeState
  target_enc: Any
  draft_enc: Any
  queue: Optional[Queue] = None


def _rows(tree, index):
  return jax.tree.map(lambda a: a[index], tree)


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


def _prefill_rows(prefill: Callable, encoded, cache, prompt, rows, count):
  """`prefill(encoded, cache, prompt)` of the slots rows[j], j < count, one at a time
  (refill of decoder-only prompts); the other slots' caches are untouched."""
  if prompt.shape[1] == 1:
    return cache

  def one(j, cache):
    row = lambda tree: jax.tree.map(lambda a: jax.lax.dynamic_slice_in_dim(a, rows[j], 1),
                                    tree)
    new = prefill(row(encoded), row(cache), row(prompt))
    return jax.tree.map(lambda d, n: jax.lax.dynamic_update_slice_in_dim(d, n, rows[j], 0),
                        cache, new)
  return jax.lax.fori_loop(0, count, one, cache)


def row_keys(rng: jax.Array, row_ids: jax.Array) -> jax.Array:
  """Each input's key, fold_in(rng, its index in the run): [N, ...]."""
  return jax.vmap(jax.random.fold_in, (None, 0))(rng, row_ids)


def start(target, tp, draft, dp, inputs: jax.Array, num_inputs: jax.Array,
          row_ids: jax.Array, rng: jax.Array, sampling: SamplingParams, cfg: LoopConfig,
          slots: int) -> Run:
  """Encodes, gives the first B inputs a slot, prefills their caches: the first carry.

  Args:
    target, tp: the target and its params; draft, dp: the proposer
      (`specjax.core.proposal.Proposer`) and its params (None, None for the target
      alone).
    inputs: [N, S] int32, right-padded with the models' pad id.
    num_inputs: scalar int32, decode the first n inputs (later rows are never started).
    row_ids: [N] int32, each input's index in the run (its key is fold_in(rng, id)).
    rng: the run's PRNG key.
    sampling: each input's SamplingParams, [N].
    cfg: the static loop config.
    slots: B <= N; B < N refills.
  """
  n = inputs.shape[0]
  refill = slots < n
  keys = row_keys(rng, row_ids)  # [N, ...]
  encode = lambda m, p, x: m.encode(p, x) if m is not None else {}
  if refill:
    # [N, ...] leaves. The barrier keeps them computed once, here: without it XLA sinks the
    # cross-attention K/V projections of all N inputs into the refill branch, which would
    # then project every input again each time a row finishes.
    target_all, draft_all = jax.lax.optimization_barrier(
        (encode(target, tp, inputs), encode(draft, dp, inputs)))
    first = jnp.arange(slots)
    target_enc, draft_enc = _rows(target_all, first), _rows(draft_all, first)
  else:
    target_enc, draft_enc = encode(target, tp, inputs), encode(draft, dp, inputs)
  rows = inputs[:slots]
  prompt, prompt_len = target.decoder_prompt(rows)  # [B, P], [B]
  width = cfg.width(prompt.shape[1])
  seq = jnp.zeros((slots, width), jnp.int32).at[:, :prompt.shape[1]].set(prompt)
  has_input = jnp.arange(slots) < num_inputs
  target_cache = base.prefill(target, tp, target_enc, target.init_cache(slots, width), prompt)
  draft_cache = (draft.prefill(*draft_view(draft, tp, dp, target_enc, draft_enc),
                               draft.init_cache(slots, width), prompt)
                 if draft is not None else {})
  state = DecodeState(
      seq=seq, prompt_len=prompt_len, pos=prompt_len - 1,
      length=jnp.zeros((slots,), jnp.int32), done=~has_input,
      target_cache=target_cache, draft_cache=draft_cache, keys=keys[:slots],
      sampling=_rows(sampling, slice(0, slots)), stats=DecodeStats.zeros(slots, cfg.gamma),
      step=jnp.zeros((), jnp.int32))
  queue = None
  if refill:
    queue = Queue(
        inputs=inputs, target_enc=target_all, draft_enc=draft_all, keys=keys,
        sampling=sampling, num_inputs=num_inputs,
        next=jnp.minimum(num_inputs, slots).astype(jnp.int32),
        slot=jnp.where(has_input, jnp.arange(slots), n).astype(jnp.int32),
        tokens=jnp.full((n, cfg.max_decode_len), cfg.pad_id, jnp.int32),
        lengths=jnp.zeros((n,), jnp.int32), stats=DecodeStats.zeros(n, cfg.gamma))
  return Run(state=state, target_enc=target_enc, draft_enc=draft_enc, queue=queue)


def _where_rows(take, new, old):
  """Per leaf: rows of `new` (or a scalar) where take[b], else rows of `old` ([B, ...])."""
  def pick(a, b):
    return jnp.where(take.reshape(take.shape + (1,) * (b.ndim - 1)), a, b)
  return jax.tree.map(pick, new, old) if not isinstance(new, (int, bool)) else pick(new, old)


def _prefill_draft(draft, tp, dp, target_enc, draft_enc, prefill, cache):
  """The refilled rows' draft state: `prefill` (of `refill`) with the proposer's view."""
  params, encoded = draft_view(draft, tp, dp, target_enc, draft_enc)
  return prefill(functools.partial(draft.prefill, params), encoded, cache)


def refill(run: Run, target, tp, draft, dp, cfg: LoopConfig) -> Run:
  """Writes out the rows that finished and gives their slots the next inputs."""
  s, q = run.state, run.queue
  n = q.inputs.shape[0]
  finished = s.done & (q.slot < n)  # [B], done and not yet written out
  out = jnp.where(finished, q.slot, n)  # row n is out of range: dropped
  tokens = q.tokens.at[out].set(extract_output(s, cfg), mode='drop')
  lengths = q.lengths.at[out].set(s.length, mode='drop')
  stats = jax.tree.map(lambda o, x: o.at[out].set(x, mode='drop'), q.stats, s.stats)
  new = q.next + jnp.cumsum(finished) - 1  # [B], the finished slots in order
  take = finished & (new < q.num_inputs)
  index = jnp.clip(new, 0, n - 1)
  prompt, prompt_len = target.decoder_prompt(q.inputs[index])  # [B, P], [B]
  seq = jnp.zeros_like(s.seq).at[:, :prompt.shape[1]].set(prompt)
  pick = functools.partial(_where_rows, take)
  state = s.replace(
      seq=pick(seq, s.seq), prompt_len=pick(prompt_len, s.prompt_len),
      pos=pick(prompt_len - 1, s.pos), length=pick(0, s.length), done=pick(False, s.done),
      keys=pick(q.keys[index], s.keys), sampling=pick(_rows(q.sampling, index), s.sampling),
      stats=pick(DecodeStats.zeros(*s.stats.accepted_per_position.shape), s.stats))
  order = jnp.argsort(~take, stable=True)  # the taken slots first, in slot order
  count = jnp.sum(take).astype(jnp.int32)
  put = functools.partial(_put_rows, dest_rows=order, src_rows=index[order], count=count)
  target_enc, draft_enc = put(run.target_enc, q.target_enc), put(run.draft_enc, q.draft_enc)
  prefill = functools.partial(_prefill_rows, prompt=prompt, rows=order, count=count)
  state = state.replace(
      target_cache=prefill(functools.partial(base.prefill, target, tp), target_enc,
                           state.target_cache),
      draft_cache=(_prefill_draft(draft, tp, dp, target_enc, draft_enc, prefill,
                                  state.draft_cache)
                   if draft is not None else state.draft_cache))
  queue = q.replace(slot=jnp.where(finished, jnp.where(take, new, n), q.slot),
                    next=q.next + count, tokens=tokens, lengths=lengths, stats=stats)
  return Run(state=state, target_enc=target_enc, draft_enc=draft_enc, queue=queue)


def run(target, tp, draft, dp, carry: Run, cfg: LoopConfig,
        constrain: Callable[[DecodeState], DecodeState] = lambda s: s) -> Run:
  """Runs the loop until every input is done; returns the final carry.

  Args:
    target, tp, draft, dp: the pair and their params (draft None: the target alone).
    carry: from `start`.
    cfg: the static loop config.
    constrain: applied to the state after each step (a mesh re-asserts its shardings).
  """
  queue = carry.queue

  def body(c: Run) -> Run:
    draft_bound = (Bound(draft, *draft_view(draft, tp, dp, c.target_enc, c.draft_enc))
                   if draft is not None else None)
    one_step = steps.step if cfg.tree is None else tree_steps.tree_step
    c = c.replace(state=constrain(one_step(Bound(target, tp, c.target_enc), draft_bound,
                                           cfg, c.state)))
    if c.queue is None:
      return c
    n = c.queue.inputs.shape[0]
    return jax.lax.cond(jnp.any(c.state.done & (c.queue.slot < n)),
                        lambda x: refill(x, target, tp, draft, dp, cfg), lambda x: x, c)

  if queue is None:
    # Every iteration produces >= 1 token per active row, so L iterations always suffice.
    cond = lambda c: ~jnp.all(c.state.done) & (c.state.step < cfg.max_decode_len)
  else:
    n = queue.inputs.shape[0]  # and N * L for N inputs, one slot busy at least
    cond = lambda c: jnp.any(c.queue.slot < n) & (c.state.step < n * cfg.max_decode_len)
  return jax.lax.while_loop(cond, body, carry)


def outputs(carry: Run, cfg: LoopConfig) -> DecodeOutput:
  """The DecodeOutput of a final carry: [N] rows, in input order."""
  s, q = carry.state, carry.queue
  if q is None:
    return DecodeOutput(tokens=extract_output(s, cfg), lengths=s.length, stats=s.stats,
                        iterations=s.step)
  return DecodeOutput(tokens=q.tokens, lengths=q.lengths, stats=q.stats, iterations=s.step)
