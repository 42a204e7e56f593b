"""The compile-only TPU v4 cost of lookahead decoding's verify call and proposal, and of a
vertical cascade's draft calls, beside the draft model's chain, and the speedup they
predict with measured tokens per call.

    python scripts/tpu_lookahead_cost.py --json docs/tpu_lookahead_cost.json \\
        --markdown docs/tpu_speed.md   # needs libtpu, no TPU

or each batch in a process of its own, side by side, then merged (no compile):

    python scripts/tpu_lookahead_cost.py --batches 1 --json b1.json   # and 8: b8.json
    python scripts/tpu_lookahead_cost.py --merge b1.json b8.json \
        --json docs/tpu_lookahead_cost.json --markdown docs/tpu_speed.md

One chip, bfloat16, S = L = 128, batch 1 and 8, as scripts/tpu_retrieval_cost.py costs the
target's step, its chain verify of K = G + 1 tokens (`programs.program_fns`) and t5_small's
chain of G (G of its steps, `tpu_retrieval_cost.chain_of`). Besides them:

- lookahead:W,N,G (`specjax.proposers.lookahead`): the target's ONE call that verifies the
  Jacobi window (W branches of N - 1 levels) and up to G n-grams as one tree of
  (W + G)(N - 1) nodes
  (`tree_steps.verify_tree`, with the caches and a dynamic tree's mask [B, M, M] of a
  decode with that draft), and the proposal itself (`Bound(draft, params,
  encoded).propose` as the loop calls it: the pool's update, its top-G lookup and the
  trie; greedy, and sampled with its one-hot q);
- cascade:DRAFT/CHEAP/k (`specjax.proposers.cascade.VerticalCascade`): the draft's chain of
  G drafted k tokens at a time by CHEAP (bigram, suffix) and verified by the draft (costed
  as t5_small, as the draft model's chain is). Each of its n draft calls follows one
  proposal of CHEAP and scores k + 1 tokens, keeping 1 to k + 1 of them (the first also
  feeds the token before); its loop (`lax.while_loop`) makes all but the first, until the
  chain holds G tokens. It is compiled with exactly 1, 2 and 3 calls at the longest chain
  (n calls cost the first plus n - 1 times what the second adds; the third checks that
  the calls after the first are alike), and a chain of G is costed at its fewest
  n = ceil(G / (k + 1)) (every cheap draft kept) and its most n = G (none kept), both at
  most C for cascade:DRAFT/CHEAP/k/C (a chain capped at C draft calls).

The prediction: tokens per call / (c + v), c the proposal and v the target's verify, both
in target steps, for each row of --measured-json (written by scripts/retrieval_drafts.py)
on --tasks whose proposer is 'model' (a chain: c the t5_small chain of G), 'lookahead:W,N,G'
(its own tree) or a vertical 'cascade:DRAFT/CHEAP[/k]' (a chain). A cascade's tokens per
target call are measured, and so are its draft calls per chain where the row counts them
at the batch (its 'draft_calls', `scripts/draft_calls.py`: every call, the first and one
per iteration of the loop); elsewhere they are estimated as G over CHEAP's own
measured tokens per target call (its row of the same task and temperature at the shortest
chain of at least k), within [fewest, most]. Its c is interpolated (linear in n) between
the two compiled counts; the predictions at the fewest and most calls bound it.
The assumption is that T5-XXL (and t5_small, the draft) accept as the bundled pairs
measured there do.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_sections  # pylint: disable=wrong-import-position
import tpu_retrieval_cost as retrieval  # pylint: disable=wrong-import-position

from specjax.proposers.lookahead import LookaheadDraft  # pylint: disable=wrong-import-position
from specjax.speed import cli  # pylint: disable=wrong-import-position

SECTION = '## Lookahead decoding and the vertical cascade'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, 'docs')
MEASURED = retrieval.MEASURED
MODEL = retrieval.MODEL
LOOKAHEADS = '5,3,4;4,4,4;12,3,8'
INNERS = ('bigram', 'suffix')
CHAINS = '2,4,6'
INNER_GAMMA = 3  # k of `cascade:NAME/CHEAP` without /K (`VerticalCascade.inner_gamma`)
CASCADE_CALLS = (1, 2, 3)  # a cascade's chain compiled with these many draft calls
BIGRAM_TOP_K = 8  # the bundled bigram tables' next tokens per token


def parse_lookahead(text: str) -> tuple:
  """(W, N, G) of 'lookahead:W,N,G' or 'W,N,G'."""
  body = text.strip().split(':', 1)[1] if ':' in text else text.strip()
  w, n, g = (int(x) for x in body.split(','))
  if w < 1 or n < 2 or g < 1:
    raise ValueError(f'{text}: lookahead needs W >= 1, N >= 2, G >= 1')
  return w, n, g


def lookahead_nodes(w: int, n: int, g: int) -> int:
  """The nodes of lookahead's tree (its `tree_spec`): the window's W branches and G
  n-grams, N - 1 each."""
  return LookaheadDraft(1, w, n, g).tree_spec().nodes


def parse_cascade(proposer: str):
  """(CHEAP, k) of a vertical 'cascade:DRAFT/CHEAP[/k[/C]]'; None for anything else (a
  horizontal 'cascade:DRAFT:K,CHEAP' among them)."""
  if not proposer.startswith('cascade:') or '/' not in proposer:
    return None
  parts = proposer.split(':', 1)[1].split('/')
  if len(parts) not in (2, 3, 4):
    return None
  return parts[1], int(parts[2]) if len(parts) >= 3 else INNER_GAMMA


def cascade_cap(proposer: str):
  """C of a vertical 'cascade:DRAFT/CHEAP/k/C' (its draft calls per chain at most), else
  None."""
  parts = proposer.split(':', 1)[1].split('/') if parse_cascade(proposer) else []
  return int(parts[3]) if len(parts) == 4 else None


def calls_bounds(gamma: int, k: int, cap: int = None) -> tuple:
  """(fewest, most) draft calls of a cascade's chain of G, k cheap drafts per call, at
  most `cap` calls (None: no cap)."""
  low, high = math.ceil(gamma / (k + 1)), gamma
  return (low, high) if cap is None else (min(low, cap), min(high, cap))


def calls_estimate(gamma: int, k: int, inner_tokens_per_call: float, cap: int = None) -> float:
  """G over the cheap proposer's tokens per call, within `calls_bounds`."""
  low, high = calls_bounds(gamma, k, cap)
  return min(max(gamma / inner_tokens_per_call, low), high)


