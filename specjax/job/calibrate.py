"""`--gamma auto`: measure c, v(K) and alpha where the decode will run, then pick gamma."""
from __future__ import annotations

import time
from typing import Optional, Tuple

import jax
import numpy as np

from specjax.core import api, theory
from specjax.core.figures import decode_figures
from specjax.core.sampling import SamplingConfig
from specjax.parallel import rules as axis_rules
from specjax.speed import timing


def _on_mesh(target, tp, draft, dp, inputs, mesh, rules):
  """Params and inputs placed as the sharded decode places them."""
  tp = jax.device_put(tp, axis_rules.param_shardings(target, mesh, rules))
  dp = jax.device_put(dp, axis_rules.param_shardings(draft, mesh, rules))
  inputs = jax.device_put(np.asarray(inputs, np.int32),
                          axis_rules.batch_major_shardings(inputs, mesh, rules))
  return tp, dp, inputs


def _tokens_per_second(decodes, passes: int) -> list:
  """Output tokens per second of each decode(), each compiled first, then timed in
  `passes` interleaved rounds (a slow spell of a shared machine then hits both), each
  keeping its fastest."""
  tokens = [int(np.asarray(jax.block_until_ready(d()).lengths).sum()) for d in decodes]
  best = [float('inf')] * len(decodes)
  for _ in range(max(passes, 1)):
    for i, decode in enumerate(decodes):
      start = time.perf_counter()
      jax.block_until_ready(decode())
      best[i] = min(best[i], time.perf_counter() - start)
  return [n / max(b, 1e-9) for n, b in zip(tokens, best)]


def choose_gamma(target, tp, draft, dp, inputs, sampling: SamplingConfig,
                 max_decode_len: int, max_gamma: int = 8, probe_gamma: int = 4,
                 mesh=None, rules: Optional[axis_rules.Rules] = None, probe=None,
                 slots: Optional[int] = None, passes: int = 3, **rule
                 ) -> Tuple[int, str, dict]:
  """Picks gamma where the decode will run, or 0 (the target alone) when no gamma wins.

  Measures c and v(K) on one batch at the run's batch size, alpha with a probe decode,
  takes the gamma the paper's formula predicts fastest, then times that gamma's decode
  and the target alone's on the probe inputs: when speculation measures slower (as it can
  at larger batches on compute-bound hardware, where the verify call is not free), the
  answer is 0, so that `--gamma auto` is never slower than the target alone.

  Args:
    target, tp, draft, dp: the pair and their params.
    inputs: [B, S] int32, one batch of the run's inputs.
    sampling: the run's sampling setting (alpha depends on it).
    max_decode_len: L of the probe decodes.
    max_gamma: gammas 1..max_gamma are considered.
    probe_gamma: gamma of the probe decode that measures alpha.
    mesh, rules: the run's mesh (None: one device).
    probe: [U, S] the inputs the decodes are timed on (default `inputs`).
    slots: decode the probe through this many refilling rows, as the run does.
    passes: timed passes of each decode (each keeps its fastest).
    **rule: verification, draft_threshold, threshold_rule, lenience, as the run.

  Returns:
    (gamma, reason, costs): the chosen gamma (0: the target alone), a one-line explanation
    with the measured numbers, and the measurements (c, v, 'alpha', 'predicted_best',
    'predicted_speedup', 'measured_speedup', the 'devices' the calls ran on).
  """
  rules = axis_rules.STANDARD_RULES if rules is None else rules
  probe = np.asarray(inputs if probe is None else probe)
  if mesh is not None:
    tp, dp, inputs = _on_mesh(target, tp, draft, dp, inputs, mesh, rules)
  costs = timing.step_costs(target, tp, draft, dp, inputs, max_gamma + 1, rounds=1,
                            repeats=16, trials=3)
  kw = dict(max_decode_len=max_decode_len, sampling=sampling, mesh=mesh, rules=rules,
            slots=slots)
  first = api.speculative_decode(target, tp, draft, dp, probe, gamma=probe_gamma, **kw, **rule)
  s = jax.tree.map(np.asarray, first.stats)
  alpha = float(min(1.0, decode_figures(s).alpha))
  v = costs['v']
  best = theory.best_gamma(alpha, costs['c'], lambda k: v[k], range(1, max_gamma + 1))
  predicted = theory.speedup(alpha, best, costs['c'], v[best + 1])
  spec, alone = _tokens_per_second([
      lambda: api.speculative_decode(target, tp, draft, dp, probe, gamma=best, **kw, **rule),
      lambda: api.autoregressive_decode(target, tp, probe, **kw)], passes)
  measured = spec / alone
  gamma = best if measured >= 1.0 else 0
  where = (f'{costs["devices"]} devices (mesh data={mesh.shape["data"]},'
           f'model={mesh.shape["model"]})' if mesh is not None else '1 device')
  found = (f'calibrated on {where}: alpha {alpha:.3f}, draft cost c {costs["c"]:.3f}, '
           f'verify cost v({best + 1}) {v[best + 1]:.2f}: gamma {best} maximises the '
           f'predicted speedup ({predicted:.2f}x) over 1..{max_gamma}, and measures '
           f'{measured:.2f}x on {len(probe)} inputs')
  reason = found if gamma else (f'{found}; slower than the target alone, so gamma 0: the '
                                'target alone decodes')
  return gamma, reason, {**costs, 'alpha': alpha, 'predicted_best': best,
                         'predicted_speedup': predicted, 'measured_speedup': measured}
