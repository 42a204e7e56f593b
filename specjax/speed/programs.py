"""The programs of one speculative decode, compiled against shapes, and their costs.

`measure_pair` compiles, for a (target, draft) pair at batch B on a ('data', 'model') mesh
(one compile-only TPU v4 core for a chip, the cores of a slice, or a CPU device), what the
loop of `specjax.speculative_decode` runs, with no weights loaded:
- 'verify' K: `steps.verify`, the target's cached call of K = 1..9 tokens;
- 'step': `steps.draft_step` of the target and of the draft (one token, then the pick);
- 'first': `steps.draft_block` at gamma 1, the draft's first call of a block (two tokens);
- 'encode': each model's `encode` of [B, S] inputs;
- 'iteration' G: `steps.speculative_step`, one whole loop iteration (draft block, verify,
  accept, commit) at gamma G;
- 'alone': `steps.autoregressive_step`, one iteration of the target alone.
`measure_trees` compiles, for static token trees (`specjax.core.tree.TreeShape`) of N nodes,
what a tree decode runs instead (greedy; each with the caches of a decode of that tree,
1 + L + N + 1 positions):
- 'tree_verify' N: `tree_steps.verify_tree`, the target's ONE cached call of the root and
  the N nodes (N + 1 tokens) with the tree's mask, costed like 'verify';
- 'tree_draft' N: `tree_draft.propose`, the draft growing the tree: its catch-up call of
  two tokens and one call per further depth of that depth's nodes, with their top-k picks
  (no loop: every call is counted);
- 'tree_iteration' N: `tree_steps.tree_step`, one whole tree iteration (grow, verify,
  accept, move the accepted path into place in both caches, commit).
Params and caches are in the activation dtype (bfloat16 by default), the caches and the
state are donated as the loop donates its carry. Every program is `cost_of` its compiled
self. XLA's cost analysis counts the body of a `lax.scan` once, so an 'iteration' of
gamma G >= 2 holds the draft's first call and ONE of its G - 1 single-token steps.

Shape letters: B batch, S input length, L max_decode_len, K tokens, G gamma.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from specjax.core import decoder, steps, tree_draft, tree_steps
from specjax.core.sampling import SamplingMode
from specjax.core.state import LoopConfig
from specjax.core.proposal import Proposal
from specjax.core.tree import TreeShape
from specjax.models.t5 import T5
from specjax.models.t5_config import T5Config
from specjax.parallel import mesh as mesh_lib
from specjax.core.model_proposer import as_proposer
from specjax.speed.roofline import Cost, cost_of

VERIFY_TOKENS = tuple(range(1, 10))  # K = 1..9: gamma 0..8 plus the last token
ITERATION_GAMMAS = (1, 7)  # the loop's own share is measured at these gammas
# Static trees of N = 8, 16 and 32 nodes, all of depth 4 (so that E, the tokens per target
# call, can reach 5 with each, and the draft makes four calls for each): 2, 4 or 8
# children of the root, one child below each node after.
TREE_SHAPES = ((2, 1, 1, 1), (4, 1, 1, 1), (8, 1, 1, 1))
TREE_PROGRAMS = ('tree_verify', 'tree_draft', 'tree_iteration')


@dataclasses.dataclass(frozen=True)
class ProgramRow:
  """The cost of one compiled program.

  Attributes:
    model: the model's registry name, or 'target+draft' for an iteration.
    program: 'verify', 'step', 'first', 'encode', 'iteration' or 'alone'; for a token
      tree 'tree_verify', 'tree_draft' or 'tree_iteration'.
    tokens: K for 'verify' (and 1 for 'step', 2 for 'first'), G for 'iteration', N (the
      tree's nodes: its verify feeds N + 1 tokens) for the tree programs, else 0.
    batch: B.
    input_len: S.
    max_decode_len: L.
    mesh: (data, model) devices.
    greedy: the sampling mode compiled (True: argmax; False: temperature sampling).
    bytes: bytes accessed per device.
    flops: flops per device.
    optimal_seconds: XLA's own time where positive, else None.
    compile_seconds: time to lower and compile it here.
  """

  model: str
  program: str
  tokens: int
  batch: int
  input_len: int
  max_decode_len: int
  mesh: Tuple[int, int]
  greedy: bool
  bytes: float
  flops: float
  optimal_seconds: Optional[float]
  compile_seconds: float

  @property
  def key(self) -> tuple:
    """What identifies the program in a grid."""
    return (self.model, self.program, self.tokens, self.batch, self.input_len,
            self.max_decode_len, tuple(self.mesh), self.greedy)

  @property
  def cost(self) -> Cost:
    return Cost(self.bytes, self.flops, self.optimal_seconds)

  def to_json(self) -> dict:
    """A JSON-able dict (see `from_json`)."""
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, d: dict) -> 'ProgramRow':
    """The row `to_json` wrote."""
    return cls(**dict(d, mesh=tuple(d['mesh'])))


def one_device_mesh(device) -> Mesh:
  """A 1 x 1 ('data', 'model') mesh of one device (a compile-only TPU core or a CPU)."""
  return Mesh([[device]], mesh_lib.MESH_AXES,
              axis_types=(jax.sharding.AxisType.Auto,) * 2)


def cast_floats(tree, dtype):
  """ShapeDtypeStructs with their floating leaves cast to dtype (shardings kept)."""
  def cast(x):
    if not jnp.issubdtype(x.dtype, jnp.floating):
      return x
    return jax.ShapeDtypeStruct(x.shape, jnp.dtype(dtype), sharding=x.sharding)
  return jax.tree.map(cast, tree)


def _like(shape, dtype, sharding) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)


class Setting:
  """The abstract arguments of one (target, draft, B, S, L, mesh, mode)."""

  def __init__(self, target: T5, draft: T5, batch: int, input_len: int, max_decode_len: int,
               mesh: Mesh, greedy: bool, dtype: str):
    self.target, self.draft, self.mesh, self.greedy = target, draft, mesh, greedy
    self.mode = SamplingMode(greedy=greedy)
    self.batch, self.input_len, self.max_decode_len, self.dtype = (
        batch, input_len, max_decode_len, dtype)
    self.rng = jax.random.PRNGKey(0)

  def config(self, gamma: int, tree: Optional[TreeShape] = None) -> LoopConfig:
    """The loop's config at gamma (with a tree: gamma is its depth)."""
    return LoopConfig(gamma=gamma, max_decode_len=self.max_decode_len, sampling=self.mode,
                      tree=tree)

  def abstract(self, gamma: int, tree: Optional[TreeShape] = None) -> dict:
    """`Decoder.programs(...).abstract` of this setting at gamma (0: the target alone), or
    of a decode of the static tree `tree` (gamma its depth)."""
    draft = self.draft if gamma else None
    d = decoder.Decoder(self.target, draft, self.config(gamma, tree), mesh=self.mesh)
    a = d.programs(self.batch, self.input_len, self.rng).abstract
    return {k: cast_floats(a[k], self.dtype) if k.endswith('params') else a[k]
            for k in ('target_params', 'draft_params', 'inputs', 'run')}


def compile_program(fn: Callable, args: Sequence, donate: Tuple[int, ...] = ()
                    ) -> Tuple[Cost, float]:
  """Lowers and compiles `fn` at abstract `args`: (its cost, the seconds it took)."""
  start = time.perf_counter()
  compiled = jax.jit(fn, donate_argnums=donate).lower(*args).compile()
  return cost_of(compiled), time.perf_counter() - start


def program_fns(s: Setting, want: Callable[[str, str, int], bool]) -> Iterable[tuple]:
  """(model name, program, tokens, fn, args, donate) of everything the setting compiles
  that `want(model, program, tokens)` asks for, cheapest abstract shapes built lazily."""
  target_name, draft_name = s.target.config.name, s.draft.config.name
  pair = f'{target_name}+{draft_name}'
  verify_gamma = max(ITERATION_GAMMAS)
  a = s.abstract(verify_gamma)
  run = a['run']
  state = run.state
  greedy = s.greedy
  keys = None if greedy else state.keys

  def bound(model, params, enc):
    return steps.Bound(model, params, enc)

  for name, model, params, enc, cache in (
      (target_name, s.target, a['target_params'], run.target_enc, state.target_cache),
      (draft_name, s.draft, a['draft_params'], run.draft_enc, state.draft_cache)):
    if greedy and want(name, 'encode', 0):  # the encoders do not depend on the mode
      yield name, 'encode', 0, model.encode, (params, a['inputs']), ()
    if want(name, 'step', 1):
      fn = lambda p, e, c, tok, pos, k, sp, model=model: steps.draft_step(
          bound(model, p, e), c, tok, pos, k, sp, s.config(1))
      yield name, 'step', 1, fn, (params, enc, cache, state.pos, state.pos, keys,
                                   state.sampling), (2,)
  if want(draft_name, 'first', 2):
    fn = lambda p, e, c, seq, pos, k, sp: steps.draft_block(
        bound(s.draft, p, e), c, seq, pos, None if k is None else k[None], sp, s.config(1))
    yield draft_name, 'first', 2, fn, (a['draft_params'], run.draft_enc, state.draft_cache,
                                       state.seq, state.pos, keys, state.sampling), (2,)
  if greedy:  # the verify call itself does not depend on the sampling mode
    for k in VERIFY_TOKENS:
      if want(target_name, 'verify', k):
        x = _like((s.batch, k - 1), jnp.int32, state.seq.sharding)
        fn = lambda p, e, c, last, x, pos: steps.verify(bound(s.target, p, e), c, last, x, pos)
        yield target_name, 'verify', k, fn, (a['target_params'], run.target_enc,
                                             state.target_cache, state.pos, x, state.pos), (2,)
  for gamma in (0,) + ITERATION_GAMMAS:
    program, name = ('alone', target_name) if gamma == 0 else ('iteration', pair)
    if not want(name, program, gamma):
      continue
    g = s.abstract(gamma) if gamma != verify_gamma else a
    cfg = s.config(gamma)
    if gamma == 0:
      fn = lambda tp, te, st, cfg=cfg: steps.step(bound(s.target, tp, te), None, cfg, st)
      args = (g['target_params'], g['run'].target_enc, g['run'].state)
    else:
      fn = lambda tp, dp, te, de, st, cfg=cfg: steps.step(
          bound(s.target, tp, te), bound(as_proposer(s.draft), dp, de), cfg, st)
      args = (g['target_params'], g['draft_params'], g['run'].target_enc,
              g['run'].draft_enc, g['run'].state)
    yield name, program, gamma, fn, args, (len(args) - 1,)


def _verified_tree(shape: TreeShape, tokens: jax.Array) -> Proposal:
  """The proposal `verify_tree` reads: the nodes' tokens [B, N] in the static shape (its
  parents and depths constant rows, as `tree_draft.grow_static` returns them)."""
  batch, num = tokens.shape
  rows = lambda a: jnp.broadcast_to(jnp.asarray(a, jnp.int32), (batch, num))
  return Proposal(tokens=tokens, parents=rows(shape.parents()), depth=rows(shape.depths()),
                  visible=jnp.asarray(shape.visible()), q=None, state=None, nonfinite=None,
                  drafted=None, slots=rows(np.arange(num)), scratch=num)


def tree_fns(s: Setting, shapes: Iterable[Sequence[int]],
             want: Callable[[str, str, int], bool]) -> Iterable[tuple]:
  """(model name, program, N, fn, args, donate) of the tree programs (see the module
  docstring) of each static shape (children per depth) that `want(model, program, N)`
  asks for; greedy settings only (none under sampling)."""
  if not s.greedy:
    return
  target_name, draft_name = s.target.config.name, s.draft.config.name
  pair = f'{target_name}+{draft_name}'
  bound = steps.Bound
  shapes = [TreeShape(tuple(branching)) for branching in shapes]
  counts = [shape.num_nodes for shape in shapes]
  if len(set(counts)) != len(counts):  # rows are keyed by N
    raise ValueError(f'tree shapes of the same node count: {shapes}')
  for shape in shapes:
    n = shape.num_nodes
    names = {'tree_verify': target_name, 'tree_draft': draft_name, 'tree_iteration': pair}
    if not any(want(names[p], p, n) for p in TREE_PROGRAMS):
      continue
    a = s.abstract(shape.depth_count, shape)
    run = a['run']
    state = run.state
    cfg = s.config(shape.depth_count, shape)
    if want(target_name, 'tree_verify', n):
      x = _like((s.batch, n), jnp.int32, state.seq.sharding)
      fn = lambda p, e, c, last, x, pos, shape=shape: tree_steps.verify_tree(
          bound(s.target, p, e), c, last, _verified_tree(shape, x), pos)
      yield target_name, 'tree_verify', n, fn, (a['target_params'], run.target_enc,
                                                 state.target_cache, state.pos, x,
                                                 state.pos), (2,)
    if want(draft_name, 'tree_draft', n):
      def grow(p, e, c, seq, pos, sp, cfg=cfg):
        proposal = tree_draft.propose(bound(s.draft, p, e), c, seq, pos, None, sp, cfg)
        return proposal.tokens, proposal.state, proposal.nonfinite
      yield draft_name, 'tree_draft', n, grow, (a['draft_params'], run.draft_enc,
                                                state.draft_cache, state.seq, state.pos,
                                                state.sampling), (2,)
    if want(pair, 'tree_iteration', n):
      fn = lambda tp, dp, te, de, st, cfg=cfg: tree_steps.tree_step(
          bound(s.target, tp, te), bound(as_proposer(s.draft), dp, de), cfg, st)
      args = (a['target_params'], a['draft_params'], run.target_enc, run.draft_enc, state)
      yield pair, 'tree_iteration', n, fn, args, (len(args) - 1,)


def _measure(s: Setting, fns: Iterable[tuple], done: set, on_row: Optional[Callable],
             compile_fn: Callable = compile_program) -> List[ProgramRow]:
  """Compiles and costs each (model, program, tokens, fn, args, donate) of `fns`."""
  shape = mesh_lib.mesh_shape(s.mesh)
  rows = []
  for model, program, tokens, fn, args, donate in fns:
    try:
      cost, seconds = compile_fn(fn, args, donate)
    except jax.errors.JaxRuntimeError as e:  # TPU refuses programs larger than its HBM
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      print(f'{model} {program} {tokens} B={s.batch}: out of HBM, not costed',
            file=sys.stderr, flush=True)
      continue
    row = ProgramRow(model=model, program=program, tokens=tokens, batch=s.batch,
                     input_len=s.input_len, max_decode_len=s.max_decode_len, mesh=shape,
                     greedy=s.greedy, bytes=cost.bytes, flops=cost.flops,
                     optimal_seconds=cost.optimal_seconds, compile_seconds=seconds)
    done.add(row.key)
    rows.append(row)
    if on_row:
      on_row(row)
  return rows


def _wanted(s: Setting, done: set, only: Optional[Callable[[str, str, int], bool]]
            ) -> Callable[[str, str, int], bool]:
  shape = mesh_lib.mesh_shape(s.mesh)
  key = lambda model, program, tokens: (model, program, tokens, s.batch, s.input_len,
                                        s.max_decode_len, shape, s.greedy)
  return lambda *k: key(*k) not in done and (only is None or only(*k))


def measure_pair(target: T5Config, draft: T5Config, *, batch: int, input_len: int,
                 max_decode_len: int, mesh: Mesh, greedy: bool, dtype: str = 'bfloat16',
                 done: Iterable[tuple] = (), on_row: Optional[Callable] = None,
                 only: Optional[Callable[[str, str, int], bool]] = None,
                 compile_fn: Callable = None) -> List[ProgramRow]:
  """Compiles the programs of one setting (see the module docstring) and costs them.

  Args:
    target: the target's config (e.g. t5_xxl).
    draft: the draft's config (e.g. t5_small).
    batch: B (must divide by the mesh's 'data' axis).
    input_len: S.
    max_decode_len: L (the caches hold 1 + L + G + 1 positions, G = 7 outside iterations).
    mesh: a ('data', 'model') mesh: `one_device_mesh` of a compile-only TPU core, the cores
      of a slice (`memory_plan.tpu_v4_mesh`), or CPU devices.
    greedy: compile the greedy programs (True) or temperature sampling (False).
    dtype: activations, caches and params.
    done: `ProgramRow.key`s already measured (skipped).
    on_row: called with each row as soon as it is measured.
    only: compile only the programs `only(model, program, tokens)` asks for (None: all).
    compile_fn: (fn, args, donate) -> (Cost, seconds); default `compile_program`.

  Returns:
    The new rows.
  """
  s = Setting(T5(target.replace(dtype=dtype)), T5(draft.replace(dtype=dtype)), batch,
               input_len, max_decode_len, mesh, greedy, dtype)
  done = set(done)
  return _measure(s, program_fns(s, _wanted(s, done, only)), done, on_row,
                  compile_fn or compile_program)


def measure_trees(target: T5Config, draft: T5Config, *, batch: int, input_len: int,
                  max_decode_len: int, mesh: Mesh,
                  shapes: Iterable[Sequence[int]] = TREE_SHAPES, dtype: str = 'bfloat16',
                  done: Iterable[tuple] = (), on_row: Optional[Callable] = None,
                  only: Optional[Callable[[str, str, int], bool]] = None) -> List[ProgramRow]:
  """Compiles the token-tree programs of a (target, draft) pair (greedy; see the module
  docstring) for each static shape and costs them; the arguments as `measure_pair`'s.

  Returns:
    The new rows ('tree_verify', 'tree_draft', 'tree_iteration', tokens N).
  """
  s = Setting(T5(target.replace(dtype=dtype)), T5(draft.replace(dtype=dtype)), batch,
               input_len, max_decode_len, mesh, True, dtype)
  done = set(done)
  return _measure(s, tree_fns(s, shapes, _wanted(s, done, only)), done, on_row)


def rows_by_key(rows: Iterable[ProgramRow]) -> Dict[tuple, ProgramRow]:
  """{row.key: row} (a later row of the same key wins)."""
  return {r.key: r for r in rows}
