"""The peer the paper measured against: real T5X's own decode step, costed the same way.

T5X's `EncoderDecoderModel` decodes one token per call (the `tokens_to_logits` of its
`temperature_sample`, `_compute_logits_from_slice`): the examples/t5 network's `decode`
applied with `decode=True` to one token and the flax 'cache' collection, the length axis
squeezed. `measure_t5x_step` makes the same call on that network built for a specjax
`T5Config`, its params, cache and encoded inputs taken as shapes (T5X's own init and
encode under `jax.eval_shape`), and compiles it on the same device. Needs real T5X
(`bash ../shared/t5x/install.sh`, or T5X's own instructions); `available()` says whether
it imports.
"""
from __future__ import annotations

import importlib.util
import time
from typing import Optional

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from specjax.models.t5_config import T5Config
from specjax.parallel import mesh as mesh_lib
from specjax.speed.programs import ProgramRow, cast_floats
from specjax.speed.roofline import cost_of

PEER_PREFIX = 't5x:'


def available() -> bool:
  """Whether real T5X (t5x.models and its examples/t5 network) can be imported."""
  return importlib.util.find_spec('t5x') is not None


def _network(cfg: T5Config, dtype: str):
  from t5x.examples.t5 import network  # pylint: disable=import-outside-toplevel
  return network.Transformer(network.T5Config(
      vocab_size=cfg.vocab_size, dtype=jnp.dtype(dtype), emb_dim=cfg.emb_dim,
      num_heads=cfg.num_heads, num_encoder_layers=cfg.num_encoder_layers,
      num_decoder_layers=cfg.num_decoder_layers, head_dim=cfg.head_dim, mlp_dim=cfg.mlp_dim,
      mlp_activations=tuple(cfg.mlp_activations), dropout_rate=0.0,
      logits_via_embedding=cfg.logits_via_embedding))


def measure_t5x_step(cfg: T5Config, *, batch: int, input_len: int, max_decode_len: int,
                     mesh: Mesh, dtype: str = 'bfloat16') -> ProgramRow:
  """Compiles T5X's one-token decode step (`_compute_logits_from_slice`) and costs it.

  Args:
    cfg: the architecture (a specjax preset, e.g. t5_xxl).
    batch: B.
    input_len: S.
    max_decode_len: T5X's cache length (its decoder positions).
    mesh: a one-device mesh (`programs.one_device_mesh`).
    dtype: activations, cache and params (T5X's inference restores params in bfloat16).

  Returns:
    A ProgramRow, model 't5x:<name>', program 'step', tokens 1.
  """
  module = _network(cfg, dtype)
  device = mesh.devices.flat[0]
  sharding = jax.sharding.SingleDeviceSharding(device)
  inputs = jnp.ones((batch, input_len), jnp.int32)
  targets = jnp.ones((batch, max_decode_len), jnp.int32)

  def init(rng):
    return module.init(rng, inputs, targets, targets, enable_dropout=False)['params']

  def cache_of(params):
    _, variables = module.apply({'params': params}, inputs, targets, targets, decode=True,
                                enable_dropout=False, mutable=['cache'])
    return variables['cache']

  def encode(params):
    return module.apply({'params': params}, inputs, enable_dropout=False,
                        method=module.encode)

  place = lambda tree: jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)
  params = place(cast_floats(place(jax.eval_shape(init, jax.random.PRNGKey(0))), dtype))
  cache = place(jax.eval_shape(cache_of, params))
  encoded = place(jax.eval_shape(encode, params))
  raw = jax.ShapeDtypeStruct((batch, input_len), jnp.int32, sharding=sharding)
  token = jax.ShapeDtypeStruct((batch, 1), jnp.int32, sharding=sharding)

  def step(params, cache, encoded, raw, token):
    # EncoderDecoderModel._compute_logits_from_slice, as T5X writes it.
    logits, variables = module.apply(
        {'params': params, 'cache': cache}, encoded, raw, token, token, enable_dropout=False,
        decode=True, max_decode_length=max_decode_len, mutable=['cache'],
        method=module.decode)
    return jnp.squeeze(logits, axis=1), variables['cache']

  start = time.perf_counter()
  compiled = jax.jit(step, donate_argnums=(1,)).lower(
      params, cache, encoded, raw, token).compile()
  cost = cost_of(compiled)
  return ProgramRow(model=PEER_PREFIX + cfg.name, program='step', tokens=1, batch=batch,
                    input_len=input_len, max_decode_len=max_decode_len,
                    mesh=mesh_lib.mesh_shape(mesh), greedy=True, bytes=cost.bytes,
                    flops=cost.flops, optimal_seconds=cost.optimal_seconds,
                    compile_seconds=time.perf_counter() - start)


def peer_key(cfg_name: str, batch: int, input_len: int, max_decode_len: int,
             mesh_shape, greedy: bool = True) -> tuple:
  """The `ProgramRow.key` of a `measure_t5x_step` row."""
  return (PEER_PREFIX + cfg_name, 'step', 1, batch, input_len, max_decode_len,
          tuple(mesh_shape), greedy)


def measured(rows, cfg_name: str, batch: int, input_len: int, max_decode_len: int,
             mesh_shape) -> Optional[ProgramRow]:
  """The T5X row of that setting among rows keyed by `ProgramRow.key`, if any."""
  return rows.get(peer_key(cfg_name, batch, input_len, max_decode_len, mesh_shape))