def cascade_name(inner: str, k: int, gamma: int, calls: int) -> str:
  """The cost key of a cascade's chain of G with exactly `calls` draft calls."""
  return f'cascade {inner}/{k} chain {gamma}, {calls} calls'


def linearity_note(data: dict) -> str:
  """How much the third call of each compiled cascade adds, as a share of the second's
  addition: '' where no cascade was compiled with three calls."""
  shares = []
  for batch in (k for k in data if k.startswith('B=')):
    for name, one in data[batch].items():
      if not name.startswith('cascade ') or ', 1 calls' not in name:
        continue
      two, three = (data[batch].get(name.replace(', 1 calls', f', {n} calls')) for n in (2, 3))
      if two and three and two['seconds'] > one['seconds']:
        shares.append((three['seconds'] - two['seconds']) / (two['seconds'] - one['seconds']))
  if not shares:
    return ''
  return (f'; the third adds {min(shares):.2f}-{max(shares):.2f} times what the second '
          'adds, greedy and sampled, at each batch')


def lookahead_name(spec: tuple) -> str:
  return 'lookahead:' + ','.join(str(x) for x in spec)


def lookahead_verify_name(target: str, nodes: int) -> str:
  return f'{target} lookahead verify {nodes}'


@contextlib.contextmanager
def cascade_iterations(count: int):
  """The vertical cascade's chain traced with exactly `count` draft calls: its first, before
  its `lax.while_loop`, and the loop's body called `count` - 1 times (every call counted);
  other loops are left as they are."""
  import jax  # pylint: disable=import-outside-toplevel
  original = jax.lax.while_loop

  def loop(cond, body, init):
    if 'VerticalCascade' not in getattr(body, '__qualname__', ''):
      return original(cond, body, init)
    carry = init
    for _ in range(count - 1):
      carry = body(carry)
    return carry

  jax.lax.while_loop = loop
  try:
    yield
  finally:
    jax.lax.while_loop = original


