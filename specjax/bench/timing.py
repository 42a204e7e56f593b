"""Measurements behind `python -m specjax.bench` and `--gamma auto`.

Costs are timed inside a jitted `fori_loop` (as the decode loop calls the models), so
dispatch overhead does not pollute them. Shape letters: B batch, S encoder length,
K tokens per call, T cache length.
"""
from __future__ import annotations

import functools
import time
from typing import Callable, Dict, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import decoding, sampling, theory
from specjax.core.state import LoopConfig
from specjax.core.sampling import SamplingConfig


@functools.partial(jax.jit, static_argnames=('model', 'num_tokens', 'repeats', 'cache_len'))
def _repeat_decode(model, params, inputs, num_tokens, repeats, cache_len):
  """Runs `repeats` K-token decode calls near the cache's middle; returns a checksum.

  Tokens and positions change with the loop index, as in a decode: constant ones would let
  XLA hoist the embedding lookup, the causal mask and the position bias out of the loop,
  and the timed call would be cheaper than the one the decode loop makes.
  """
  encoded = model.encode(params, inputs)
  batch = inputs.shape[0]
  cache = model.init_cache(batch, cache_len)

  def body(i, carry):
    cache, total = carry
    shift = (i % 2).astype(jnp.int32)
    tokens = jnp.full((batch, num_tokens), 3, jnp.int32) + shift
    positions = jnp.full((batch,), cache_len // 2, jnp.int32) + shift
    logits, cache = model.decode(params, encoded, cache, tokens, positions)
    return cache, total + logits[0, -1, 0]

  return jax.lax.fori_loop(0, repeats, body, (cache, jnp.zeros((), jnp.float32)))[1]


def _per_repeat_seconds(run: Callable, repeats: int, trials: int) -> float:
  """Seconds of one repeat of run(n), a jitted loop of n repeats after fixed set-up work.

  The set-up (encoders, caches) is subtracted by timing a zero-repeat loop too. The
  minimum over `trials`, not the median: on a shared machine noise only adds time, and one
  slow t_1 would skew every v(K) = t_K / t_1 and c.
  """
  jax.block_until_ready(run(repeats))  # compile
  jax.block_until_ready(run(0))

  def timed(n):
    start = time.perf_counter()
    jax.block_until_ready(run(n))
    return time.perf_counter() - start

  per_repeat = [(timed(repeats) - timed(0)) / repeats for _ in range(trials)]
  return max(float(np.min(per_repeat)), 1e-9)


def call_seconds(model, params, inputs, num_tokens: int, repeats: int = 64,
                 cache_len: int = 64, trials: int = 5) -> float:
  """Seconds of one K-token decode call (inputs [B, S]), the fastest of `trials` loops."""
  return _per_repeat_seconds(
      lambda n: _repeat_decode(model, params, inputs, num_tokens, n, cache_len),
      repeats, trials)


def _block_inputs(i, batch: int, cache_len: int):
  """The catch-up pair [B, 2] and positions [B] of iteration i of a timed loop."""
  shift = (i % 2).astype(jnp.int32)  # varying, as in `_repeat_decode`
  pos = jnp.full((batch,), cache_len // 2, jnp.int32) + shift
  return jnp.full((batch, 2), 3, jnp.int32) + shift, pos


def _draft_block(draft, dp, d_enc, d_cache, pair, pos, gamma: int):
  """The draft's calls of one iteration, as the decode makes them: a two-token call (the
  catch-up), then G - 1 one-token steps under a scan, each fed the previous argmax.
  Returns the block [B, G+1] a verify would check, and the draft cache."""

  def step(carry, _):
    cache, token, p = carry
    logits, cache = draft.decode(dp, d_enc, cache, token[:, None], p)
    return (cache, sampling.argmax(logits[:, -1]), p + 1), token

  logits, d_cache = draft.decode(dp, d_enc, d_cache, pair, pos - 1)  # [B, 2, V]
  x1 = sampling.argmax(logits[:, -1])
  (d_cache, last, _), xs = jax.lax.scan(step, (d_cache, x1, pos + 1), None, length=gamma - 1)
  return jnp.concatenate([pair[:, 1:], xs.T, last[:, None]], axis=1), d_cache


@functools.partial(jax.jit, static_argnames=('target', 'draft', 'gamma', 'repeats',
                                             'cache_len'))
def _repeat_model_calls(target, tp, draft, dp, inputs, gamma, repeats, cache_len):
  """`repeats` times the model calls of one speculative iteration, nothing else.

  As in the decode loop: a two-token draft call (the catch-up), G - 1 one-token draft
  steps under a scan, each fed the previous argmax, then one (G+1)-token target call.
  """
  batch = inputs.shape[0]
  t_enc, d_enc = target.encode(tp, inputs), draft.encode(dp, inputs)

  def body(i, carry):
    t_cache, d_cache, total = carry
    pair, pos = _block_inputs(i, batch, cache_len)
    block, d_cache = _draft_block(draft, dp, d_enc, d_cache, pair, pos, gamma)
    logits, t_cache = target.decode(tp, t_enc, t_cache, block, pos)
    return t_cache, d_cache, total + logits[0, -1, 0]

  init = (target.init_cache(batch, cache_len), draft.init_cache(batch, cache_len),
          jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[2]


def model_calls_seconds(target, tp, draft, dp, inputs, gamma: int, repeats: int = 32,
                        cache_len: int = 64, trials: int = 5) -> float:
  """Seconds of the model calls of one speculative iteration, run alternating in one loop.

  The cost model times each call alone; inside the decode loop the draft and target calls
  alternate (and a large target can push the draft's weights out of the CPU's caches).
  This is that alternation without the loop's own work (acceptance, commit).
  """
  return _per_repeat_seconds(
      lambda n: _repeat_model_calls(target, tp, draft, dp, inputs, gamma, n, cache_len),
      repeats, trials)


@functools.partial(jax.jit, static_argnames=('draft', 'gamma', 'repeats', 'cache_len',
                                             'with_draft', 'with_sweep'))
def _repeat_draft_and_sweep(draft, dp, inputs, sweep, gamma, repeats, cache_len, with_draft,
                            with_sweep):
  """`repeats` draft blocks, or reads of all of `sweep`, or both alternating."""
  batch = inputs.shape[0]
  d_enc = draft.encode(dp, inputs)

  def body(i, carry):
    d_cache, total = carry
    if with_draft:
      pair, pos = _block_inputs(i, batch, cache_len)
      block, d_cache = _draft_block(draft, dp, d_enc, d_cache, pair, pos, gamma)
      total = total + block[0, -1].astype(jnp.float32)
    if with_sweep:  # depends on the carry: XLA cannot hoist it out of the loop
      total = total + jnp.sum(sweep * (total + 1.0))
    return d_cache, total

  init = (draft.init_cache(batch, cache_len), jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[1]


def draft_after_sweep(draft, dp, inputs, gamma: int, sweep_bytes: int, repeats: int = 32,
                      cache_len: int = 64, rounds: int = 3) -> Dict[str, float]:
  """What a draft block loses when as many bytes as the target's weights pass in between.

  In the decode, every target call streams the target's weights; on a CPU that pushes the
  draft's weights and caches out of the caches, and the next draft block reads them from
  memory again. This times the draft block alone, a read of `sweep_bytes` alone, and the
  two alternating, in interleaved rounds (each keeps its fastest).

  Args:
    draft, dp: the draft and its params.
    inputs: [B, S] int32 encoder inputs.
    gamma: G, draft tokens per block.
    sweep_bytes: bytes read between blocks (the target's weights: `params_bytes`).
    repeats, cache_len: of the timed loops.
    rounds: interleaved rounds.

  Returns:
    {'draft_block_seconds', 'sweep_seconds', 'alternating_seconds', 'penalty_seconds'
    (alternating - block - sweep), 'sweep_bytes'}.
  """
  sweep = jnp.ones((max(sweep_bytes // 4, 1),), jnp.float32)
  modes = {'draft_block_seconds': (True, False), 'sweep_seconds': (False, True),
           'alternating_seconds': (True, True)}
  best = dict.fromkeys(modes, float('inf'))
  for _ in range(max(rounds, 1)):
    for name, (with_draft, with_sweep) in modes.items():
      run = functools.partial(_repeat_draft_and_sweep, draft, dp, inputs, sweep, gamma,
                              cache_len=cache_len, with_draft=with_draft,
                              with_sweep=with_sweep)
      best[name] = min(best[name], _per_repeat_seconds(
          lambda n, run=run: run(repeats=n), repeats, 1))
  best['penalty_seconds'] = (best['alternating_seconds'] - best['draft_block_seconds']
                             - best['sweep_seconds'])
  return {**best, 'sweep_bytes': int(sweep_bytes)}


def params_bytes(params) -> int:
  """Bytes of a params pytree."""
  return int(sum(x.nbytes for x in jax.tree.leaves(params)))


def step_costs(target, tp, draft, dp, inputs, max_k: int, rounds: int = 3,
               **kw) -> Dict[str, object]:
  """The cost model of PAPER.md measured on this machine.

  Every call size is timed once per round, the rounds one after the other, and each
  keeps its fastest round: a slow spell of the machine then spoils no single ratio.

  Args:
    target, tp, draft, dp: the pair and their params.
    inputs: [B, S] int32 encoder inputs.
    max_k: measure v(K) for K = 1..max_k.
    rounds: passes over all call sizes.
    **kw: passed to `call_seconds`.

  Returns:
    {'target_step_seconds', 'draft_step_seconds', 'c', 'v': {K: t_K / t_1}}.
  """
  calls = [(draft, dp, 1)] + [(target, tp, k) for k in range(1, max_k + 1)]
  best = [float('inf')] * len(calls)
  for _ in range(max(rounds, 1)):
    best = [min(b, call_seconds(m, p, inputs, k, **kw)) for b, (m, p, k) in zip(best, calls)]
  d1, t = best[0], dict(zip(range(1, max_k + 1), best[1:]))
  return {'target_step_seconds': t[1], 'draft_step_seconds': d1, 'c': d1 / t[1],
          'v': {k: t[k] / t[1] for k in t}}


@functools.partial(jax.jit, static_argnames=('target', 'draft', 'cfg', 'slots'))
def _prefill(target, tp, draft, dp, inputs, cfg, slots=None):
  """What a decode does before its loop: encoders, caches, the first state. A stream
  (`slots`) encodes all its inputs and holds caches for its slots only."""
  if slots is None:
    return decoding._init_state(target, tp, draft, dp, inputs, jax.random.PRNGKey(0), cfg)  # pylint: disable=protected-access
  width = cfg.width(1)
  models = [(target, tp)] + ([(draft, dp)] if draft is not None else [])
  return [(m.encode(p, inputs), m.init_cache(slots, width)) for m, p in models]


def one_per_shape(batches: Sequence[np.ndarray]) -> list:
  """The first batch of each shape (batches padded to buckets have a few): running them
  once compiles every program the timed passes will call."""
  first = {}
  for x in batches:
    first.setdefault(np.shape(x), x)
  return list(first.values())


def prefill_seconds(target, tp, draft, dp, batches: Sequence[np.ndarray], gamma: int,
                    max_decode_len: int, trials: int = 3, slots: Optional[int] = None
                    ) -> float:
  """Seconds the decodes of `batches` spend before their loops (encoders and prefill).

  Timed alone, as its own jitted program, so that the loop's share of a decode is
  `timed_decode(...)['seconds']` minus this. `draft` None: the autoregressive decode's.
  The fastest of `trials` passes over all batches.
  """
  cfg = LoopConfig(gamma=gamma, max_decode_len=max_decode_len, sampling=SamplingConfig())
  run = lambda x: _prefill(target, tp, draft, dp, jnp.asarray(x, jnp.int32), cfg, slots)
  for x in one_per_shape(batches):
    jax.block_until_ready(run(x))
  passes = []
  for _ in range(trials):
    start = time.perf_counter()
    for batch in batches:
      jax.block_until_ready(run(batch))
    passes.append(time.perf_counter() - start)
  return min(passes)


class BatchTimes:
  """Times fn over every batch once per call; keeps each batch's fastest time and output.

  Calling it again adds a pass: the fastest pass per batch counts (the outputs are
  deterministic), so that a slow spell of a shared machine spoils one pass of a batch,
  not a whole figure. Each call returns the sum of the per-batch bests so far.
  """

  def __init__(self, fn: Callable, batches: Sequence[np.ndarray]):
    self.fn, self.batches = fn, list(batches)
    self.best = [float('inf')] * len(self.batches)
    self.outputs = [None] * len(self.batches)

  def __call__(self) -> float:
    for i, batch in enumerate(self.batches):
      start = time.perf_counter()
      out = jax.block_until_ready(self.fn(batch))
      self.best[i] = min(self.best[i], time.perf_counter() - start)
      if self.outputs[i] is None:
        self.outputs[i] = jax.tree.map(np.asarray, out)
    return sum(self.best)

  def summary(self) -> Dict[str, object]:
    """Seconds (the per-batch bests), tokens [N, L], lengths [N], stats, num_tokens and
    the loop iterations of all batches."""
    outs = self.outputs
    stats = jax.tree.map(lambda *a: np.concatenate(a), *[o.stats for o in outs])
    lengths = np.concatenate([o.lengths for o in outs])
    return {'seconds': sum(self.best), 'tokens': np.concatenate([o.tokens for o in outs]),
            'lengths': lengths, 'stats': stats, 'num_tokens': int(lengths.sum()),
            'iterations': sum(int(o.iterations) for o in outs if o.iterations is not None)}


def timed_decode(fn: Callable, batches: Sequence[np.ndarray], passes: int = 3
                 ) -> Dict[str, object]:
  """Runs fn(batch) over batches (compiled first, once per shape, untimed) and sums time,
  tokens and stats: compile_seconds is the time of those compiling calls.

  Each batch's time is the fastest of `passes` runs (see `BatchTimes`).
  """
  start = time.perf_counter()
  for x in one_per_shape(batches):
    jax.block_until_ready(fn(x))
  compile_seconds = time.perf_counter() - start
  timer = BatchTimes(fn, batches)
  for _ in range(passes):
    timer()
  return {**timer.summary(), 'compile_seconds': compile_seconds}


def choose_gamma(target, tp, draft, dp, inputs, sampling: SamplingConfig,
                 max_decode_len: int, max_gamma: int = 8, probe_gamma: int = 4):
  """`--gamma auto`: measures c, v(K) and alpha on one batch, maximises predicted speedup.

  Returns:
    (gamma, reason): the chosen gamma and a one-line explanation with the measured numbers.
  """
  costs = step_costs(target, tp, draft, dp, inputs, max_gamma + 1, rounds=1, repeats=16,
                     trials=1)
  probe = decoding.speculative_decode(target, tp, draft, dp, inputs, gamma=probe_gamma,
                                      max_decode_len=max_decode_len, sampling=sampling)
  s = jax.tree.map(np.asarray, probe.stats)
  alpha = float(min(1.0, s.beta_sum.sum() / max(s.beta_count.sum(), 1)))
  v = costs['v']
  gamma = theory.best_gamma(alpha, costs['c'], lambda k: v[k], range(1, max_gamma + 1))
  predicted = theory.speedup(alpha, gamma, costs['c'], v[gamma + 1])
  reason = (f'calibrated alpha {alpha:.3f}, draft cost c {costs["c"]:.3f}, verify cost '
            f'v({gamma + 1}) {v[gamma + 1]:.2f}: gamma {gamma} maximises the predicted '
            f'speedup ({predicted:.2f}x) over 1..{max_gamma}')
  return gamma, reason
