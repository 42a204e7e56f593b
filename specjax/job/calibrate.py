"""`--gamma auto`: measure c, v(K) and alpha where the decode will run, then pick gamma."""
from __future__ import annotations

from typing import Optional, Tuple

import jax
import numpy as np

from specjax.bench import timing
from specjax.core import api, theory
from specjax.core.sampling import SamplingConfig
from specjax.parallel import rules as axis_rules


def _on_mesh(target, tp, draft, dp, inputs, mesh, rules):
  """Params and inputs placed as the sharded decode places them."""
  tp = jax.device_put(tp, axis_rules.param_shardings(target, mesh, rules))
  dp = jax.device_put(dp, axis_rules.param_shardings(draft, mesh, rules))
  inputs = jax.device_put(np.asarray(inputs, np.int32),
                          axis_rules.batch_major_shardings(inputs, mesh, rules))
  return tp, dp, inputs


def choose_gamma(target, tp, draft, dp, inputs, sampling: SamplingConfig,
                 max_decode_len: int, max_gamma: int = 8, probe_gamma: int = 4,
                 mesh=None, rules: Optional[axis_rules.Rules] = None
                 ) -> Tuple[int, str, dict]:
  """Measures c, v(K) and alpha on one batch, on the mesh the decode will use, and
  maximises the predicted speedup.

  Args:
    target, tp, draft, dp: the pair and their params.
    inputs: [B, S] int32, one batch of the run's inputs.
    sampling: the run's sampling setting (alpha depends on it).
    max_decode_len: L of the probe decode.
    max_gamma: gammas 1..max_gamma are considered.
    probe_gamma: gamma of the probe decode that measures alpha.
    mesh, rules: the run's mesh (None: one device).

  Returns:
    (gamma, reason, costs): the chosen gamma, a one-line explanation with the measured
    numbers, and the measured costs (with 'alpha' and the 'devices' the calls ran on).
  """
  rules = axis_rules.STANDARD_RULES if rules is None else rules
  if mesh is not None:
    tp, dp, inputs = _on_mesh(target, tp, draft, dp, inputs, mesh, rules)
  costs = timing.step_costs(target, tp, draft, dp, inputs, max_gamma + 1, rounds=1,
                            repeats=16, trials=1)
  probe = api.speculative_decode(target, tp, draft, dp, np.asarray(inputs), gamma=probe_gamma,
                                 max_decode_len=max_decode_len, sampling=sampling, mesh=mesh,
                                 rules=rules)
  s = jax.tree.map(np.asarray, probe.stats)
  alpha = float(min(1.0, s.beta_sum.sum() / max(s.beta_count.sum(), 1)))
  v = costs['v']
  gamma = theory.best_gamma(alpha, costs['c'], lambda k: v[k], range(1, max_gamma + 1))
  predicted = theory.speedup(alpha, gamma, costs['c'], v[gamma + 1])
  where = (f'{costs["devices"]} devices (mesh data={mesh.shape["data"]},'
           f'model={mesh.shape["model"]})' if mesh is not None else '1 device')
  reason = (f'calibrated on {where}: alpha {alpha:.3f}, draft cost c {costs["c"]:.3f}, '
            f'verify cost v({gamma + 1}) {v[gamma + 1]:.2f}: gamma {gamma} maximises the '
            f'predicted speedup ({predicted:.2f}x) over 1..{max_gamma}')
  return gamma, reason, {**costs, 'alpha': alpha}
