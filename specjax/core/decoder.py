"""The compiled programs of a decode, on one device or sharded over a mesh.

A `Decoder` is built once per (target, draft, loop config, slots, mesh, rules) and holds
the jitted programs of `loop.start` -> `loop.run` -> `loop.outputs`:
- on one device, ONE program does all three;
- on a ('data', 'model') mesh, two `jax.jit` programs with explicit shardings: `start`
  (encode, prefill) and `loop` (the while loop, the carry donated so the caches update in
  place). Params shard by the models' logical axis rules, caches and encodings by the axes
  the models declare (`cache_axes`, `encoded_axes`), per-row state and queued inputs batch
  over 'data', scalars, the key and the output replicated. Each iteration re-asserts the
  state's shardings so that propagation cannot drift.
`Decoder.traces` counts the programs traced (one per input shape): tests and the bench
read it to check that nothing recompiles. Shape letters: N inputs, B slots, S input width.
"""
from __future__ import annotations

import dataclasses
import functools
import gc
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from specjax.core import loop
from specjax.core.model_proposer import as_proposer
from specjax.core.sampling import SamplingParams
from specjax.core.state import DecodeOutput, LoopConfig
from specjax.parallel import rules as axis_rules

PyTree = Any


@dataclasses.dataclass(frozen=True)
class Programs:
  """The two sharded programs of one input shape, and what they take.

  Attributes:
    start: jitted (target_params, draft_params, inputs [N, S], num_inputs, row_ids [N],
      rng, sampling [N]) -> the first carry (`loop.Run`).
    loop: jitted (target_params, draft_params, carry) -> (DecodeOutput, final carry); the
      carry is donated.
    shardings: NamedShardings of every argument above, by name, and of the carry ('run').
    abstract: ShapeDtypeStructs (with shardings) of the same: what `memory_plan` lowers.
  """

  start: Any
  loop: Any
  shardings: dict
  abstract: dict


def _with_sharding(tree: PyTree, shardings: PyTree) -> PyTree:
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def _place(value, sharding) -> jax.Array:
  """A host value as a global array (every process holds the same global value)."""
  host = np.asarray(value)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


