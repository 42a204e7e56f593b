"""One row of `python -m specjax.bench`: every figure of a (gamma, temperature) row timed
in interleaved rounds, the formula's prediction, and the split of the efficiency.

On a shared machine the speed of the same call drifts by tens of percent over minutes.
A ratio of two figures timed minutes apart then measures the machine as much as the
code, so every figure a row divides by another (the two decodes, their prefills, t_1,
t_{G+1}, the draft step, the model calls of one iteration) is timed once per round, the
rounds one after the other, and each keeps its fastest round.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.bench import compiled
from specjax.bench import decodes
from specjax.core import api, theory
from specjax.core.figures import decode_figures
from specjax.core.model_proposer import as_proposer
from specjax.core.proposal import draft_view
from specjax.core.sampling import SamplingConfig, SamplingParams
from specjax.core.state import LoopConfig
from specjax.core.steps import Bound
from specjax.speed import timing


def interleaved_rounds(jobs: Dict[str, Callable[[], float]], rounds: int
                       ) -> Dict[str, list]:
  """Runs every job once per round, for `rounds` rounds, the jobs in turn in each round.

  Args:
    jobs: name -> a callable that times something and returns seconds.
    rounds: how many times each job runs.

  Returns:
    name -> its results, one per round, in order.
  """
  results = {name: [] for name in jobs}
  for _ in range(max(rounds, 1)):
    for name, job in jobs.items():
      results[name].append(job())
  return results


def spread(times) -> float:
  """How much slower the slowest of repeated timings is than the fastest: max/min - 1."""
  return max(times) / max(min(times), 1e-12) - 1.0


def score(baseline_seconds: float, seconds: float, alpha: float, gamma: int,
          costs: dict, baseline_prefill: float = 0.0, prefill: float = 0.0,
          tokens: Optional[int] = None, baseline_tokens: Optional[int] = None
          ) -> Dict[str, float]:
  """Measured speedups, the formula's prediction and their ratio.

  Args:
    baseline_seconds: the autoregressive decodes, end to end.
    seconds: the speculative decodes, end to end.
    alpha, gamma: the measured acceptance rate and the gamma used.
    costs: {'c': draft step / target step, 'v': {gamma + 1: v(gamma + 1)}}.
    baseline_prefill, prefill: the part of each spent before the loop.
    tokens, baseline_tokens: tokens each produced; speedups are then ratios of tokens per
      second (sampled outputs differ in length). Greedy outputs are identical.

  Returns:
    speedup (end to end), loop_speedup (the decode loops alone, which is what the
    formula models), predicted_speedup, efficiency = loop_speedup / predicted and
    end_to_end_efficiency = speedup / predicted. The loop figures are None when a
    prefill takes all of its decode's time (timing noise on tiny models).
  """
  ratio = tokens / baseline_tokens if tokens and baseline_tokens else 1.0
  measured = baseline_seconds / seconds * ratio
  predicted = theory.speedup(min(alpha, 1.0), gamma, costs['c'], costs['v'][gamma + 1])
  base_loop_seconds, loop_seconds = baseline_seconds - baseline_prefill, seconds - prefill
  # Loops lost in timing noise (tiny models): no loop figure rather than a wild one.
  loop = (base_loop_seconds / loop_seconds * ratio
          if min(base_loop_seconds, loop_seconds) > 0.0 else None)
  return {'speedup': measured, 'loop_speedup': loop, 'predicted_speedup': predicted,
          'efficiency': None if loop is None else loop / predicted,
          'end_to_end_efficiency': measured / predicted}


def efficiency_factors(row: dict) -> Optional[Dict[str, float]]:
  """Splits a row's efficiency into four measured factors whose product it is.

  - tokens: tokens per row and iteration over the formula's E (outputs end inside a
    block; at batch B > 1 rows that are done idle until the batch's last row is);
  - calls: the model calls timed alone (gamma c + v target steps) over the same calls
    run alternating, as the loop runs them;
  - loop: the alternating calls over a whole iteration (the loop's own work);
  - baseline: the target-alone loop's time per token of a row, times B, over t_1 (its
    own loop work and idle rows, which the comparison credits to speculative decoding).

  Args:
    row: a bench row with its interleaved timings (see `speculative_row`).

  Returns:
    {'tokens', 'calls', 'loop', 'baseline'}, or None when the loops were lost in noise.
  """
  loop_seconds = row['seconds'] - row['prefill_seconds']
  base_loop_seconds = row['baseline_seconds'] - row['baseline_prefill_seconds']
  if min(loop_seconds, base_loop_seconds) <= 0.0 or not row['iterations']:
    return None
  g, t_1, batch = row['gamma'], row['t_1'], row.get('batch_size', 1)
  expected = theory.expected_tokens_per_call(min(row['alpha'], 1.0), g)
  alone = (g * row['c'] + row['v']) * t_1
  together = row['model_calls_seconds']
  return {'tokens': row['tokens'] / (row['iterations'] * batch) / expected,
          'calls': alone / together,
          'loop': together / (loop_seconds / row['iterations']),
          'baseline': base_loop_seconds / row['baseline_tokens'] * batch / t_1}


def at_lengths(row: dict, lengths) -> Dict[str, object]:
  """The formula redone for outputs of the lengths the decode produced.

  E assumes outputs without end; `theory.tokens_per_iteration_at_lengths` is what the
  same alpha yields on outputs of these lengths, each ending inside its last block. It
  splits the tokens factor in two: lengths (E at these lengths / E, the formula's
  assumption) and variation (measured / E at these lengths: acceptance that varies from
  token to token rather than being one alpha, and at B > 1 rows that idle).

  Args:
    row: a bench row with alpha, gamma, c, v, loop_speedup and factors.
    lengths: [N] tokens of each output of the speculative decode.

  Returns:
    {'tokens_per_iteration_at_lengths', 'predicted_speedup_at_lengths',
    'efficiency_at_lengths', 'tokens_split': {'lengths', 'variation'} or None}.
  """
  g, alpha = row['gamma'], min(row['alpha'], 1.0)
  at = theory.tokens_per_iteration_at_lengths(alpha, g, [int(n) for n in lengths])
  predicted = at / (g * row['c'] + row['v'])
  loop = row.get('loop_speedup')
  f = row.get('factors')
  share = at / theory.expected_tokens_per_call(alpha, g)
  return {'tokens_per_iteration_at_lengths': at, 'predicted_speedup_at_lengths': predicted,
          'efficiency_at_lengths': None if loop is None else loop / predicted,
          'tokens_split': None if not f else {'lengths': share,
                                              'variation': f['tokens'] / share}}


@functools.partial(jax.jit, static_argnames=('draft', 'batch', 'gamma', 'cache_len'))
def _repeat_proposals(draft, params, encoded, repeats, batch: int, gamma: int,
                      cache_len: int):
  """`repeats` greedy proposals of a chain of `gamma` tokens near the cache's middle (the
  sequence and position vary with the loop index, as in a decode); a checksum."""
  bound = Bound(draft, params, encoded)
  cfg = LoopConfig(gamma=gamma, max_decode_len=1)
  greedy = SamplingParams.of(SamplingConfig(), batch)

  def body(i, carry):
    state, total = carry
    shift = (i % 2).astype(jnp.int32)
    seq = jnp.full((batch, cache_len), 3, jnp.int32) + shift
    pos = jnp.full((batch,), cache_len // 2, jnp.int32) + shift
    d = bound.propose(state, seq, pos, None, greedy, cfg)
    return d.state, total + d.tokens[0, 0].astype(jnp.float32)

  init = (draft.init_cache(batch, cache_len), jnp.zeros((), jnp.float32))
  return jax.lax.fori_loop(0, repeats, body, init)[1]


def proposal_seconds(target, tp, draft, dp, inputs, gamma: int, repeats: int = 32,
                     cache_len: int = timing.CACHE_LEN) -> float:
  """Seconds of one greedy proposal of a chain of G tokens by a draft that is no model.

  A cascade's or a retrieval draft's proposal is no G one-token steps (a vertical cascade
  verifies its cheap tokens with its model, REST searches once per proposal), so its c is
  this over G (`per_chain_cost`): gamma c is then its draft time per iteration.

  Args:
    target, tp: the target and its params (what the draft's encoding reads).
    draft, dp: the draft (a proposer) and its params.
    inputs: [B, S] int32 encoder inputs.
    gamma: G.
    repeats, cache_len: of the timed loop (`timing.per_repeat_seconds`).

  Returns:
    Seconds of one proposal (one trial: the row's rounds keep the fastest).
  """
  draft = as_proposer(draft)
  params, encoded = draft_view(draft, tp, dp, target.encode(tp, inputs),
                               draft.encode(dp, inputs))
  return timing.per_repeat_seconds(
      lambda n: _repeat_proposals(draft, params, encoded, n, inputs.shape[0], gamma,
                                  cache_len), repeats, 1)


def decode_fns(target, tp, draft, dp, gamma: int, sampling: SamplingConfig,
               max_decode_len: int, seed: int = 0, slots: Optional[int] = None, **rule):
  """(speculative, target alone): functions of one batch [B, S], or with `slots` of a
  stream of inputs [N, S] decoded through that many rows that refill as they finish.
  `rule`: verification, draft_threshold, threshold_rule, lenience of the speculative
  decode."""
  kw = dict(max_decode_len=max_decode_len, sampling=sampling, rng=jax.random.PRNGKey(seed),
            slots=slots)
  return (lambda x: api.speculative_decode(target, tp, draft, dp, x, gamma=gamma, **kw,
                                           **rule),
          lambda x: api.autoregressive_decode(target, tp, x, **kw))


def speculative_row(target, tp, draft, dp, batches, gamma: int, sampling: SamplingConfig,
                    max_decode_len: int, seed: int = 0, rounds: int = 3, repeats: int = 32,
                    cache_len: int = 64, slots: Optional[int] = None,
                    per_chain_cost: bool = False, **rule) -> dict:
  """One benchmark row: measured vs predicted speedup for one gamma and sampling setting.

  Args:
    target, tp, draft, dp: the pair and their params.
    batches: [B, S] int32 encoder inputs, one decode each.
    gamma: G, draft tokens per iteration.
    sampling: the sampling settings of both decodes.
    max_decode_len: L.
    seed: PRNG seed of both decodes.
    rounds: interleaved rounds (see the module docstring); each figure keeps its fastest.
    repeats, cache_len: of the timed model-call loops (`timing.call_seconds`).
    slots: stream each of `batches` through this many rows that take the next input as
      they finish (refill); None: each batch is one decode of its B rows.
    per_chain_cost: time t_draft as one proposal of the row's G tokens over G
      (`proposal_seconds`), for a draft whose proposal is no G one-token steps; default
      one draft step.
    **rule: verification, draft_threshold, threshold_rule, lenience of the speculative
      decode (as `specjax.speculative_decode`).

  Returns:
    The row: alpha, tokens per call, tokens/s, speedups, the prediction, efficiency and
    its factors, the interleaved timings (t_1, c, v, model_calls_seconds, ...), compile
    time and traces, and for greedy rows whether the output equals the target's.
  """
  # A long run's compiled code would exhaust the process's memory maps: free it past a bound.
  compiled.free_if_needed()
  spec_fn, base_fn = decode_fns(target, tp, draft, dp, gamma, sampling, max_decode_len,
                                seed, slots, **rule)
  shapes = decodes.one_per_shape(batches)
  decoders = {api.decoder_of(target, draft, gamma=gamma, max_decode_len=max_decode_len,
                             sampling=sampling, rows=len(x), slots=slots, **rule)
              for x in shapes}
  traces = sum(d.traces for d in decoders)
  compile_seconds, spec, base = decodes.compile_both(spec_fn, base_fn, batches)
  x0 = max(shapes, key=lambda x: sum(b.shape == x.shape for b in batches))  # the usual width
  batch = slots or len(batches[0])
  x0 = x0[:batch]  # the model calls are timed on B rows
  calls = lambda m, p, k, d=False: timing.call_seconds(m, p, x0, k, repeats, cache_len,
                                                        trials=1, draft=d)
  prefill = lambda d, p, g: decodes.prefill_seconds(target, tp, d, p, batches, g,
                                                    max_decode_len, trials=1, slots=slots)
  timings = interleaved_rounds({
      'seconds': spec, 'baseline_seconds': base,
      'prefill_seconds': lambda: prefill(draft, dp, gamma),
      'baseline_prefill_seconds': lambda: prefill(None, None, 0),
      't_1': lambda: calls(target, tp, 1), 't_verify': lambda: calls(target, tp, gamma + 1),
      't_draft': ((lambda: proposal_seconds(target, tp, draft, dp, x0, gamma, repeats,
                                            cache_len) / gamma) if per_chain_cost else
                  lambda: calls(*timing.own_model(draft, tp, dp), 1, True)),
      'model_calls_seconds': lambda: timing.model_calls_seconds(
          target, tp, draft, dp, x0, gamma, repeats, cache_len, trials=1),
  }, rounds)
  t = {name: min(times) for name, times in timings.items()}  # each figure's fastest round
  run, ref = spec.summary(), base.summary()
  s = run['stats']
  num_calls = int(s.target_calls.sum())
  f = decode_figures(s)
  alpha = float(f.alpha)
  costs = {'c': t['t_draft'] / t['t_1'], 'v': {gamma + 1: t['t_verify'] / t['t_1']}}
  row = {
      'gamma': gamma, 'temperature': sampling.temperature, 'alpha': alpha,
      'alpha_accepted': float(f.acceptance_rate), 'tokens_per_call': float(f.tokens_per_call),
      'predicted_tokens_per_call': theory.expected_tokens_per_call(min(alpha, 1.0), gamma),
      'target_calls': num_calls, 'tokens': run['num_tokens'],
      'baseline_tokens': ref['num_tokens'],
      'tokens_per_second': run['num_tokens'] / t['seconds'],
      'baseline_tokens_per_second': ref['num_tokens'] / t['baseline_seconds'],
      'iterations': run['iterations'], 'batch_size': batch, 'refill': bool(slots),
      'drafted_per_call': float(f.drafted_per_call),
      'c_timed': 'proposal of G / G' if per_chain_cost else 'one draft step',
      **t, 'c': costs['c'], 'v': costs['v'][gamma + 1],
      **score(t['baseline_seconds'], t['seconds'], alpha, gamma, costs,
              t['baseline_prefill_seconds'], t['prefill_seconds'], run['num_tokens'],
              ref['num_tokens']),
      'compile_seconds': compile_seconds,
      'traces': sum(d.traces for d in decoders) - traces, 'shapes': len(shapes),
      # Noise: how much slower each figure's slowest round was than its fastest.
      'spread': {name: spread(times) for name, times in timings.items()},
  }
  row['factors'] = efficiency_factors(row)
  row.update(at_lengths(row, run['lengths']))
  if row['factors'] is not None:
    # Against the model calls as the loop runs them (alternating): what the loop loses.
    f = row['factors']
    row['efficiency_in_loop'] = f['tokens'] * f['loop'] * f['baseline']
  if sampling.greedy:
    row['identical_to_target'] = bool(np.array_equal(run['tokens'], ref['tokens']))
  return row


def baseline_run(target, tp, batches, sampling: SamplingConfig, max_decode_len: int,
                 seed: int = 0, slots: Optional[int] = None) -> dict:
  """The jitted autoregressive decode over the batches: the target alone's tokens/s."""
  _, base_fn = decode_fns(target, tp, None, None, 0, sampling, max_decode_len, seed, slots)
  run = decodes.timed_decode(base_fn, batches)
  run['tokens_per_second'] = run['num_tokens'] / run['seconds']
  run['prefill_seconds'] = decodes.prefill_seconds(target, tp, None, None, batches, 0,
                                                     max_decode_len, slots=slots)
  return run