def measure(batch: int, plan: dict, args, done: dict = None, save=None) -> dict:
  """name -> {'bytes', 'flops', 'seconds', 'bound'} of every program at one batch.

  Args:
    batch: B.
    plan: `plan_of`'s.
    args: the command line's.
    done: the programs of this batch compiled already (kept, not compiled again).
    save: called with the programs so far after each compile.
  """
  if not args.cpu:
    cli.prepare_tpu()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel
  from specjax.core import decoder, tree_steps  # pylint: disable=import-outside-toplevel
  from specjax.core.proposal import Proposal  # pylint: disable=import-outside-toplevel
  from specjax.core.sampling import SamplingMode  # pylint: disable=import-outside-toplevel
  from specjax.core.state import LoopConfig  # pylint: disable=import-outside-toplevel
  from specjax.core.steps import Bound  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import T5_CONFIGS  # pylint: disable=import-outside-toplevel
  from specjax.proposers import bigram, cascade, lookahead, suffix  # pylint: disable=import-outside-toplevel
  from specjax.speed import programs  # pylint: disable=import-outside-toplevel
  from specjax.speed.roofline import V4_CHIP, cost_of  # pylint: disable=import-outside-toplevel
  mesh = cli.Backend(cpu=args.cpu).mesh(1)
  model = lambda name: T5(T5_CONFIGS[name].replace(dtype='bfloat16'))
  target, small = model(args.target), model(args.draft)
  s = programs.Setting(target, small, batch, args.input_len, args.max_decode_len, mesh,
                       True, 'bfloat16')
  record = lambda cost: {'bytes': cost.bytes, 'flops': cost.flops,
                         'seconds': cost.seconds(V4_CHIP), 'bound': cost.bound(V4_CHIP)}
  # A fresh function per compile: jit reuses the trace of a function it has seen.
  compile_cost = lambda fn, fn_args, donate=(): cost_of(jax.jit(
      lambda *a: fn(*a), donate_argnums=donate).lower(*fn_args).compile())
  out = dict(done or {})

  def keep(key, fn, fn_args, donate=()):
    if key in out:
      return
    out[key] = record(compile_cost(fn, fn_args, donate))
    print(f'B={batch} {key}: {out[key]}', file=sys.stderr, flush=True)
    if save:
      save(out)

  ks = {g + 1 for g in plan['chains']}
  want = lambda m, p, k: p == 'step' or (m == args.target and p == 'verify' and k in ks)
  for name, program, tokens, fn, fn_args, donate in programs.program_fns(s, want):
    keep(f'{name} step' if program == 'step' else f'{name} verify {tokens}', fn, fn_args,
         donate)

  replicated = NamedSharding(mesh, PartitionSpec())
  like = lambda shape, dtype: jax.ShapeDtypeStruct(shape, dtype, sharding=replicated)
  config = lambda gamma, tree, greedy: LoopConfig(
      gamma=gamma, max_decode_len=args.max_decode_len, sampling=SamplingMode(greedy=greedy),
      eos_id=target.eos_id, pad_id=target.pad_id, tree=tree)
  abstract = lambda draft, cfg: decoder.Decoder(target, draft, cfg, mesh=mesh).programs(
      batch, args.input_len, jax.random.PRNGKey(0)).abstract

  def propose(p, enc, cache, seq, pos, keys, sampling, done, draft, cfg):  # as steps.propose
    return Bound(draft, p, enc).propose(cache, seq, pos, keys, sampling, cfg, active=~done)

  def proposal_args(params, run, cfg):
    """The loop's arguments of `propose`: under sampling the keys [D, B, ...] of each
    depth (`steps.speculative_step` splits them so)."""
    st = run.state
    keys = None if cfg.sampling.greedy else like(
        (cfg.gamma,) + st.keys.shape, st.keys.dtype)
    return (params, run.draft_enc, st.draft_cache, st.seq, st.pos, keys, st.sampling,
            st.done)

  for spec in plan['lookaheads']:  # as `specjax.job.drafts.lookahead` builds it
    draft = lookahead.LookaheadDraft(target.vocab_size, *spec,
                                     source=bool(target.encoded_axes()),
                                     eos_id=target.eos_id, pad_id=target.pad_id)
    tree = draft.tree_spec()
    for greedy in (True, False):
      cfg = config(tree.depth_count, tree, greedy)
      a = abstract(draft, cfg)
      run = a['run']
      if greedy:  # the verify call does not depend on the sampling mode
        st, n = run.state, tree.num_nodes

        def verify(p, e, c, last, x, depth, visible, pos):
          proposal = Proposal(tokens=x, parents=depth, depth=depth, visible=visible, q=None,
                              state=None, nonfinite=None, drafted=None)
          return tree_steps.verify_tree(Bound(target, p, e), c, last, proposal, pos)

        fn_args = (programs.cast_floats(a['target_params'], 'bfloat16'), run.target_enc,
                   st.target_cache, st.pos, like((batch, n), jnp.int32),
                   like((batch, n), jnp.int32), like((batch, n + 1, n + 1), jnp.bool_), st.pos)
        keep(lookahead_verify_name(args.target, n), verify, fn_args, (2,))
      fn = lambda *x, draft=draft, cfg=cfg: propose(*x, draft=draft, cfg=cfg)
      keep(lookahead_name(spec) + ('' if greedy else ' sampled'), fn,
           proposal_args(a['draft_params'], run, cfg), (2,))

  inners = {'bigram': bigram.BigramDraft(target.vocab_size, BIGRAM_TOP_K, target.eos_id,
                                         target.pad_id),
            'suffix': suffix.SuffixDraft(vocab_size=target.vocab_size, eos_id=target.eos_id,
                                         pad_id=target.pad_id)}
  gamma = plan['cascade_chain']
  for name, k in plan['cascades'] if gamma else ():
    draft = cascade.VerticalCascade(small, inners[name], k)
    for greedy in (True, False):
      cfg = config(gamma, None, greedy)
      a = abstract(draft, cfg)
      params = {**a['draft_params'],
                'draft': programs.cast_floats(a['draft_params']['draft'], 'bfloat16')}
      fn_args = proposal_args(params, a['run'], cfg)
      for calls in CASCADE_CALLS:  # linear in the calls (the third checks it)
        fn = lambda *x, draft=draft, cfg=cfg: propose(*x, draft=draft, cfg=cfg)
        with cascade_iterations(calls):
          keep(cascade_name(name, k, gamma, calls) + ('' if greedy else ' sampled'), fn,
               fn_args, (2,))
  return out


