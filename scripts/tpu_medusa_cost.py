"""The compile-only TPU v4 cost of a Medusa proposal for T5-XXL beside t5_small's draft step
and T5-XXL's own step, and the speedup they predict with measured tokens per call.

    python scripts/tpu_medusa_cost.py --json docs/tpu_medusa_cost.json   # needs libtpu, no TPU

One chip, bfloat16, S = 128, L = 128, batch 1 and 8. The steps are the programs of
`specjax.speed.programs.program_fns` (as `python -m specjax.plan --speed` compiles them);
the Medusa proposal is `MedusaHeads.propose` of a chain of K tokens (K heads of D x D, each
through T5-XXL's D x V output projection, its top token) on random heads. Times are
roofline times (max of bytes / HBM bandwidth and flops / peak) of a TPU v4 chip. The
prediction: tokens per call / (1 + cost of the draft's proposal of G tokens / target step),
the verify of G + 1 tokens taken as one step (docs/tpu_speed.md measures it near 1.02 at
batch 1), with the tokens per call the bundled EnDe pair measures for the heads' chain of K
and demo_draft's chain of K (docs/medusa_heads.json): the assumption is that T5-XXL's heads
and t5_small accept as the demo pair's do.
"""
import argparse
import json
import sys

from specjax.speed import cli


def measure(batch: int, heads: int) -> dict:
  cli.prepare_tpu()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel
  from specjax.core.sampling import SamplingConfig, SamplingParams  # pylint: disable=import-outside-toplevel
  from specjax.core.state import LoopConfig  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import T5_CONFIGS  # pylint: disable=import-outside-toplevel
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
  medusa = MedusaHeads(target, heads)
  replicated = NamedSharding(mesh, PartitionSpec())
  like = lambda x: jax.ShapeDtypeStruct(x.shape, jnp.bfloat16 if x.dtype == jnp.float32
                                        else x.dtype, sharding=replicated)
  tp = jax.tree.map(like, jax.eval_shape(target.init, jax.random.PRNGKey(0)))
  hp = jax.tree.map(like, jax.eval_shape(medusa.init, jax.random.PRNGKey(0)))
  state = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated),
                       jax.eval_shape(lambda: medusa.init_cache(batch, 128)))
  seq = jax.ShapeDtypeStruct((batch, 128), jnp.int32, sharding=replicated)
  pos = jax.ShapeDtypeStruct((batch,), jnp.int32, sharding=replicated)
  greedy = SamplingParams.of(SamplingConfig(), batch)

  def propose(tp, hp, state, seq, pos):
    cfg = LoopConfig(gamma=heads, max_decode_len=128)
    return medusa.propose({'target': tp, 'own': hp}, {}, state, seq, pos, None, greedy,
                          cfg).tokens

  cost = cost_of(jax.jit(propose).lower(tp, hp, state, seq, pos).compile())
  out[f'medusa{heads} proposal'] = {'bytes': cost.bytes, 'flops': cost.flops,
                                   'seconds': cost.seconds(V4_CHIP)}
  return out


def predict(costs: dict, heads: int, per_call: dict) -> dict:
  """Speedups over T5-XXL alone: tokens per call / (1 + draft cost / target step)."""
  step = costs['t5_xxl step']['seconds']
  medusa = costs[f'medusa{heads} proposal']['seconds'] / step
  small = costs['t5_small step']['seconds'] / step
  return {'c_medusa_proposal': medusa, 'c_t5_small_step': small,
          **{f'{name} speedup': tokens / (1 + (medusa if name.startswith('medusa') else
                                               small * int(name.split()[-1])))
             for name, tokens in per_call.items()}}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  p.add_argument('--json', required=True, help='write the costs and predictions here')
  p.add_argument('--heads', type=int, default=4)
  p.add_argument('--measured', default='docs/medusa_heads.json',
                 help='scripts/medusa_heads.py\'s results: the tokens per call of the '
                      'bundled EnDe heads\' chain of K and demo_draft\'s chain of K, greedy')
  args = p.parse_args(argv)
  with open(args.measured, encoding='utf-8') as f:
    rows = json.load(f)['rows']
  pick = lambda kind: next(r['tokens_per_call'] for r in rows if r['task'] == 'ende' and
                           r['temperature'] == 0.0 and r['proposer'] == kind and
                           r['shape'] == f'chain {args.heads}')
  per_call = {'medusa': pick('medusa'), f't5_small gamma {args.heads}': pick('demo_draft')}
  result = {}
  for batch in (1, 8):
    costs = measure(batch, args.heads)
    result[f'B={batch}'] = {'costs': costs, 'predicted': predict(costs, args.heads, per_call)}
    print(json.dumps(result[f'B={batch}']), file=sys.stderr, flush=True)
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump({'tokens_per_call': per_call, **result}, f, indent=1)
  return 0


if __name__ == '__main__':
  sys.exit(main())
