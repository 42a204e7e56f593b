"""`--gamma auto`: measure c, v(K) and alpha where the decode will run, then pick gamma;
with `--tree auto`, pick the chain or a token tree (`choose_tree`)."""
from __future__ import annotations

import time
from typing import Callable, Dict, Optional, Sequence, Tuple

import jax
import numpy as np

from specjax.core import api, theory
from specjax.core.figures import decode_figures
from specjax.core.sampling import SamplingConfig
from specjax.core.proposal import reads_target
from specjax.job import tree_auto
from specjax.parallel import rules as axis_rules
from specjax.speed import timing


def _on_mesh(target, tp, draft, dp, inputs, mesh, rules):
  """Params and inputs placed as the sharded decode places them."""
  tp = jax.device_put(tp, axis_rules.param_shardings(target, mesh, rules))
  dp = jax.device_put(dp, axis_rules.param_shardings(draft, mesh, rules))
  inputs = jax.device_put(np.asarray(inputs, np.int32),
                          axis_rules.batch_major_shardings(inputs, mesh, rules))
  return tp, dp, inputs


def tokens_per_second(decodes, passes: int) -> list:
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


def _count(inputs, probe) -> int:
  """How many inputs the calibration's decodes run on: the probe's, or the batch's."""
  return len(inputs if probe is None else probe)


def _calibration(target, tp, draft, dp, inputs, sampling, max_decode_len, max_gamma, mesh,
                 rules, probe, slots):
  """What `choose_gamma` and `choose_tree` both start from: the params and inputs placed
  as the run places them, the probe inputs, c and v(K) for K up to max_gamma + 1 (as
  `timing.step_costs` measures them), and the probe decodes' keyword arguments."""
  rules = axis_rules.STANDARD_RULES if rules is None else rules
  probe = np.asarray(inputs if probe is None else probe)
  if mesh is not None:
    tp, dp, inputs = _on_mesh(target, tp, draft, dp, inputs, mesh, rules)
  costs = timing.step_costs(target, tp, draft, dp, inputs, max_gamma + 1, rounds=1,
                            repeats=16, trials=3)
  kw = dict(max_decode_len=max_decode_len, sampling=sampling, mesh=mesh, rules=rules,
            slots=slots)
  return tp, dp, inputs, probe, costs, kw