def cascade_cost(costs: dict, inner: str, k: int, width: int, calls: float,
                 mode: str = '') -> float:
  """Seconds of a cascade's chain with `calls` draft calls, linear in them through its
  compiled 1 and 2 calls (the chain's arrays those of G = `width`), or None."""
  one, two = (costs.get(cascade_name(inner, k, width, n) + mode) for n in (1, 2))
  if one is None or two is None:
    return None
  return one['seconds'] + (calls - 1) * (two['seconds'] - one['seconds'])


def inner_tokens(rows: list, task: str, inner: str, k: int, temperature: float):
  """(shape, tokens per call) of the cheap proposer's own row of the task and temperature
  at the shortest measured chain of at least k (else the longest), or None."""
  chains = sorted((int(r['shape'].split()[1]), r) for r in rows
                  if r['task'] == task and r['proposer'] == inner
                  and r['temperature'] == temperature and r['shape'].startswith('chain '))
  if not chains:
    return None
  g, row = next(((g, r) for g, r in chains if g >= k), chains[-1])
  return f'chain {g}', row['tokens_per_call']


def predict(result: dict, rows: list, target: str, draft: str, tasks: tuple,
            width: int = None) -> list:
  """A prediction per measured row of `tasks` (the draft model's chains, lookahead, the
  vertical cascades) whose programs were compiled: tokens per call / (c + v) in target
  steps; a cascade's with its counted (else estimated) draft calls and the bounds of its
  fewest and most (`cascade_cost` of its chain compiled at G = `width`)."""
  out = []
  for row in rows:
    proposer, shape, temp = row['proposer'], row['shape'], row['temperature']
    if row['task'] not in tasks:
      continue
    item = {k: row[k] for k in ('task', 'proposer', 'shape', 'temperature',
                                'tokens_per_call')}
    suffix = '' if temp == 0 else ' sampled'
    casc = parse_cascade(proposer)
    if proposer.startswith('lookahead'):
      spec = parse_lookahead(proposer)
      verify_key = lookahead_verify_name(target, lookahead_nodes(*spec))
    elif (proposer == MODEL or casc) and shape.startswith('chain '):
      gamma = int(shape.split()[1])
      verify_key = f'{target} verify {gamma + 1}'
    else:
      continue
    if casc:
      inner, k = casc
      measured = inner_tokens(rows, row['task'], inner, k, temp)
      if measured is None:
        continue
      cap = cascade_cap(proposer)
      low, high = calls_bounds(gamma, k, cap)
      item.update(inner_shape=measured[0], inner_tokens_per_call=measured[1],
                  calls={'fewest': low, 'most': high,
                         'estimate': calls_estimate(gamma, k, measured[1], cap)})
    for batch, costs in result.items():
      step = costs[f'{target} step']['seconds']
      verify = costs.get(verify_key)
      if verify is None:
        break
      v = verify['seconds'] / step
      if proposer.startswith('lookahead'):
        proposal = costs.get(lookahead_name(spec) + suffix)
        if proposal is None:
          break
        item[batch] = {'c': proposal['seconds'] / step, 'v': v}
      elif casc:
        counted = row.get('draft_calls', {}).get(batch)  # every draft call
        n = item['calls']['estimate'] if counted is None else counted
        if counted is not None:
          item['calls'].setdefault('counted', {})[batch] = n
        at = [cascade_cost(costs, inner, k, width, x, suffix) for x in (low, high, n)]
        if None in at:
          break
        c_low, c_high, c_est = (x / step for x in at)
        item[batch] = {'c': c_est, 'v': v,
                       'c_fewest': c_low, 'c_most': c_high,
                       'speedup_fewest': row['tokens_per_call'] / (c_low + v),
                       'speedup_most': row['tokens_per_call'] / (c_high + v)}
      else:
        small = dict(costs)
        small['t5_small step'] = costs[f'{draft} step']
        item[batch] = {'c': retrieval.chain_of(small, gamma)['seconds'] / step, 'v': v}
      item[batch]['speedup'] = row['tokens_per_call'] / (item[batch]['c'] + v)
    else:
      out.append(item)
  return out


