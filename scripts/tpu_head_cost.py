"""The compile-only TPU v4 cost of a proposal by heads on T5-XXL's hidden states (Medusa
heads, an EAGLE head) beside t5_small's draft step and T5-XXL's own step, and the speedup
they predict with measured tokens per call.

    python scripts/tpu_head_cost.py --kind medusa --json docs/tpu_medusa_cost.json
    python scripts/tpu_head_cost.py --kind eagle --json docs/tpu_eagle_cost.json
    # both need libtpu, no TPU

One chip, bfloat16, S = 128, L = 128, batch 1 and 8. The steps are the programs of
`specjax.speed.programs.program_fns` (as `python -m specjax.plan --speed` compiles them);
the proposal is that of a chain of G tokens on random params: Medusa's `propose` (K = G
heads of D x D, each through T5-XXL's D x V output projection); EAGLE's catch-up call of
G + 1 positions plus G - 1 times one step of its layer (fc 2D x D, a T5-XXL decoder layer,
the output projection), compiled apart (XLA's cost analysis counts a loop's body once). Times are roofline times (max of bytes / HBM
bandwidth and flops / peak) of a TPU v4 chip. The prediction: tokens per call / (1 + cost
of the draft's proposal of G tokens / target step), the verify of G + 1 tokens taken as
one step (docs/tpu_speed.md measures it near 1.02 at batch 1), with the tokens per call
the bundled EnDe pair measures for the heads' chain of G and demo_draft's chain of G
(--measured): the assumption is that T5-XXL's heads and t5_small accept as the demo
pair's do.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_sections  # pylint: disable=wrong-import-position

from specjax.speed import cli  # pylint: disable=wrong-import-position


def measure(batch: int, kind: str, gamma: int) -> dict:
  cli.prepare_tpu()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel
  from specjax.core.sampling import SamplingConfig, SamplingParams  # pylint: disable=import-outside-toplevel
  from specjax.core.state import LoopConfig  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import T5_CONFIGS  # pylint: disable=import-outside-toplevel
  from specjax.proposers.eagle import EagleHead  # pylint: disable=import-outside-toplevel
  from specjax.proposers.medusa import MedusaHeads  # pylint: disable=import-outside-toplevel
  from specjax.speed import programs  # pylint: disable=import-outside-toplevel
  from specjax.speed.roofline import V4_CHIP, cost_of  # pylint: disable=import-outside-toplevel
  mesh = cli.Backend(cpu=False).mesh(1)
  model = lambda name: T5(T5_CONFIGS[name].replace(dtype='bfloat16'))
  target = model('t5_xxl')
  s = programs.Setting(target, model('t5_small'), batch, 128, 128, mesh, True, 'bfloat16')
  out = {}
  want = lambda m, p, k: p == 'step'
  for name, program, _, fn, fn_args, donate in programs.program_fns(s, want):
    cost = cost_of(jax.jit(fn, donate_argnums=donate).lower(*fn_args).compile())
    out[f'{name} step'] = {'bytes': cost.bytes, 'flops': cost.flops,
                           'seconds': cost.seconds(V4_CHIP)}
  heads = MedusaHeads(target, gamma) if kind == 'medusa' else EagleHead(target)
  replicated = NamedSharding(mesh, PartitionSpec())
  like = lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16 if x.dtype == jnp.float32
                                        else x.dtype, sharding=replicated)
  tp = jax.tree.map(like, jax.eval_shape(target.init, jax.random.PRNGKey(0)))
  hp = jax.tree.map(like, jax.eval_shape(heads.init, jax.random.PRNGKey(0)))
  state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                       jax.eval_shape(lambda: heads.init_cache(batch, 128)))
  src = jax.ShapeDtypeStruct((batch, 128), jnp.int32, sharding=replicated)
  seq = jax.ShapeDtypeStruct((batch, 128), jnp.int32, sharding=replicated)
  pos = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=replicated)
  greedy = SamplingParams.of(SamplingConfig(), batch)

  encoded = jax.eval_shape(target.encode, tp, src)  # the target's, once per input
  encoded = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype,
                                                        sharding=replicated), encoded)

  def propose(tp, hp, encoded, state, seq, pos):
    cfg = LoopConfig(gamma=gamma, max_decode_len=128)
    return heads.propose({'target': tp, 'own': hp}, {'target': encoded, 'own': {}}, state,
                         seq, pos, None, greedy, cfg).tokens

  record = lambda cost, times=1: {'bytes': times * cost.bytes, 'flops': times * cost.flops,
                                  'seconds': times * cost.seconds(V4_CHIP)}
  if kind == 'medusa':  # no loop: the one program is the proposal
    cost = cost_of(jax.jit(propose).lower(tp, hp, encoded, state, seq, pos).compile())
    out[f'{kind} proposal of {gamma}'] = record(cost)
    return out
  # EAGLE's chain scans its G - 1 steps, whose body XLA's cost analysis counts once: the
  # catch-up call and one step are compiled apart, and the proposal is their sum.
  view = lambda tp, hp, encoded: ({'target': tp, 'own': hp}, {'target': encoded, 'own': {}})

  def catch_up(tp, hp, encoded, state, seq, pos):
    return heads.catch_up(*view(tp, hp, encoded), state, seq, pos, gamma)[0]

  def step(tp, hp, encoded, state, seq, pos):
    feats = jnp.zeros(seq.shape[:1] + (1, heads.width), jnp.float32)
    return heads.run(*view(tp, hp, encoded), state, seq[:, :1], feats, pos)[1]

  parts = {name: cost_of(jax.jit(fn).lower(tp, hp, encoded, state, seq, pos).compile())
           for name, fn in (('catch-up', catch_up), ('step', step))}
  out[f'{kind} catch-up of {gamma + 1}'] = record(parts['catch-up'])
  out[f'{kind} step'] = record(parts['step'])
  out[f'{kind} proposal of {gamma}'] = {
      k: out[f'{kind} catch-up of {gamma + 1}'][k] + (gamma - 1) * out[f'{kind} step'][k]
      for k in ('bytes', 'flops', 'seconds')}
  return out


def predict(costs: dict, kind: str, gamma: int, per_call: dict) -> dict:
  """Speedups over T5-XXL alone: tokens per call / (1 + draft cost / target step)."""
  step = costs['t5_xxl step']['seconds']
  heads = costs[f'{kind} proposal of {gamma}']['seconds'] / step
  small = costs['t5_small step']['seconds'] / step
  return {f'c_{kind}_proposal': heads, 'c_t5_small_step': small,
          **{f'{name} speedup': tokens / (1 + (heads if name == kind else small * gamma))
             for name, tokens in per_call.items()}}


SECTION = '## Drafts on the target\'s hidden states (EAGLE, Medusa heads)'
DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'docs')


def section(results: dict) -> str:
  """The report section of each kind's results (kind -> what --json holds)."""
  lines = [SECTION, '',
           'Written by `python scripts/tpu_head_cost.py --kind KIND --json '
           'docs/tpu_KIND_cost.json --markdown docs/tpu_speed.md` (kept when the report '
           'is generated again). One chip, bfloat16, S = 128, L = 128; roofline times of '
           'the compiled programs (random params). A proposal of G tokens: Medusa\'s G '
           'heads (one program); an EAGLE head\'s catch-up call of G + 1 positions plus '
           'G - 1 steps of its layer (fc 2D x D, one T5-XXL decoder layer, the output '
           'projection), each compiled alone. The predicted speedup over T5-XXL alone is '
           'tokens per call / (1 + proposal / target step), a verify of G + 1 tokens taken '
           'as one step, with the tokens per call the bundled EnDe demo pair measures '
           '(greedy) for the heads\' chain of G and for demo_draft\'s (docs/benchmarks.md): '
           'the assumption is that T5-XXL\'s heads and t5_small accept as the demo pair\'s '
           'do.', '',
           '| draft | G | batch | proposal / T5-XXL step | one step / T5-XXL step | '
           't5_small step / T5-XXL step | tokens per call: heads, demo_draft | predicted '
           'x: heads | predicted x: t5_small |', '|---|---|---|---|---|---|---|---|---|']
  for kind, result in results.items():
    gamma = next(int(k.split()[-1]) for k in result['tokens_per_call'] if k.startswith('t5_'))
    per_call = result['tokens_per_call']
    for batch in ('B=1', 'B=8'):
      pr, costs = result[batch]['predicted'], result[batch]['costs']
      step = costs.get(f'{kind} step')
      one = '-' if step is None else f'{step["seconds"] / costs["t5_xxl step"]["seconds"]:.4f}'
      lines.append(f'| {kind} | {gamma} | {batch[2:]} | {pr[f"c_{kind}_proposal"]:.4f} | {one} | '
                   f'{pr["c_t5_small_step"]:.4f} | {per_call[kind]:.2f}, '
                   f'{per_call[f"t5_small gamma {gamma}"]:.2f} | {pr[f"{kind} speedup"]:.2f} | '
                   f'{pr[f"t5_small gamma {gamma} speedup"]:.2f} |')
  return '\n'.join(lines) + '\n'


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  p.add_argument('--json', required=True, help='write the costs and predictions here')
  p.add_argument('--markdown', help=f'write the "{SECTION}" section into this file (from '
                 'every docs/tpu_KIND_cost.json there is)')
  p.add_argument('--render', action='store_true', help='only write --markdown (no compile)')
  p.add_argument('--kind', choices=('medusa', 'eagle'), default='medusa')
  p.add_argument('--gamma', type=int, default=4, help='G, the chain\'s drafts (Medusa: K '
                 'heads)')
  p.add_argument('--measured', default=None,
                 help='the bundled heads\' measurements (default docs/KIND_heads.json, '
                      'written by scripts/KIND_heads.py): the tokens per call of their '
                      'chain of G and demo_draft\'s on EnDe, greedy')
  args = p.parse_args(argv)
  if not args.render:
    compute(args)
  if args.markdown:
    results = {}
    for kind in ('eagle', 'medusa'):
      path = os.path.join(DOCS, f'tpu_{kind}_cost.json')
      if os.path.exists(path):
        with open(path, encoding='utf-8') as f:
          results[kind] = json.load(f)
    report_sections.write_section(args.markdown, SECTION, section(results))
  return 0


def compute(args) -> None:
  """Compiles, costs and predicts; writes --json."""
  with open(args.measured or f'docs/{args.kind}_heads.json', encoding='utf-8') as f:
    rows = json.load(f)['rows']
  pick = lambda kind: next(r['tokens_per_call'] for r in rows if r['task'] == 'ende' and
                           r['temperature'] == 0.0 and r['proposer'] == kind and
                           r['shape'] == f'chain {args.gamma}')
  per_call = {args.kind: pick(args.kind), f't5_small gamma {args.gamma}': pick('demo_draft')}
  result = {}
  for batch in (1, 8):
    costs = measure(batch, args.kind, args.gamma)
    result[f'B={batch}'] = {'costs': costs,
                            'predicted': predict(costs, args.kind, args.gamma, per_call)}
    print(json.dumps(result[f'B={batch}']), file=sys.stderr, flush=True)
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump({'tokens_per_call': per_call, **result}, f, indent=1)


if __name__ == '__main__':
  sys.exit(main())
