"""The decode loops of `decoding.py` as two jitted programs sharded over a mesh.

`prefill` encodes and fills both caches; `loop` runs the while loop with the state (the
caches included) donated, so the loop updates the caches in place. Both are `jax.jit`
with explicit in/out shardings from `sharding.py`: params by T5X's logical axis rules,
caches and cross-attention K/V batch over 'data' and heads over 'model', per-row state
batch over 'data', the rng and the output replicated. Each loop iteration re-asserts the
state's shardings (`with_sharding_constraint`) so that propagation cannot drift.

Shape letters: B batch, S encoder length, L max_decode_len.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from specjax.core import decoding
from specjax.parallel import sharding
from specjax.core.state import LoopConfig

PyTree = Any


@dataclasses.dataclass(frozen=True)
class ShardedDecoder:
  """The two programs of one sharded decode shape, and every sharding they use.

  Attributes:
    prefill: jitted (target_params, draft_params, inputs [B, S], rng) ->
      (state, target_encoded, draft_encoded).
    loop: jitted (target_params, draft_params, target_encoded, draft_encoded, state) ->
      (DecodeOutput, final state); the state argument is donated.
    target_shardings: NamedSharding per target param.
    draft_shardings: NamedSharding per draft param (a replicated leaf without a draft).
    inputs_sharding: for inputs [B, S] (batch over 'data').
    rng_sharding: replicated.
    abstract: ShapeDtypeStructs (with shardings) of target_params, draft_params, inputs,
      rng, state, target_encoded, draft_encoded: what `plan.py` lowers against.
  """

  prefill: Any
  loop: Any
  target_shardings: PyTree
  draft_shardings: PyTree
  inputs_sharding: jax.sharding.NamedSharding
  rng_sharding: jax.sharding.NamedSharding
  abstract: dict

  def __call__(self, target_params: PyTree, draft_params: Optional[PyTree], inputs,
               rng: jax.Array) -> decoding.DecodeOutput:
    """Decodes inputs [B, S] int32; params are resharded only if not already so placed."""
    target_params = jax.device_put(target_params, self.target_shardings)
    draft_params = {} if draft_params is None else jax.device_put(draft_params,
                                                                  self.draft_shardings)
    host = np.asarray(inputs, np.int32)
    # Every process holds the same global batch (multi-host: each reads the same file).
    inputs = jax.make_array_from_callback(host.shape, self.inputs_sharding,
                                          lambda index: host[index])
    rng = jax.device_put(rng, self.rng_sharding)
    state, target_enc, draft_enc = self.prefill(target_params, draft_params, inputs, rng)
    out, _ = self.loop(target_params, draft_params, target_enc, draft_enc, state)
    return out


def _with_sharding(tree: PyTree, shardings: PyTree) -> PyTree:
  return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                      tree, shardings)


def state_shardings(abstract_state, mesh: Mesh, rules: sharding.Rules) -> Any:
  """DecodeState shardings: per-row fields and caches batch-major, rng and step replicated."""
  shardings = sharding.activation_shardings(abstract_state, mesh, rules)
  rep = sharding.replicated(mesh)
  return shardings.replace(rng=jax.tree.map(lambda _: rep, abstract_state.rng), step=rep)


@functools.lru_cache(maxsize=64)
def build(mesh: Mesh, target, draft, cfg: LoopConfig, batch: int, input_len: int,
          rng_shape: Tuple[int, ...] = (2,), rng_dtype: Any = jnp.uint32,
          rules: sharding.Rules = sharding.STANDARD_RULES) -> ShardedDecoder:
  """Builds (once per mesh, models, config and shape) the sharded decode programs.

  Args:
    mesh: a ('data', 'model') mesh.
    target: the target model.
    draft: the draft model, or None for the autoregressive loop.
    cfg: the static loop config (gamma 0 without a draft).
    batch: B; must divide by the mesh's 'data' axis.
    input_len: S.
    rng_shape: shape of the PRNG key (default: a legacy uint32 PRNGKey).
    rng_dtype: its dtype.
    rules: logical axis rules.

  Returns:
    The ShardedDecoder.
  """
  sharding.check_batch(batch, mesh)
  rep = sharding.replicated(mesh)
  target_sh = sharding.param_shardings(target, mesh, rules)
  draft_sh = sharding.param_shardings(draft, mesh, rules) if draft is not None else rep
  target_abs = _with_sharding(sharding.abstract_params(target), target_sh)
  draft_abs = (_with_sharding(sharding.abstract_params(draft), draft_sh)
               if draft is not None else {})
  inputs_sh = sharding.activation_shardings(jax.ShapeDtypeStruct((batch, input_len),
                                                                 jnp.int32), mesh, rules)
  inputs_abs = jax.ShapeDtypeStruct((batch, input_len), jnp.int32, sharding=inputs_sh)
  rng_abs = jax.ShapeDtypeStruct(rng_shape, rng_dtype, sharding=rep)

  def init(tp, dp, inputs, rng):
    return decoding._init_state(target, tp, draft, dp or None, inputs, rng, cfg)  # pylint: disable=protected-access

  state_abs, target_enc_abs, draft_enc_abs = jax.eval_shape(init, target_abs, draft_abs,
                                                            inputs_abs, rng_abs)
  state_sh = state_shardings(state_abs, mesh, rules)
  target_enc_sh = sharding.activation_shardings(target_enc_abs, mesh, rules)
  draft_enc_sh = sharding.activation_shardings(draft_enc_abs, mesh, rules)

  def loop(tp, dp, target_enc, draft_enc, state):
    decoding.TRACE_COUNTS['sharded_speculative' if draft else 'sharded_autoregressive'] += 1
    if draft is None:
      body = functools.partial(decoding._autoregressive_body, target, tp, target_enc, cfg)  # pylint: disable=protected-access
    else:
      body = functools.partial(decoding._speculative_body, target, tp, target_enc, draft,  # pylint: disable=protected-access
                               dp, draft_enc, cfg)
    constrained = lambda s: jax.lax.with_sharding_constraint(body(s), state_sh)
    state = decoding._loop(constrained, state, cfg)  # pylint: disable=protected-access
    return decoding._output(state, cfg), state  # pylint: disable=protected-access

  # keep_unused: every param stays an argument (the loop never reads the encoder's), so
  # memory_analysis() counts what is really resident.
  prefill_jit = jax.jit(init, in_shardings=(target_sh, draft_sh, inputs_sh, rep),
                        out_shardings=(state_sh, target_enc_sh, draft_enc_sh),
                        keep_unused=True)
  loop_jit = jax.jit(loop, in_shardings=(target_sh, draft_sh, target_enc_sh, draft_enc_sh,
                                         state_sh),
                     out_shardings=(rep, state_sh), donate_argnums=(4,), keep_unused=True)
  abstract = dict(target_params=target_abs, draft_params=draft_abs, inputs=inputs_abs,
                  rng=rng_abs, state=_with_sharding(state_abs, state_sh),
                  target_encoded=_with_sharding(target_enc_abs, target_enc_sh),
                  draft_encoded=_with_sharding(draft_enc_abs, draft_enc_sh))
  return ShardedDecoder(prefill=prefill_jit, loop=loop_jit, target_shardings=target_sh,
                        draft_shardings=draft_sh, inputs_sharding=inputs_sh,
                        rng_sharding=rep, abstract=abstract)


def decode(mesh: Mesh, target, target_params: PyTree, draft, draft_params: Optional[PyTree],
           inputs, rng: jax.Array, cfg: LoopConfig,
           rules: Optional[sharding.Rules] = None) -> decoding.DecodeOutput:
  """The sharded path of `speculative_decode` / `autoregressive_decode` (draft None).

  Args:
    mesh: a ('data', 'model') mesh.
    target: the target model; target_params its params (any placement).
    draft: the draft model or None; draft_params its params or None.
    inputs: [B, S] int32, the same global batch on every process.
    rng: PRNG key.
    cfg: the static loop config.
    rules: logical axis rules (default `sharding.STANDARD_RULES`).

  Returns:
    DecodeOutput, replicated: equal to the unsharded decode of the same inputs and rng.

  Raises:
    ValueError: B does not divide by the 'data' axis (names --batch-size).
  """
  batch, input_len = np.shape(inputs)
  rng = jnp.asarray(rng)
  decoder = build(mesh, target, draft, cfg, batch, input_len, tuple(rng.shape), rng.dtype,
                  tuple(rules) if rules is not None else sharding.STANDARD_RULES)
  return decoder(target_params, draft_params, inputs, rng)