def plan_of(args, rows: list) -> dict:
  """What to compile: --lookaheads, --chains and the k of --cascades, with every
  lookahead, chain and vertical cascade of the measured rows of --tasks."""
  tasks = args.tasks.split(',')
  looks = [parse_lookahead(x) for x in args.lookaheads.split(';') if x.strip()]
  chains = [int(x) for x in args.chains.split(',') if x.strip()]
  cascades = [(x, args.inner_gamma) for x in args.cascades.split(',') if x.strip()]
  for row in rows:
    if row['task'] not in tasks:
      continue
    proposer, shape = row['proposer'], row['shape']
    if proposer.startswith('lookahead'):
      looks.append(parse_lookahead(proposer))
    elif (proposer == MODEL or parse_cascade(proposer)) and shape.startswith('chain '):
      chains.append(int(shape.split()[1]))
      if parse_cascade(proposer) and parse_cascade(proposer)[0] in INNERS:
        cascades.append(parse_cascade(proposer))
  return {'lookaheads': list(dict.fromkeys(looks)), 'chains': sorted(set(chains)),
          'cascades': list(dict.fromkeys(cascades)),
          'cascade_chain': max(chains) if chains else None}


def compute(args) -> dict:
  """Compiles, costs and predicts; writes --json."""
  rows = retrieval.measured_rows(args.measured_json)
  plan = plan_of(args, rows)
  settings = {
      'target': args.target, 'draft': args.draft, 'dtype': 'bfloat16',
      'input_len': args.input_len, 'max_decode_len': args.max_decode_len,
      'lookaheads': [list(x) for x in plan['lookaheads']], 'chains': plan['chains'],
      'cascades': [list(x) for x in plan['cascades']], 'cascade_chain': plan['cascade_chain'],
      'backend': 'cpu (a dry run)' if args.cpu else 'compile-only TPU v4 chip (libtpu)',
      'measured_json': (os.path.relpath(args.measured_json, ROOT) if rows else None),
      'tasks': args.tasks}
  # Each program is written to --json's .partial.json as it compiles; --resume keeps them.
  partial = args.json + '.partial.json'
  result = {}
  if args.resume and os.path.exists(partial):
    with open(partial, encoding='utf-8') as f:
      old = json.load(f)
    if old['settings'] == settings:
      result = {k: v for k, v in old.items() if k.startswith('B=')}

  def save(batch, costs):
    result[batch] = costs
    with open(partial, 'w', encoding='utf-8') as f:
      json.dump({'settings': settings, **result}, f, indent=1)

  for b in (int(x) for x in args.batches.split(',')):
    key = f'B={b}'
    result[key] = measure(b, plan, args, result.get(key),
                          lambda costs, key=key: save(key, costs))
  data = {'settings': settings, **result,
          'predicted': predict(result, rows, args.target, args.draft,
                               tuple(args.tasks.split(',')), plan['cascade_chain'])
                       if rows else None}
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=1)
  if os.path.exists(partial):
    os.remove(partial)
  return data


