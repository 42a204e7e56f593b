"""The timed calls behind `python -m specjax.bench` and `--gamma auto`: the paper's costs c
and v(K) measured on the functions the decode loop runs.

- v(K) = t_K / t_1, t_K the time of `steps.verify` of K tokens (one target call);
- c = the time of `steps.draft_step` (one draft call and its argmax; for a proposer that
  is not a model, its proposal of one token) / t_1;
- the model calls of one iteration: `steps.draft_block` (the catch-up call and G - 1
  scanned steps) then `steps.verify` of G + 1 tokens, alternating as the loop runs them.
Each is timed inside a jitted `fori_loop` (as the decode loop calls them), so dispatch
overhead does not pollute it; tokens and positions change with the loop index, as in a
decode. With params placed on a mesh, the timed programs run sharded on it. Shape letters:
B rows, S encoder length, K tokens per call, T cache length, G gamma.
"""
from __future__ import annotations

import functools
import time
from typing import Callable, Dict

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import steps
from specjax.core.sampling import SamplingParams
from specjax.core.state import LoopConfig
from specjax.core.proposal import draft_view, min_depth, reads_target, shares_cache
from specjax.core.steps import Bound
from specjax.core.model_proposer import as_proposer

CACHE_LEN = 64  # the timed calls' cache length: they run near its middle (`_inputs_at`)
# numpy, not jnp: importing this module must not start a backend (jax.distributed first)
_GREEDY = SamplingParams(*(np.zeros((1,), d) for d in (np.float32, np.int32, np.float32)))