class Decoder:
  """The programs of one decode configuration (see the module docstring).

  Attributes:
    target: the target model.
    draft: the proposer (`specjax.core.proposal.Proposer`; a draft model is made one by
      `specjax.core.model_proposer.as_proposer`), or None: the target alone, cfg.gamma 0.
    cfg: the static loop config.
    slots: B, rows decoded at once; None: all N inputs at once (a fixed batch).
    mesh: a ('data', 'model') mesh, or None for one device.
    rules: logical axis rules on the mesh.
    traces: programs traced so far (one per input shape and mode).
  """

  def __init__(self, target, draft, cfg: LoopConfig, slots: Optional[int] = None,
               mesh: Optional[Mesh] = None, rules=axis_rules.STANDARD_RULES):
    self.target, self.cfg, self.slots = target, cfg, slots
    self.draft = as_proposer(draft)
    self.mesh, self.rules = mesh, rules
    self.traces = 0
    self._whole = jax.jit(self.whole)
    self._start_alone = jax.jit(self.start)
    self._programs = {}

  def _slots(self, num: int) -> int:
    return min(self.slots, num) if self.slots else num

  def start(self, tp, dp, inputs, num_inputs, row_ids, rng, sampling) -> loop.Run:
    """`loop.start` of this configuration (pure, unjitted): the first carry."""
    return loop.start(self.target, tp, self.draft, dp if self.draft is not None else None,
                      inputs, num_inputs, row_ids, rng, sampling, self.cfg,
                      self._slots(inputs.shape[0]))

  def loop(self, tp, dp, carry: loop.Run, constrain=lambda s: s):
    """`loop.run` then `loop.outputs` (pure, unjitted): (DecodeOutput, final carry)."""
    self.traces += 1
    carry = loop.run(self.target, tp, self.draft, dp if self.draft is not None else None,
                     carry, self.cfg, constrain)
    return loop.outputs(carry, self.cfg), carry

  def whole(self, tp, dp, inputs, num_inputs, row_ids, rng, sampling) -> DecodeOutput:
    """The whole decode as one pure function (what one device runs as ONE program).

    Args:
      tp, dp: target and draft params ({} without a draft).
      inputs: [N, S] int32; num_inputs: scalar int32; row_ids: [N] int32; rng: the key;
      sampling: SamplingParams [N] (see `specjax.speculative_decode`).
    """
    carry = self.start(tp, dp, inputs, num_inputs, row_ids, rng, sampling)
    return self.loop(tp, dp, carry)[0]

  def start_program(self):
    """`loop.start` alone, jitted on one device (the bench times the prefill with it)."""
    return self._start_alone

  def programs(self, num: int, width: int, rng: jax.Array) -> Programs:
    """The sharded programs for inputs [num, width] and keys like `rng` (mesh only)."""
    rng = jnp.asarray(rng)
    key = (num, width, rng.shape, rng.dtype)
    if key not in self._programs:
      self._programs[key] = self._build(num, width, rng)
    return self._programs[key]

  def _build(self, num: int, width: int, rng: jax.Array) -> Programs:
    mesh, rules = self.mesh, self.rules
    axis_rules.check_batch(self._slots(num), mesh)
    rep = axis_rules.replicated(mesh)
    batch_major = functools.partial(axis_rules.batch_major_shardings, mesh=mesh, rules=rules)
    params = lambda m: axis_rules.param_shardings(m, mesh, rules) if m is not None else {}
    abstract = dict(
        target_params=axis_rules.abstract_params(self.target),
        draft_params=(axis_rules.abstract_params(self.draft) if self.draft is not None
                      else {}),
        inputs=jax.ShapeDtypeStruct((num, width), jnp.int32),
        num_inputs=jax.ShapeDtypeStruct((), jnp.int32),
        row_ids=jax.ShapeDtypeStruct((num,), jnp.int32),
        rng=jax.ShapeDtypeStruct(rng.shape, rng.dtype),
        sampling=SamplingParams(*(jax.ShapeDtypeStruct((num,), d) for d in (
            jnp.float32, jnp.int32, jnp.float32))))
    shardings = dict(target_params=params(self.target), draft_params=params(self.draft),
                     inputs=batch_major(abstract['inputs']), num_inputs=rep,
                     row_ids=batch_major(abstract['row_ids']), rng=rep,
                     sampling=batch_major(abstract['sampling']))
    names = ('target_params', 'draft_params', 'inputs', 'num_inputs', 'row_ids', 'rng',
             'sampling')
    abstract['run'] = jax.eval_shape(self.start, *(abstract[k] for k in names))
    shardings['run'] = self._run_shardings(abstract['run'])
    start = jax.jit(self.start, in_shardings=tuple(shardings[k] for k in names),
                    out_shardings=shardings['run'], keep_unused=True)
    constrain = lambda s: jax.lax.with_sharding_constraint(s, shardings['run'].state)
    # keep_unused: every param stays an argument (the loop never reads the encoder's), so
    # memory_analysis() counts what is really resident.
    loop_program = jax.jit(functools.partial(self.loop, constrain=constrain),
                           in_shardings=(shardings['target_params'], shardings['draft_params'],
                                         shardings['run']),
                           out_shardings=(rep, shardings['run']), donate_argnums=(2,),
                           keep_unused=True)
    abstract = {k: _with_sharding(v, shardings[k]) for k, v in abstract.items()}
    return Programs(start=start, loop=loop_program, shardings=shardings, abstract=abstract)

  def _run_shardings(self, run: loop.Run) -> loop.Run:
    """The carry's shardings: batch-major everywhere, caches and encodings by the axes the
    models declare, scalars replicated."""
    mesh, rules = self.mesh, self.rules
    by_axes = lambda tree, m, kind: axis_rules.axes_shardings(
        tree, getattr(m, kind)() if m is not None else {}, mesh, rules)
    sh = axis_rules.batch_major_shardings(run, mesh, rules)
    state = sh.state.replace(
        target_cache=by_axes(run.state.target_cache, self.target, 'cache_axes'),
        draft_cache=by_axes(run.state.draft_cache, self.draft, 'cache_axes'))
    sh = sh.replace(state=state,
                    target_enc=by_axes(run.target_enc, self.target, 'encoded_axes'),
                    draft_enc=by_axes(run.draft_enc, self.draft, 'encoded_axes'))
    if run.queue is not None:
      sh = sh.replace(queue=sh.queue.replace(
          target_enc=by_axes(run.queue.target_enc, self.target, 'encoded_axes'),
          draft_enc=by_axes(run.queue.draft_enc, self.draft, 'encoded_axes')))
    return sh

  def __call__(self, target_params, draft_params, inputs, num_inputs: int, row_ids,
               rng: jax.Array, sampling: SamplingParams) -> DecodeOutput:
    """Decodes inputs [N, S] int32 (see `specjax.speculative_decode`)."""
    draft_params = {} if draft_params is None else draft_params
    if self.mesh is None:
      return self._whole(target_params, draft_params, jnp.asarray(inputs, jnp.int32),
                         jnp.asarray(num_inputs, jnp.int32), jnp.asarray(row_ids, jnp.int32),
                         rng, jax.tree.map(jnp.asarray, sampling))
    p, args = self.placed(target_params, draft_params, inputs, num_inputs, row_ids, rng,
                          sampling)
    return p.loop(args[0], args[1], p.start(*args))[0]

  def placed(self, target_params, draft_params, inputs, num_inputs: int, row_ids,
             rng: jax.Array, sampling: SamplingParams):
    """(Programs, the arguments of its `start` placed on the mesh): params resharded only
    if not already so placed; every process holds the same global inputs."""
    num, width = np.shape(inputs)
    p = self.programs(num, width, rng)
    sh = p.shardings
    args = (jax.device_put(target_params, sh['target_params']),
            jax.device_put({} if draft_params is None else draft_params, sh['draft_params']),
            _place(np.asarray(inputs, np.int32), sh['inputs']),
            _place(np.int32(num_inputs), sh['num_inputs']),
            _place(np.asarray(row_ids, np.int32), sh['row_ids']),
            jax.device_put(rng, sh['rng']),
            jax.tree.map(_place, sampling, sh['sampling']))
    return p, args


def drop_programs() -> None:
  """Drops every compiled program: jax's caches and the Decoders `build` keeps.

  XLA:CPU maps about 500 memory regions per compiled decode and keeps them while the
  program is cached, so a process that compiles a few hundred decodes reaches
  vm.max_map_count (65530 by default) and dies in its next compile. A long-running
  process (a test worker, a measurement script) calls this between its parts.
  """
  jax.clear_caches()
  getattr(build, 'cache_clear', lambda: None)()  # a test may have replaced build
  gc.collect()


@functools.lru_cache(maxsize=128)
def build(target, draft, cfg: LoopConfig, slots: Optional[int] = None,
          mesh: Optional[Mesh] = None, rules=axis_rules.STANDARD_RULES) -> Decoder:
  """The Decoder of a configuration, built once and kept (its programs with it)."""
  return Decoder(target, draft, cfg, slots, mesh, rules)