def merge(paths: list, args) -> dict:
  """The batches of runs of the same settings (one batch each, run side by side) in one
  JSON, predicted again from --measured-json; writes --json.

  Raises:
    ValueError: runs of other settings, or two runs of one batch.
  """
  runs = []
  for path in paths:
    with open(path, encoding='utf-8') as f:
      runs.append(json.load(f))
  settings = runs[0]['settings']
  data = {'settings': settings}
  for path, run in zip(paths, runs):
    if run['settings'] != settings:
      raise ValueError(f'{path}: other settings than {paths[0]}\'s')
    for batch in (k for k in run if k.startswith('B=')):
      if batch in data:
        raise ValueError(f'{path}: {batch} twice')
      data[batch] = run[batch]
  rows = retrieval.measured_rows(args.measured_json)
  result = {k: v for k, v in data.items() if k.startswith('B=')}
  data['predicted'] = predict(result, rows, settings['target'], settings['draft'],
                              tuple(settings['tasks'].split(',')),
                              settings['cascade_chain']) if rows else None
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=1)
  return data


def _row(batch: str, name: str, c: dict, step: float) -> str:
  size = c['bytes'] / 1e9
  return (f'| {batch[2:]} | {name} | {size:.3f} GB | {c["flops"] / 1e9:.4g} | '
          f'{c["seconds"] * 1e6:.1f} | {c["bound"]} | {c["seconds"] / step:.4f} |')


def _calls(n: int) -> str:
  return f'{n} call' + ('' if n == 1 else 's')


def summary(data: dict) -> list:
  """The lines of the section's table of each draft's iteration in target steps: v, the
  target's verify, and c, the proposal (greedy; sampled), a cascade's at its fewest and
  most draft calls."""
  st = data['settings']
  target, draft = st['target'], st['draft']
  lines = [f'One iteration of each draft in {target} steps at each batch: v the target\'s '
           'verify call, c the proposal (greedy, then sampled); a cascade\'s c at its fewest '
           'and its most draft calls.', '',
           '| B | draft | v | c (T=0) | c (T>0) |', '|---|---|---|---|---|']
  for batch in (k for k in data if k.startswith('B=')):
    costs = data[batch]
    step = costs[f'{target} step']['seconds']
    rel = lambda name, costs=costs, step=step: costs[name]['seconds'] / step
    b = batch[2:]
    small = costs[f'{draft} step']['seconds'] / step
    for g in st['chains']:
      c = f'{g * small:.4f}'
      lines.append(f'| {b} | {draft} chain of {g} | {rel(f"{target} verify {g + 1}"):.3f} | '
                   f'{c} | {c} |')
    for x in (tuple(x) for x in st['lookaheads']):
      n, name = lookahead_nodes(*x), lookahead_name(x)
      lines.append(f'| {b} | {name} ({n} nodes) | '
                   f'{rel(lookahead_verify_name(target, n)):.3f} | {rel(name):.4f} | '
                   f'{rel(name + " sampled"):.4f} |')
    for inner, k in st['cascades']:
      for g in st['chains']:
        low, high = calls_bounds(g, k)
        cells = []
        for mode in ('', ' sampled'):
          at = [cascade_cost(costs, inner, k, st['cascade_chain'], n, mode) / step
                for n in (low, high)]
          cells.append(f'{at[0]:.4f} ({_calls(low)})' + (
              f' to {at[1]:.4f} ({_calls(high)})' if high != low else ''))
        lines.append(f'| {b} | cascade:{draft}/{inner}/{k} chain of {g} | '
                     f'{rel(f"{target} verify {g + 1}"):.3f} | {" | ".join(cells)} |')
  return lines + ['']


