"""The compile-only TPU v4 cost of the proposals that need no draft model (REST's datastore
lookup, suffix decoding) beside t5_small's chain and T5-XXL's own step and verify calls,
and the speedup they predict with measured tokens per call.

    python scripts/tpu_retrieval_cost.py --json docs/tpu_retrieval_cost.json \\
        --markdown docs/tpu_speed.md   # needs libtpu, no TPU

One chip, bfloat16, S = 128, L = 128, batch 1 and 8. The target's programs are those of
`specjax.speed.programs` (as section 8 of docs/tpu_speed.md compiles them): its step, its
verify of a chain of K = G + 1 tokens (`program_fns`) and of a token tree of N nodes
(`tree_fns`: the static (N/4, 1, 1, 1) of section 8); t5_small's chain of G drafts is G
of its steps, as scripts/tpu_head_cost.py counts it. The proposals are
`Bound(draft, params, encoded).propose`, as `steps.propose` calls it inside the loop, with
the abstract state of a decode of that draft (`Decoder.programs(...).abstract`):
`RestDraft` with a datastore of --datastore-tokens tokens (its corpus, suffix array and
document starts replicated on the chip, int32) and `SuffixDraft` on the row's own sequence
and source. REST's binary searches are `lax.fori_loop`s, whose body XLA's cost analysis
counts once: they are compiled unrolled (every step counted), and as the decode runs them
(kept in the JSON as 'loop body once'). Times are roofline times (max of bytes / HBM
bandwidth and flops / peak) of a TPU v4 chip.

The prediction: tokens per call / (proposal + verify), both in T5-XXL steps, for each row
of --measured-json (written by scripts/retrieval_drafts.py: 'task', 'proposer', 'shape',
'temperature', 'tokens_per_call') whose proposer is 'rest', 'suffix' or a chain of
'model' (t5_small's cost), on --tasks (the encoder-decoder pairs' by default); every shape
of those rows is compiled too. Without that file there is no prediction. The assumption
is that T5-XXL and a datastore of its task accept as the bundled pairs and datastores
measured there do. libtpu's cost analysis charges a gather far more than the bytes it
gathers (the 'gather probe' kept per batch), and the proposals are mostly gathers: their
costs are upper bounds, beside `lookup_reads`, what REST's lookup touches.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import report_sections  # pylint: disable=wrong-import-position

from specjax.bench import trees as bench_trees  # pylint: disable=wrong-import-position
from specjax.core.tree import DynamicTree  # pylint: disable=wrong-import-position
from specjax.speed import cli  # pylint: disable=wrong-import-position

SECTION = '## Drafts with no draft model (REST, suffix)'
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, 'docs')
MEASURED = os.path.join(DOCS, 'retrieval_drafts.json')
PROPOSERS = ('rest', 'suffix')
SHAPES = 'chain 8;dynamic:16:8;dynamic:32:8'
INPUT_LEN = MAX_DECODE_LEN = 128
# What a row of --measured-json names the task's draft model by (its chain is costed as
# t5_small's).
MODEL = 'model'


def parse_shape(text: str):
  """('chain', G) or ('tree', DynamicTree) of a shape label ('chain 8', 'dynamic:16:8')."""
  item = text.strip()
  if item.startswith('chain'):
    gamma = int(item.split()[1])
    if not 1 <= gamma <= 8:
      raise ValueError(f'{item}: a chain of 1 to 8 (the verify of K = G + 1 <= 9 tokens)')
    return 'chain', gamma
  tree = bench_trees.parse_one(item)
  if not isinstance(tree, DynamicTree):
    raise ValueError(f'{item}: a retrieval draft proposes a trie: dynamic:N:D[:TOP]')
  return 'tree', tree


def label(text: str) -> str:
  """The canonical label of a shape (a trie's with its top: 'dynamic:16:8:4')."""
  kind, shape = parse_shape(text)
  return f'chain {shape}' if kind == 'chain' else bench_trees.label(shape)


def verify_name(text: str, target: str) -> str:
  """The cost key of the target's verify of a shape's proposal."""
  kind, shape = parse_shape(text)
  return (f'{target} verify {shape + 1}' if kind == 'chain'
          else f'{target} tree verify {shape.num_nodes}')


def datastore_sizes(tokens: int, document_tokens: float) -> dict:
  """The arrays of a datastore of `tokens` corpus tokens whose documents average
  `document_tokens` tokens with their separator: one suffix per real token, one start per
  document."""
  documents = max(1, round(tokens / document_tokens))
  return {'tokens': tokens, 'documents': documents, 'suffixes': tokens - documents}


def search_steps(size: int) -> int:
  """Steps of one binary search of `rest.bounds` over an index of `size` entries."""
  return max(1, math.ceil(math.log2(size + 1)))


def lookup_reads(ds: dict, depth: int, tile: int = 4096) -> dict:
  """What REST's lookup touches per row and call: the bytes it gathers, and the bytes of
  the `tile`-byte tiles they lie in (one per index entry, one per window of Q or D
  tokens), over its searches (Q query lengths of the suffix array, one of the document
  starts, two bounds each) and its 2R retrievals of depth D (R of the longest match, R of
  a shorter one)."""
  q, r = ds['max_query'], 2 * ds['samples']
  reads = 2 * q * ds['suffix_search_steps'] + 2 * ds['start_search_steps']
  return {'rounds': 2 * ds['suffix_search_steps'] + 2 * ds['start_search_steps'],
          'gathered_bytes': reads * (4 + 4 * q) + r * (4 + 4 * depth),
          'tile_bytes': (2 * reads + 2 * r) * tile}


@contextlib.contextmanager
def unrolled_loops():
  """`jax.lax.fori_loop` fully unrolled while tracing: XLA's cost analysis counts a loop's
  body once, so only an unrolled search has each of its steps counted."""
  import jax  # pylint: disable=import-outside-toplevel
  original = jax.lax.fori_loop
  jax.lax.fori_loop = functools.partial(original, unroll=True)
  try:
    yield
  finally:
    jax.lax.fori_loop = original


def measure(batch: int, shapes: list, args) -> dict:
  """name -> {'bytes', 'flops', 'seconds', 'bound'} of every program at one batch."""
  if not args.cpu:
    cli.prepare_tpu()
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  from jax.sharding import NamedSharding, PartitionSpec  # pylint: disable=import-outside-toplevel
  from specjax.core import decoder  # pylint: disable=import-outside-toplevel
  from specjax.core.sampling import SamplingMode  # pylint: disable=import-outside-toplevel
  from specjax.core.state import LoopConfig  # pylint: disable=import-outside-toplevel
  from specjax.core.steps import Bound  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import T5_CONFIGS  # pylint: disable=import-outside-toplevel
  from specjax.proposers import rest, suffix  # pylint: disable=import-outside-toplevel
  from specjax.speed import programs  # pylint: disable=import-outside-toplevel
  from specjax.speed.roofline import V4_CHIP, cost_of  # pylint: disable=import-outside-toplevel
  mesh = cli.Backend(cpu=args.cpu).mesh(1)
  model = lambda name: T5(T5_CONFIGS[name].replace(dtype='bfloat16'))
  target = model(args.target)
  s = programs.Setting(target, model('t5_small'), batch, INPUT_LEN, MAX_DECODE_LEN, mesh,
                       True, 'bfloat16')
  record = lambda cost: {'bytes': cost.bytes, 'flops': cost.flops,
                         'seconds': cost.seconds(V4_CHIP), 'bound': cost.bound(V4_CHIP)}
  # A fresh function per compile: jit reuses the trace of a function it has seen, which
  # would keep the first of an unrolled and a rolled trace.
  compile_cost = lambda fn, fn_args, donate=(): cost_of(jax.jit(
      lambda *a: fn(*a), donate_argnums=donate).lower(*fn_args).compile())
  out = {}
  parsed = [parse_shape(x) for x in shapes]
  ks = {g + 1 for kind, g in parsed if kind == 'chain'} | {9}
  want = lambda m, p, k: p == 'step' or (m == args.target and p == 'verify' and k in ks)
  for name, program, tokens, fn, fn_args, donate in programs.program_fns(s, want):
    key = f'{name} step' if program == 'step' else f'{name} verify {tokens}'
    out[key] = record(compile_cost(fn, fn_args, donate))
    print(f'B={batch} {key}: {out[key]}', file=sys.stderr, flush=True)
  nodes = sorted({t.num_nodes for kind, t in parsed if kind == 'tree'})
  static = [(n // 4, 1, 1, 1) if n % 4 == 0 else (n,) for n in nodes]
  for _, _, n, fn, fn_args, donate in programs.tree_fns(
      s, static, lambda m, p, n: p == 'tree_verify'):
    out[f'{args.target} tree verify {n}'] = record(compile_cost(fn, fn_args, donate))
    print(f'B={batch} tree verify {n}: {out[f"{args.target} tree verify {n}"]}',
          file=sys.stderr, flush=True)

  # The datastore: random ids of the real sizes (only the shapes reach the compiler).
  sizes = datastore_sizes(args.datastore_tokens, args.document_tokens)
  rng = np.random.default_rng(0)
  corpus = rng.integers(2, target.vocab_size, sizes['tokens'], dtype=np.int32)
  ends = np.sort(rng.choice(sizes['tokens'], sizes['documents'], replace=False))
  corpus[ends] = -1
  real = np.flatnonzero(corpus >= 0).astype(np.int32)
  drafts = {'rest': rest.from_arrays(corpus, rng.permutation(real), args.max_query, target,
                                     samples=args.samples),
            'suffix': (suffix.SuffixDraft(vocab_size=target.vocab_size, eos_id=target.eos_id,
                                          pad_id=target.pad_id), {})}
  replicated = NamedSharding(mesh, PartitionSpec())
  like = lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=replicated)
  for proposer, (draft, params) in drafts.items():
    abstract_params = jax.tree.map(like, params)
    for text in shapes:
      kind, shape = parse_shape(text)
      for greedy in (True, False):
        cfg = LoopConfig(gamma=shape if kind == 'chain' else shape.depth_count,
                         max_decode_len=MAX_DECODE_LEN, sampling=SamplingMode(greedy=greedy),
                         eos_id=target.eos_id, pad_id=target.pad_id,
                         tree=None if kind == 'chain' else shape)
        run = decoder.Decoder(target, draft, cfg, mesh=mesh).programs(
            batch, INPUT_LEN, jax.random.PRNGKey(0)).abstract['run']
        state = run.state

        def propose(p, enc, st, cfg=cfg, draft=draft):  # as steps.propose calls it
          proposal = Bound(draft, p, enc).propose(
              st.draft_cache, st.seq, st.pos, None if cfg.sampling.greedy else st.keys,
              st.sampling, cfg, active=~st.done)
          return proposal._replace(state=None)

        name = f'{proposer} {label(text)}' + ('' if greedy else ' sampled')
        fn_args = (abstract_params, run.draft_enc, state)
        with unrolled_loops():
          out[name] = record(compile_cost(propose, fn_args))
        if proposer == 'rest':
          out[f'{name} (loop body once)'] = record(compile_cost(propose, fn_args))
        print(f'B={batch} {name}: {out[name]}', file=sys.stderr, flush=True)
  # What the cost analysis charges a gather: R x D = 16 x 8 tokens of each row's sequence
  # [B, 138] (the suffix draft's continuations), beside the bytes gathered and held.
  text = jax.ShapeDtypeStruct((batch, 138), jnp.int32, sharding=replicated)
  idx = jax.ShapeDtypeStruct((batch, 128), jnp.int32, sharding=replicated)
  cost = compile_cost(lambda t, i: jnp.take_along_axis(t, i, axis=1), (text, idx))
  out['gather probe'] = {**record(cost), 'gathered_bytes': 4 * batch * 128,
                         'array_bytes': 4 * batch * 138}
  print(f'B={batch} gather probe: {out["gather probe"]}', file=sys.stderr, flush=True)
  return out


def chain_of(costs: dict, gamma: int) -> dict:
  """t5_small's chain of G drafts: G of its steps."""
  step = costs['t5_small step']
  return {'bytes': gamma * step['bytes'], 'flops': gamma * step['flops'],
          'seconds': gamma * step['seconds'], 'bound': step['bound']}


def predict(result: dict, rows: list, target: str, tasks: tuple) -> list:
  """A prediction per measured row of a retrieval proposer (or the draft model's chain)
  of `tasks` whose shape was compiled: tokens per call / (proposal + verify), in target
  steps."""
  out = []
  for row in rows:
    proposer, shape = row['proposer'], row['shape']
    if row['task'] not in tasks:
      continue
    try:
      kind, g = parse_shape(shape)
    except ValueError:
      continue
    if proposer not in PROPOSERS and not (proposer == MODEL and kind == 'chain'):
      continue
    item = {k: row[k] for k in ('task', 'proposer', 'shape', 'temperature',
                                'tokens_per_call')}
    for batch, costs in result.items():
      step = costs[f'{target} step']['seconds']
      verify = costs.get(verify_name(shape, target))
      if proposer == MODEL:
        proposal = chain_of(costs, g)
      else:
        proposal = costs.get(f'{proposer} {label(shape)}'
                             + ('' if row['temperature'] == 0 else ' sampled'))
      if verify is None or proposal is None:
        break
      c, v = proposal['seconds'] / step, verify['seconds'] / step
      item[batch] = {'c': c, 'v': v, 'speedup': row['tokens_per_call'] / (c + v)}
    else:
      out.append(item)
  return out


def measured_rows(path: str) -> list:
  """The rows of --measured-json, or [] where the file is absent."""
  if not path or not os.path.exists(path):
    return []
  with open(path, encoding='utf-8') as f:
    return json.load(f)['rows']


def shapes_to_compile(args, rows: list) -> list:
  """--shapes and every retrieval shape (and draft-model chain) of the measured rows."""
  wanted = [label(x) for x in args.shapes.split(';') if x.strip()]
  for row in rows:
    if row['proposer'] in PROPOSERS + (MODEL,) and row['task'] in args.tasks.split(','):
      try:
        kind, _ = parse_shape(row['shape'])
      except ValueError:
        continue
      if row['proposer'] in PROPOSERS or kind == 'chain':
        wanted.append(label(row['shape']))
  return list(dict.fromkeys(wanted))


def compute(args) -> dict:
  """Compiles, costs and predicts; writes --json."""
  rows = measured_rows(args.measured_json)
  shapes = shapes_to_compile(args, rows)
  sizes = datastore_sizes(args.datastore_tokens, args.document_tokens)
  result = {f'B={b}': measure(b, shapes, args) for b in
            (int(x) for x in args.batches.split(','))}
  data = {
      'settings': {
          'target': args.target, 'draft': 't5_small', 'dtype': 'bfloat16',
          'input_len': INPUT_LEN, 'max_decode_len': MAX_DECODE_LEN, 'shapes': shapes,
          'backend': 'cpu (a dry run)' if args.cpu else 'compile-only TPU v4 chip (libtpu)',
          'datastore': {**sizes, 'bytes': 4 * (sizes['tokens'] + sizes['suffixes']
                                               + sizes['documents']),
                        'max_query': args.max_query, 'samples': args.samples,
                        'suffix_search_steps': search_steps(sizes['suffixes']),
                        'start_search_steps': search_steps(sizes['documents'])},
          'measured_json': (os.path.relpath(args.measured_json, ROOT) if rows else None),
          'tasks': args.tasks},
      **result,
      'predicted': predict(result, rows, args.target, tuple(args.tasks.split(',')))
                   if rows else None}
  with open(args.json, 'w', encoding='utf-8') as f:
    json.dump(data, f, indent=1)
  return data


def _size(n: float) -> str:
  return f'{n / 1e9:.3f} GB' if n >= 1e8 else f'{n / 1e6:.3f} MB'


def section(data: dict) -> str:
  """The report section of what --json holds."""
  st = data['settings']
  ds, target = st['datastore'], st['target']
  batches = [k for k in data if k.startswith('B=')]
  b1 = data[batches[0]]
  step1 = b1[f'{target} step']['seconds']
  chains = [x for x in st['shapes'] if x.startswith('chain')]
  gamma = max(int(x.split()[1]) for x in chains) if chains else 8
  q, steps, starts = ds['max_query'], ds['suffix_search_steps'], ds['start_search_steps']
  reads = lookup_reads(ds, gamma)
  rest1 = b1.get(f'rest chain {gamma}')
  probe = b1['gather probe']
  lines = [
      SECTION, '',
      'Written by `python scripts/tpu_retrieval_cost.py --json docs/tpu_retrieval_cost.json '
      '--markdown docs/tpu_speed.md` (kept when the report is generated again), for a '
      f'{st["backend"]}: {target}, bfloat16, S = {st["input_len"]}, L = '
      f'{st["max_decode_len"]}; roofline times of the compiled programs (random params '
      'and datastore: only the shapes reach the compiler). The target\'s step and verify '
      'calls are the programs of section 8 (`programs.program_fns`, `programs.tree_fns`); '
      f't5_small\'s chain of G is G of its steps, as in the section above. A proposal is '
      '`propose` as the loop calls it (`Bound(draft, params, encoded).propose`), on the '
      'abstract state of a decode with that draft.', '',
      '**Where the lookup runs.** Both proposals are part of the one compiled decode loop: '
      'they run on the chip, between two target calls, with no host round trip. REST '
      f'(`specjax.proposers.rest`) searches a datastore of {ds["tokens"]:,} tokens '
      f'({ds["documents"]:,} documents, {ds["suffixes"]:,} suffixes sorted by their first '
      f'Q = {q} tokens): for each row and each query length m = 1..{q} (the row\'s last m '
      f'tokens) two binary searches of the suffix array (its lower and upper bound), '
      f'{steps} steps each (ceil(log2({ds["suffixes"]:,} + 1))), all {q} query lengths in '
      f'the same step; and two searches of the {ds["documents"]:,} document starts, '
      f'{starts} steps each (whose range is used while the output is at most Q tokens; in '
      'fixed shapes they run on every call). A step reads one index '
      f'entry (4 bytes) and the {q} corpus tokens it points at ({4 * q} bytes) per row and '
      f'query. Then R = {ds["samples"]} evenly spaced entries of the longest match\'s '
      f'range (N / 2 for a trie of N > {2 * ds["samples"]} nodes; none here) and R of a '
      'shorter match\'s are read with the D tokens after each, and their '
      'trie is built (`specjax.proposers.trie`: [2R, 2R, D] prefix comparisons, a sort of '
      f'the 2R x D candidates). Per row and call (D = {gamma}) that is {reads["gathered_bytes"] / 1e3:.1f}'
      f' kB gathered, or {reads["tile_bytes"] / 1e6:.2f} MB if every read fetched a whole '
      '4 KiB tile; the searches are '
      f'{reads["rounds"]} rounds one after another ({2 * steps} over the suffix array, '
      f'{2 * starts} over the starts), each a gather whose index is the last round\'s result, '
      'which the roofline does not see: at an assumed 1 to 5 us per round, '
      f'{reads["rounds"]} to {5 * reads["rounds"]} us, '
      f'{reads["rounds"] * 1e-6 / step1:.1%} to {5 * reads["rounds"] * 1e-6 / step1:.1%} of a '
      f'{target} step at B = 1. The suffix draft (`specjax.proposers.suffix`) compares the '
      'row\'s last 8 tokens with every window of its own sequence (1 + L + G + 1 '
      'positions) and of its source (S), takes the 16 longest matches (top-k), gathers the '
      'D tokens after each and builds the same trie.', '',
      '**What the bytes below are.** libtpu\'s cost analysis charges a gather far more '
      f'than the bytes it gathers: `take_along_axis` of {probe["gathered_bytes"] // 4:,} '
      f'tokens from a [{batches[0][2:]}, 138] int32 sequence ({probe["array_bytes"]:,} '
      f'bytes) is charged {probe["bytes"] / 1e6:.1f} MB. The proposals are gathers almost '
      'entirely, so their bytes and roofline times are those charges: an upper bound, '
      'not the HBM traffic of the data they touch'
      + (f' (REST\'s chain at B = 1: {rest1["bytes"] / 1e6:.1f} MB charged against the '
         f'{reads["gathered_bytes"] / 1e3:.1f} kB it gathers)' if rest1 else '') + '. '
      'REST\'s searches are `lax.fori_loop`s, whose body XLA\'s cost analysis counts once; '
      'they are compiled unrolled so that every step is counted (the loop as the decode '
      'runs it is in the JSON as "loop body once"). Sampled proposals (temperature > 0) '
      'also write the one-hot q [B, N, V] of each node (in the JSON as "sampled"); the '
      'table shows the greedy ones.', '',
      f'**The datastore is replicated** on every chip (its params\' axes are all None): '
      f'{_size(ds["bytes"])} here (the corpus, the suffix array and the document starts, '
      'int32: 8 bytes per corpus token and 4 per document), held beside the target\'s '
      'weights and KV caches in each chip\'s 32 GiB of HBM; a datastore of 1B tokens would '
      'hold 8 GB of every chip.', '',
      '| B | program | accessed | GFLOP | roofline us | bound | / ' + target +
      ' step |', '|---|---|---|---|---|---|---|']
  order = ([f'{target} step']
           + list(dict.fromkeys(verify_name(x, target) for x in sorted(st['shapes'])))
           + ['t5_small step', f't5_small chain of {gamma}']
           + [f'{p} {x}' for p in PROPOSERS for x in st['shapes']])
  for batch in batches:
    costs = dict(data[batch])
    costs[f't5_small chain of {gamma}'] = chain_of(costs, gamma)
    step = costs[f'{target} step']['seconds']
    for name in order:
      c = costs.get(name)
      if c is None:
        continue
      lines.append(f'| {batch[2:]} | {name} | {_size(c["bytes"])} | {c["flops"] / 1e9:.4g} | '
                   f'{c["seconds"] * 1e6:.1f} | {c["bound"]} | {c["seconds"] / step:.4f} |')
  lines.append('')
  predicted = data.get('predicted')
  if not predicted:
    lines.append('No prediction: the measured tokens per call of these proposers '
                 '(docs/retrieval_drafts.json, scripts/retrieval_drafts.py) were not there '
                 'when this ran; rerun with `--measured-json PATH` once they are.')
    return '\n'.join(lines) + '\n'
  temps = sorted({r['temperature'] for r in predicted})
  lines += [
      f'Predicted speedup over {target} alone: tokens per call / (c + v), c the proposal '
      'and v its verify (a chain of G: K = G + 1 tokens; a trie of N nodes: the tree '
      'verify of N), both in target steps (c of the sampled proposal at T > 0), with the '
      f'tokens per call {st["measured_json"]} measures on the bundled pairs and datastores '
      f'of {st["tasks"].replace(",", ", ")} ("{MODEL}": the task\'s draft model, costed '
      f'as t5_small): the assumption is that {target} and a datastore of its task accept '
      'as those do. The retrieval proposals\' c is their charged cost (above), so their '
      'predictions are lower bounds.', '']
  lines += report_sections.prediction_table(predicted, batches, temps)
  return '\n'.join(lines) + '\n'


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
  report_sections.add_cost_report_flags(p, os.path.join(DOCS, 'tpu_retrieval_cost.json'),
                                        SECTION, MEASURED,
                                        'tokens per call of the retrieval drafts')
  p.add_argument('--shapes', default=SHAPES, help='proposals compiled, ";"-separated: '
                 '"chain G" (G <= 8) or a trie "dynamic:N:D[:TOP]" (default %(default)s)')
  p.add_argument('--datastore-tokens', type=int, default=1_000_000,
                 help='REST\'s corpus size in tokens')
  p.add_argument('--document-tokens', type=float, default=12.0,
                 help='mean document length with its separator (the bundled EnDe '
                      'datastore\'s sentences: 11.5)')
  p.add_argument('--max-query', type=int, default=8, help='Q, REST\'s longest query')
  p.add_argument('--samples', type=int, default=32,
                 help='R, REST\'s retrieved continuations of each match')
  p.add_argument('--cpu', action='store_true', help='compile on this CPU (a dry run)')
  args = p.parse_args(argv)
  for x in args.shapes.split(';'):
    if x.strip():
      try:
        parse_shape(x)
      except ValueError as e:
        p.error(f'--shapes: {e}')
  return args


def main(argv=None) -> int:
  args = parse_args(argv)
  if args.render:
    with open(args.json, encoding='utf-8') as f:
      data = json.load(f)
  else:
    data = compute(args)
  if args.markdown:
    report_sections.write_section(args.markdown, SECTION, section(data))
  return 0


if __name__ == '__main__':
  sys.exit(main())