def choose_gamma(target, tp, draft, dp, inputs, sampling: SamplingConfig,
                 max_decode_len: int, max_gamma: int = 8, probe_gamma: int = 4,
                 mesh=None, rules: Optional[axis_rules.Rules] = None, probe=None,
                 slots: Optional[int] = None, passes: int = 3,
                 say: Optional[Callable[[str], None]] = None, least_gamma: int = 1, **rule
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
    max_gamma: gammas least_gamma..max_gamma are considered.
    probe_gamma: gamma of the probe decode that measures alpha (least_gamma at least).
    mesh, rules: the run's mesh (None: one device).
    probe: [U, S] the inputs the decodes are timed on (default `inputs`).
    slots: decode the probe through this many refilling rows, as the run does.
    passes: timed passes of each decode (each keeps its fastest).
    say: called with a line saying what is measured, before it is (progress), or None.
    least_gamma: the shortest chain the draft proposes (`specjax.core.proposal.min_depth`:
      a horizontal cascade's K + 1), at most max_gamma.
    **rule: verification, draft_threshold, threshold_rule, lenience, as the run.

  Raises:
    ValueError: least_gamma above max_gamma (one line).

  Returns:
    (gamma, reason, costs): the chosen gamma (0: the target alone), a one-line explanation
    with the measured numbers, and the measurements (c, v, 'alpha', 'predicted_best',
    'predicted_speedup', 'measured_speedup', the 'devices' the calls ran on).
  """
  if least_gamma > max_gamma:
    raise ValueError(f'--gamma auto: the draft proposes chains of at least {least_gamma} '
                     f'tokens, more than the {max_gamma} it may weigh: pass --max-gamma '
                     f'{least_gamma} or more (and --max-decode-len {least_gamma} or more), '
                     'or --gamma N')
  if say:
    say(f'--gamma auto: measuring gammas {least_gamma}..{max_gamma} on '
        f'{_count(inputs, probe)} inputs, then timing the best against the target alone')
  tp, dp, inputs, probe, costs, kw = _calibration(target, tp, draft, dp, inputs, sampling,
                                                  max_decode_len, max_gamma, mesh, rules,
                                                  probe, slots)
  first = api.speculative_decode(target, tp, draft, dp, probe,
                                 gamma=max(probe_gamma, least_gamma), **kw, **rule)
  s = jax.tree.map(np.asarray, first.stats)
  alpha = float(min(1.0, decode_figures(s).alpha))
  v = costs['v']
  best = theory.best_gamma(alpha, costs['c'], lambda k: v[k],
                           range(least_gamma, max_gamma + 1))
  predicted = theory.speedup(alpha, best, costs['c'], v[best + 1])
  spec, alone = tokens_per_second([
      lambda: api.speculative_decode(target, tp, draft, dp, probe, gamma=best, **kw, **rule),
      lambda: api.autoregressive_decode(target, tp, probe, **kw)], passes)
  measured = spec / alone
  gamma = best if measured >= 1.0 else 0
  where = (f'{costs["devices"]} devices (mesh data={mesh.shape["data"]},'
           f'model={mesh.shape["model"]})' if mesh is not None else '1 device')
  found = (f'calibrated on {where}: alpha {alpha:.3f}, draft cost c {costs["c"]:.3f}, '
           f'verify cost v({best + 1}) {v[best + 1]:.2f}: gamma {best} maximises the '
           f'predicted speedup ({predicted:.2f}x) over {least_gamma}..{max_gamma}, and measures '
           f'{measured:.2f}x on {len(probe)} inputs')
  reason = found if gamma else (f'{found}; slower than the target alone, so gamma 0: the '
                                'target alone decodes')
  return gamma, reason, {**costs, 'alpha': alpha, 'predicted_best': best,
                         'predicted_speedup': predicted, 'measured_speedup': measured}


def _where(costs: dict, mesh) -> str:
  return (f'{costs["devices"]} devices (mesh data={mesh.shape["data"]},'
          f'model={mesh.shape["model"]})' if mesh is not None else '1 device')


def verify_costs(target, tp, inputs, sizes: Sequence[int], costs: dict) -> Dict[int, float]:
  """v(K) for the verify call of K tokens, K in `sizes`: those `timing.step_costs` measured
  (`costs`), the others timed here, over a one-token call timed in the same cache (one
  longer than `timing.CACHE_LEN` where K needs it).

  Args:
    target, tp: the target and its params; inputs: [B, S] int32 (on the mesh, if any).
    sizes: the K wanted.
    costs: `timing.step_costs`'s measurements.
  """
  out = {k: costs['v'][k] for k in sizes if k in costs['v']}
  rest = sorted(set(sizes) - set(out))
  if not rest:
    return out
  cache_len = max(timing.CACHE_LEN, 2 * (max(rest) + 2))
  seconds = lambda k: timing.call_seconds(target, tp, inputs, k, repeats=16, trials=3,
                                          cache_len=cache_len)
  one = costs['target_step_seconds'] if cache_len == timing.CACHE_LEN else seconds(1)
  out.update({k: seconds(k) / one for k in rest})
  return out


def draft_call_costs(draft, tp, dp, inputs, widths: Sequence[int]) -> Dict[int, float]:
  """u(K): a draft call of K tokens over a one-token one, K in `widths` (u(1) = 1).

  Timed for a draft that is a model (its own, or layer-skip's cut of the target); a
  proposer that is not one (a bigram table, a copy, retrieval, heads on the target's
  states) scores its nodes at about one call's cost, so u(K) = 1.
  """
  model, params = timing.own_model(draft, tp, dp)
  wide = sorted(set(widths) - {1})
  if not wide or not hasattr(model, 'decode') or hasattr(model, 'propose') or reads_target(
      model):
    return {k: 1.0 for k in set(widths) | {1}}
  seconds = lambda k: timing.call_seconds(model, params, inputs, k, repeats=16, trials=3)
  one = seconds(1)
  return {1: 1.0, **{k: seconds(k) / one for k in wide}}


def choose_tree(target, tp, draft, dp, inputs, sampling: SamplingConfig,
                max_decode_len: int, trees: Sequence[tree_auto.Tree], max_gamma: int = 8,
                probe_gamma: int = 4, mesh=None, rules: Optional[axis_rules.Rules] = None,
                probe=None, slots: Optional[int] = None, passes: int = 3,
                say: Optional[Callable[[str], None]] = None, **rule) -> tuple:
  """`--tree auto`: picks the best chain, a token tree, or the target alone.

  Measures c and v(K) as `choose_gamma` does and takes the chain's gamma G by the paper's
  formula; then every candidate (that chain and `trees`) decodes the probe inputs once,
  and its predicted speedup is its measured tokens per target call over the cost of one
  iteration: its draft calls, c u(K) each (`draft_call_costs`, `tree_auto.draft_calls`),
  plus its verify call of N + 1 tokens, v(N + 1) (`verify_costs`; a chain's N is G). The
  candidate predicted fastest is timed against the target alone on the probe inputs, and
  the answer is the target alone when it measures slower.

  Args:
    target, tp, draft, dp: the pair and their params (the draft takes tree calls).
    inputs: [B, S] int32, one batch of the run's inputs.
    sampling: the run's sampling setting.
    max_decode_len: L of the probe decodes.
    trees: the candidate trees (`tree_auto.parse`, cut by `tree_auto.fit`).
    max_gamma: the chain's gammas 1..max_gamma are considered.
    probe_gamma: gamma of the probe decode that measures alpha.
    mesh, rules: the run's mesh (None: one device).
    probe: [U, S] the inputs the decodes run on (default `inputs`).
    slots: decode the probe through this many refilling rows, as the run does.
    passes: timed passes of the two timed decodes (each keeps its fastest).
    say: called with a line saying what is measured, before it is (progress), or None.
    **rule: verification, draft_threshold, threshold_rule, lenience, as the run.

  Returns:
    (gamma, tree, reason, calibration): gamma 0 and tree None for the target alone, the
    chain's gamma and None for the chain, or the tree's depth and the tree; a one-line
    explanation with the measured numbers; and the measurements, JSON-able: 'alpha', 'c',
    'v' (the chain's v(K), keys str(K)), 'tree_v' (v(N + 1) of the trees' node counts),
    'draft_call_cost' (u(K)), 'candidates' (each: 'name', 'kind' chain, static or
    dynamic, 'tree' as `tree_auto.to_json`, 'gamma', 'nodes', 'tokens_per_call',
    'draft_calls', 'draft_cost', 'verify_cost', 'predicted_speedup'), 'predicted_best'
    (the chain's gamma), 'choice' (the name of the candidate predicted fastest),
    'predicted_speedup' and 'measured_speedup' (that candidate's), 'chosen' (its name, or
    'target alone').
  """
  if say:
    say(f'--tree auto: measuring the chain (gammas 1..{max_gamma}) and {len(trees)} trees '
        f'on {_count(inputs, probe)} inputs, then timing the best against the target alone')
  tp, dp, inputs, probe, costs, kw = _calibration(target, tp, draft, dp, inputs, sampling,
                                                  max_decode_len, max_gamma, mesh, rules,
                                                  probe, slots)
  decode = lambda gamma, tree: api.speculative_decode(target, tp, draft, dp, probe,
                                                      gamma=gamma, tree=tree, **kw, **rule)
  tokens_per_call = lambda out: float(decode_figures(jax.tree.map(np.asarray,
                                                                  out.stats)).tokens_per_call)
  first = decode(probe_gamma, None)
  alpha = float(min(1.0, decode_figures(jax.tree.map(np.asarray, first.stats)).alpha))
  v, c = costs['v'], costs['c']
  best = theory.best_gamma(alpha, c, lambda k: v[k], range(1, max_gamma + 1))
  shapes = [(best, None)] + [(t.depth_count, t) for t in trees]
  tree_v = verify_costs(target, tp, inputs, [t.num_nodes + 1 for t in trees], costs)
  u = draft_call_costs(draft, tp, dp, inputs,
                       [w for g, t in shapes for w in tree_auto.draft_calls(t, g)])
  rows = []
  for gamma, tree in shapes:
    calls = tree_auto.draft_calls(tree, gamma)
    nodes = gamma if tree is None else tree.num_nodes
    made = first if tree is None and gamma == probe_gamma else decode(gamma, tree)
    row = dict(name=(f'chain gamma {gamma}' if tree is None else
                     f'tree {tree_auto.label(tree)}'),
               kind='chain' if tree is None else tree_auto.to_json(tree)['kind'],
               tree=tree_auto.to_json(tree), gamma=gamma, nodes=nodes,
               tokens_per_call=tokens_per_call(made), draft_calls=list(calls),
               draft_cost=c * sum(u[w] for w in calls),
               verify_cost=v[nodes + 1] if tree is None else tree_v[nodes + 1])
    row['predicted_speedup'] = theory.tree_speedup(row['tokens_per_call'], row['draft_cost'],
                                                   row['verify_cost'])
    rows.append(row)
  pick = max(range(len(rows)), key=lambda i: (rows[i]['predicted_speedup'], -i))
  gamma, tree = shapes[pick]
  spec, alone = tokens_per_second([lambda: decode(gamma, tree),
                                    lambda: api.autoregressive_decode(target, tp, probe, **kw)],
                                   passes)
  measured = spec / alone
  chosen = measured >= 1.0
  listed = ', '.join(f'{r["name"]} {r["tokens_per_call"]:.2f}/({r["draft_cost"]:.2f}+'
                     f'{r["verify_cost"]:.2f}) = {r["predicted_speedup"]:.2f}x' for r in rows)
  found = (f'calibrated on {_where(costs, mesh)}: alpha {alpha:.3f}, draft cost c {c:.3f}; '
           f'predicted speedup = tokens per call/(draft cost + verify cost v(N+1)): {listed}; '
           f'{rows[pick]["name"]} maximises the predicted speedup '
           f'({rows[pick]["predicted_speedup"]:.2f}x) over these {len(rows)} candidates, and '
           f'measures {measured:.2f}x on {len(probe)} inputs')
  reason = (f'{found}, so {tree_auto.describe(gamma, tree)} decodes' if chosen else
            f'{found}; slower than the target alone, so gamma 0: the target alone decodes')
  calibration = {'alpha': alpha, 'c': c, 'v': {str(k): x for k, x in v.items()},
                 'tree_v': {str(k): x for k, x in tree_v.items()},
                 'draft_call_cost': {str(k): x for k, x in u.items()},
                 'candidates': rows, 'predicted_best': best, 'choice': rows[pick]['name'],
                 'predicted_speedup': rows[pick]['predicted_speedup'],
                 'measured_speedup': measured,
                 'chosen': rows[pick]['name'] if chosen else 'target alone'}
  return (gamma, tree, reason, calibration) if chosen else (0, None, reason, calibration)