def section(data: dict) -> str:
  """The report section of what --json holds."""
  st = data['settings']
  target, draft = st['target'], st['draft']
  batches = [k for k in data if k.startswith('B=')]
  looks = [tuple(x) for x in st['lookaheads']]
  lines = [
      SECTION, '',
      'Written by `python scripts/tpu_lookahead_cost.py --json docs/tpu_lookahead_cost.json '
      '--markdown docs/tpu_speed.md` (or its batches side by side, then `--merge`; kept '
      'when the report is generated again), for a '
      f'{st["backend"]}: {target}, bfloat16, S = {st["input_len"]}, L = '
      f'{st["max_decode_len"]}; roofline times of the compiled programs (random params: '
      'only the shapes reach the compiler). The target\'s step and chain verify of K = G + 1 '
      f'tokens are the programs of section 8, and {draft}\'s chain of G is G of its steps, '
      'as in the section above.', '',
      '**Lookahead** (`--draft lookahead:W,N,G`) needs no draft model: each target call '
      'verifies the Jacobi window (W branches of its N - 1 levels) and up to G n-grams of '
      'its pool (N - 1 nodes each) as ONE tree of (W + G)(N - 1) nodes ('
      + ', '.join(f'{lookahead_nodes(*x)} at {",".join(map(str, x))}' for x in looks)
      + '). That call ("lookahead verify N" below) is `tree_steps.verify_tree` with the '
      'caches and the per-row tree mask of a lookahead decode; the proposal ("lookahead:W,N,G") '
      'is its `propose` as the loop calls it, on the chip between two target calls: the '
      'pool\'s update with the committed n-grams, the top-G lookup of the root\'s token and '
      'the trie (sampled: with the one-hot q [B, N, V] of each node, in the JSON as '
      '"sampled").', '',
      '**The vertical cascade** (`--draft cascade:DRAFT/CHEAP/k`) keeps the draft model\'s '
      'chain of G but drafts it k tokens at a time with CHEAP, which the draft model verifies '
      'in one call of k + 1 tokens, keeping 1 to k + 1 of them. Its first call also feeds the '
      'token before the chain\'s last (which the draft\'s cache may lack after a fully '
      'accepted block); each iteration of its loop after it is one CHEAP proposal and one '
      f'such call. Its chain of G = {st["cascade_chain"]} is compiled '
      'with exactly 1, 2 and 3 calls ("cascade CHEAP/k chain G, n calls" below; the calls '
      'after the first are alike, so n calls cost the first plus n - 1 times what the second '
      f'adds{linearity_note(data)}), the '
      f'draft costed as {draft}; a chain of G costs between its fewest calls, ceil(G / (k + '
      '1)) (every cheap draft kept), and its most, G (none kept); capped at C calls '
      '(`cascade:DRAFT/CHEAP/k/C`: a row short of G after them proposes the tokens it '
      'holds), both at most C. Shorter chains are costed '
      f'with the arrays of G = {st["cascade_chain"]}. Both proposals are mostly gathers '
      '(the pool\'s lookup; the cheap drafts\' table or matches), which libtpu\'s cost '
      'analysis charges far more than the bytes they gather (the gather probe of the '
      'section above): their costs are upper bounds.', '',
      f'| B | program | accessed | GFLOP | roofline us | bound | / {target} step |',
      '|---|---|---|---|---|---|---|']
  chains = st['chains']
  for batch in batches:
    costs = data[batch]
    step = costs[f'{target} step']['seconds']
    small = dict(costs)
    small['t5_small step'] = costs[f'{draft} step']
    order = ([f'{target} step'] + [f'{target} verify {g + 1}' for g in chains]
             + [lookahead_verify_name(target, lookahead_nodes(*x)) for x in looks]
             + [lookahead_name(x) for x in looks] + [f'{draft} step'])
    for name in order:
      if name in costs:
        lines.append(_row(batch, name, costs[name], step))
    for g in chains:
      lines.append(_row(batch, f'{draft} chain of {g}', retrieval.chain_of(small, g), step))
    for inner, k in st['cascades']:
      for n in CASCADE_CALLS:
        name = cascade_name(inner, k, st['cascade_chain'], n)
        if name in costs:
          lines.append(_row(batch, name, costs[name], step))
  lines.append('')
  lines += summary(data)
  predicted = data.get('predicted')
  if not predicted:
    lines.append('No prediction: the measured tokens per call '
                 '(docs/retrieval_drafts.json, scripts/retrieval_drafts.py) were not there '
                 'when this ran; rerun with `--measured-json PATH` once they are.')
    return '\n'.join(lines) + '\n'
  temps = sorted({r['temperature'] for r in predicted})
  lines += [
      f'Predicted speedup over {target} alone: tokens per call / (c + v), c the proposal '
      'and v its verify, both in target steps (c of the sampled proposal at T > 0), with the '
      f'tokens per call {st["measured_json"]} measures on the bundled pairs of '
      f'{st["tasks"].replace(",", ", ")} ("{MODEL}" and the cascades\' DRAFT: the task\'s '
      f'draft model, costed as {draft}): the assumption is that {target} accepts as those '
      'targets do. A cascade\'s c is at its draft calls per chain counted in those decodes '
      '(at batch 1 and 8: its loop runs until the batch\'s slowest row holds G drafts, '
      'or C calls were made), '
      'where not counted at G / (CHEAP\'s own tokens per call in that file, at the shortest '
      'chain of at least k) within [fewest, most]; its prediction in brackets at the most '
      'and the fewest calls.',
      '']
  lines += report_sections.prediction_table(predicted, batches, temps)
  return '\n'.join(lines) + '\n'


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  report_sections.add_cost_report_flags(p, os.path.join(DOCS, 'tpu_lookahead_cost.json'),
                                        SECTION, MEASURED, 'tokens per call')
  p.add_argument('--lookaheads', default=LOOKAHEADS,
                 help='lookahead W,N,G compiled, ";"-separated (default %(default)s)')
  p.add_argument('--chains', default=CHAINS, help='chain lengths G compiled: the target\'s '
                 'verify of G + 1, the cascades\' chains (default %(default)s)')
  p.add_argument('--cascades', default=','.join(INNERS),
                 help='cheap proposers of the vertical cascades (default %(default)s)')
  p.add_argument('--inner-gamma', type=int, default=INNER_GAMMA,
                 help='k, the cheap drafts per draft call (default %(default)s)')
  p.add_argument('--draft', default='t5_small', help='the T5 config costing the draft model')
  p.add_argument('--input-len', type=int, default=retrieval.INPUT_LEN)
  p.add_argument('--max-decode-len', type=int, default=retrieval.MAX_DECODE_LEN)
  p.add_argument('--cpu', action='store_true', help='compile on this CPU (a dry run)')
  p.add_argument('--resume', action='store_true',
                 help='keep the programs compiled by an interrupted run (--json\'s '
                      '.partial.json) of the same settings')
  p.add_argument('--merge', nargs='+', metavar='JSON',
                 help='no compile: the batches of these runs (the same settings, run side by '
                      'side with one --batches each) into --json, predicted again')
  args = p.parse_args(argv)
  try:
    for x in args.lookaheads.split(';'):
      if x.strip():
        parse_lookahead(x)
  except ValueError as e:
    p.error(f'--lookaheads: {e}')
  bad = set(args.cascades.split(',')) - set(INNERS) - {''}
  if bad:
    p.error(f'--cascades: {sorted(bad)}: one of {", ".join(INNERS)}')
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.render:
    with open(args.json, encoding='utf-8') as f:
      data = json.load(f)
  elif args.merge:
    data = merge(args.merge, args)
  else:
    data = compute(args)
  if args.markdown:
    report_sections.write_section(args.markdown, SECTION, section(data))
  return 0


if __name__ == '__main__':
  sys.exit(main())