def _inputs_at(i, batch: int, cache_len: int, width: int):
  """seq [B, T] and positions [B] of iteration i of a timed loop: they vary with i, so
  that XLA cannot hoist the embedding lookup, the causal mask and the position bias out
  of the loop (the timed call would be cheaper than the one the decode loop makes)."""
  shift = (i % 2).astype(jnp.int32)
  pos = jnp.full((batch,), cache_len // 2, jnp.int32) + shift
  return jnp.full((batch, width), 3, jnp.int32) + shift, pos


def _encode(model, params, inputs):
  """What `model` reads of inputs [B, S]: its own encoding, or for a proposer handed the
  view of both params (`own_model`) the view of both encodings."""
  if reads_target(model) and not hasattr(model, 'decode'):
    return {'target': model.target.encode(params['target'], inputs),
            'own': model.encode(params['own'], inputs)}
  return model.encode(params, inputs)


@functools.partial(jax.jit, static_argnames=('model', 'num_tokens', 'cache_len', 'draft'))
def _repeat_call(model, params, inputs, num_tokens, repeats, cache_len, draft):
  """`repeats` calls near the cache's middle: the draft's step (draft) or a verify of K
  tokens; returns a checksum. `repeats` is traced (as in the two loops below): the timed
  loop and its zero-repeat twin are one program, compiled once, whose set-up work is the
  same in both."""
  bound = Bound(model, params, _encode(model, params, inputs))
  batch = inputs.shape[0]
  proposer = draft and not hasattr(model, 'decode')  # a draft that is not a model
  # A proposer's shortest chain (one token; a horizontal cascade's K + 1: `step_costs`
  # divides its time by it).
  cfg = LoopConfig(gamma=min_depth(model) if proposer else 1, max_decode_len=1)

  def body(i, carry):
    cache, total = carry
    seq, pos = _inputs_at(i, batch, cache_len, cache_len if proposer else num_tokens)
    if proposer:  # its proposal of its shortest chain
      d = bound.propose(cache, seq, pos, None, _GREEDY, cfg)
      return d.state, total + d.tokens[0, 0].astype(jnp.float32)
    if draft:
      d = steps.draft_step(bound, cache, seq[:, 0], pos, None, _GREEDY, cfg)
      return d.cache, total + d.x[0].astype(jnp.float32)
    logits, cache = steps.verify(bound, cache, seq[:, 0], seq[:, 1:], pos)
    return cache, total + logits[0, -1, 0]

  init = (model.init_cache(batch, cache_len), jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[1]


def per_repeat_seconds(run: Callable, repeats: int, trials: int) -> float:
  """Seconds of one repeat of run(n), a jitted loop of n repeats after fixed set-up work.

  The set-up (encoders, caches) is subtracted by timing a zero-repeat run of the same
  program too. Each of the two keeps its minimum over `trials` (interleaved), and the
  difference is taken of the minima: on a shared machine noise only adds time, and one
  slow t_1 would skew every v(K) = t_K / t_1 and c; the minimum of differences would
  instead pick the trial whose zero-repeat run was slowed.
  """
  jax.block_until_ready(run(repeats))  # compile (one program for every n)

  def timed(n):
    start = time.perf_counter()
    jax.block_until_ready(run(n))
    return time.perf_counter() - start

  pairs = [(timed(repeats), timed(0)) for _ in range(max(trials, 1))]
  loop, setup = (min(column) for column in zip(*pairs))
  return max((loop - setup) / repeats, 1e-9)


def call_seconds(model, params, inputs, num_tokens: int, repeats: int = 64,
                 cache_len: int = CACHE_LEN, trials: int = 5, draft: bool = False) -> float:
  """Seconds of one verify call of K tokens (inputs [B, S]), or with `draft` of one draft
  step (K = 1), the fastest of `trials` loops."""
  return per_repeat_seconds(
      lambda n: _repeat_call(model, params, inputs, num_tokens, n, cache_len, draft),
      repeats, trials)


def devices_used(model, params, inputs, cache_len: int = CACHE_LEN) -> int:
  """How many devices the timed calls run on (all of a mesh's when params are on one): a
  zero-repeat run of the timed verify of one token (the same program, not another)."""
  out = _repeat_call(model, params, inputs, 1, 0, cache_len, False)
  return len(out.sharding.device_set)


def _block(draft: Bound, cache, i, batch: int, cache_len: int, gamma: int):
  """The draft block of iteration i of a timed loop, greedy: (x [B, G], pos [B], cache);
  draft.model a proposer (a draft model's is `steps.draft_block`)."""
  seq, pos = _inputs_at(i, batch, cache_len, cache_len)
  cfg = LoopConfig(gamma=gamma, max_decode_len=1)
  d = draft.propose(cache, seq, pos, None, _GREEDY, cfg)
  return seq[:, 0], d.tokens, pos, d.state


@functools.partial(jax.jit, static_argnames=('target', 'draft', 'gamma', 'cache_len'))
def _repeat_model_calls(target, tp, draft, dp, inputs, gamma, repeats, cache_len):
  """`repeats` times the model calls of one speculative iteration, nothing else."""
  batch = inputs.shape[0]
  t = Bound(target, tp, target.encode(tp, inputs))
  d = Bound(as_proposer(draft), *draft_view(draft, tp, dp, t.encoded,
                                            draft.encode(dp, inputs)))

  def body(i, carry):
    t_cache, d_cache, total = carry
    if shares_cache(draft):  # it drafts in the target's cache, as in the loop
      last, x, pos, t_cache = _block(d, t_cache, i, batch, cache_len, gamma)
    else:
      last, x, pos, d_cache = _block(d, d_cache, i, batch, cache_len, gamma)
    logits, t_cache = steps.verify(t, t_cache, last, x, pos)
    return t_cache, d_cache, total + logits[0, -1, 0]

  init = (target.init_cache(batch, cache_len), draft.init_cache(batch, cache_len),
          jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[2]


def model_calls_seconds(target, tp, draft, dp, inputs, gamma: int, repeats: int = 32,
                        cache_len: int = CACHE_LEN, trials: int = 5) -> float:
  """Seconds of the model calls of one speculative iteration, run alternating in one loop.

  The cost model times each call alone; inside the decode loop the draft and target calls
  alternate (and a large target can push the draft's weights out of the CPU's caches).
  This is that alternation without the loop's own work (acceptance, commit).
  """
  return per_repeat_seconds(
      lambda n: _repeat_model_calls(target, tp, draft, dp, inputs, gamma, n, cache_len),
      repeats, trials)


@functools.partial(jax.jit, static_argnames=('draft', 'gamma', 'cache_len', 'with_draft',
                                             'with_sweep'))
def _repeat_draft_and_sweep(draft, dp, inputs, sweep, gamma, repeats, cache_len, with_draft,
                            with_sweep):
  """`repeats` draft blocks, or reads of all of `sweep`, or both alternating."""
  batch = inputs.shape[0]
  d = Bound(as_proposer(draft), dp, _encode(draft, dp, inputs))

  def body(i, carry):
    d_cache, total = carry
    if with_draft:
      _, x, _, d_cache = _block(d, d_cache, i, batch, cache_len, gamma)
      total = total + x[0, -1].astype(jnp.float32)
    if with_sweep:  # depends on the carry: XLA cannot hoist it out of the loop
      total = total + jnp.sum(sweep * (total + 1.0))
    return d_cache, total

  init = (draft.init_cache(batch, cache_len), jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[1]


def draft_after_sweep(draft, dp, inputs, gamma: int, sweep_bytes: int, repeats: int = 32,
                      cache_len: int = CACHE_LEN, rounds: int = 3,
                      target_params=None) -> Dict[str, float]:
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
    target_params: the target's, for a draft that drafts with them (layer-skip).

  Returns:
    {'draft_block_seconds', 'sweep_seconds', 'alternating_seconds', 'penalty_seconds'
    (alternating - block - sweep), 'sweep_bytes'}.
  """
  draft, dp = own_model(draft, target_params, dp)
  sweep = jnp.ones((max(sweep_bytes // 4, 1),), jnp.float32)
  modes = {'draft_block_seconds': (True, False), 'sweep_seconds': (False, True),
           'alternating_seconds': (True, True)}
  best = dict.fromkeys(modes, float('inf'))
  for _ in range(max(rounds, 1)):
    for name, (with_draft, with_sweep) in modes.items():
      run = functools.partial(_repeat_draft_and_sweep, draft, dp, inputs, sweep, gamma,
                              cache_len=cache_len, with_draft=with_draft,
                              with_sweep=with_sweep)
      best[name] = min(best[name], per_repeat_seconds(
          lambda n, run=run: run(repeats=n), repeats, 1))
  best['penalty_seconds'] = (best['alternating_seconds'] - best['draft_block_seconds']
                             - best['sweep_seconds'])
  return {**best, 'sweep_bytes': int(sweep_bytes)}


def own_model(draft, tp, dp) -> tuple:
  """(model, params) whose step is the draft's: a proposer that drafts with the target's
  layers (`specjax.core.proposal.reads_target`) is its cut model with the target's params
  tp (layer-skip), or itself with the view of both params (heads: a proposal of one
  token, all its heads run); any other draft is itself."""
  if not reads_target(draft):
    return draft, dp
  if hasattr(draft, 'model'):
    return draft.model, tp
  return draft, {'target': tp, 'own': dp}


def params_bytes(params) -> int:
  """Bytes of a params pytree."""
  return int(sum(x.nbytes for x in jax.tree.leaves(params)))


def step_costs(target, tp, draft, dp, inputs, max_k: int, rounds: int = 3,
               **kw) -> Dict[str, object]:
  """The cost model of docs/algorithm.md measured on this machine.

  Every call size is timed once per round, the rounds one after the other, and each
  keeps its fastest round: a slow spell of the machine then spoils no single ratio.

  Args:
    target, tp, draft, dp: the pair and their params (on one device or placed on a mesh).
    inputs: [B, S] int32 encoder inputs (placed on the mesh with the params, if any).
    max_k: measure v(K) for K = 1..max_k.
    rounds: passes over all call sizes.
    **kw: passed to `call_seconds`.

  Returns:
    {'target_step_seconds', 'draft_step_seconds', 'c', 'v': {K: t_K / t_1}, 'devices'}.
  """
  calls = ([(*own_model(draft, tp, dp), 1, True)]
           + [(target, tp, k, False) for k in range(1, max_k + 1)])
  best = [float('inf')] * len(calls)
  for _ in range(max(rounds, 1)):
    best = [min(b, call_seconds(m, p, inputs, k, draft=d, **kw))
            for b, (m, p, k, d) in zip(best, calls)]
  # A proposer's shortest chain is timed (`_repeat_call`): its cost per drafted token.
  d1, t = best[0] / min_depth(draft), dict(zip(range(1, max_k + 1), best[1:]))
  return {'target_step_seconds': t[1], 'draft_step_seconds': d1, 'c': d1 / t[1],
          'v': {k: t[k] / t[1] for k in t},
          'devices': devices_used(target, tp, inputs, kw.get('cache_len', CACHE_LEN))}
