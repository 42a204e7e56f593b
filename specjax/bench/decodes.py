"""Whole decodes timed for `python -m specjax.bench`: every input shape compiled first,
each batch's fastest pass kept, and the part spent before the loop (the `start` program
of the decoder: encoders and prefill) timed on its own."""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import api, decoder
from specjax.core.sampling import SamplingConfig, SamplingParams


def one_per_shape(batches: Sequence[np.ndarray]) -> list:
  """The first batch of each shape (batches padded to buckets have a few): running them
  once compiles every program the timed passes will call."""
  first = {}
  for x in batches:
    first.setdefault(np.shape(x), x)
  return list(first.values())


def compile_both(spec_fn: Callable, base_fn: Callable, batches: Sequence[np.ndarray]):
  """Compiles the speculative and the baseline decode for every input width before any
  timing: (the first compilation's seconds, BatchTimes of each)."""
  shapes = one_per_shape(batches)
  start = time.perf_counter()
  jax.block_until_ready(spec_fn(shapes[0]))
  compile_seconds = time.perf_counter() - start
  for x in shapes:  # every width compiled before any timing
    jax.block_until_ready((spec_fn(x), base_fn(x)))
  return compile_seconds, BatchTimes(spec_fn, batches), BatchTimes(base_fn, batches)


def prefill_seconds(target, tp, draft, dp, batches: Sequence[np.ndarray], gamma: int,
                    max_decode_len: int, trials: int = 3, slots: Optional[int] = None
                    ) -> float:
  """Seconds the decodes of `batches` spend before their loops (encoders and prefill).

  Times the decoder's own `start` program alone, so that the loop's share of a decode is
  `timed_decode(...)['seconds']` minus this. `draft` None: the target alone's. The fastest
  of `trials` passes over all batches.
  """
  def run(x):
    num = len(x)
    params = SamplingParams.of(SamplingConfig(), num)
    cfg = api.loop_config(target, gamma, max_decode_len, params.mode())
    start = decoder.build(target, draft, cfg, slots).start_program()
    return start(tp, dp if draft is not None else {}, jnp.asarray(x, jnp.int32),
                 jnp.int32(num), jnp.arange(num, dtype=jnp.int32), jax.random.PRNGKey(0),
                 jax.tree.map(jnp.asarray, params))

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
