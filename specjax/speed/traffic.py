"""What one decode step reads, against what it must: the excess-traffic check.

A cached decode call of K tokens must read the decoder's weights once (every decoder
kernel but the cross-attention key and value ones, whose products `encode` made once per
input; the embedding table only where the logits are tied to it, otherwise just K rows),
the self-attention caches and the cross-attention K/V, and write its logits. `measure_step`
compiles `model.decode` with the cache donated (as the loop runs it) and sets XLA's bytes
accessed against that sum.

Shape letters: B batch, K tokens, S input length, T cache length.
"""
from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp

from specjax.models.t5 import T5
from specjax.models.t5_config import T5Config
from specjax.speed.programs import cast_floats
from specjax.speed.roofline import cost_of


@dataclasses.dataclass(frozen=True)
class StepTraffic:
  """One decode call's bytes accessed against what it must access (bytes).

  Attributes:
    model: registry name.
    tokens: K.
    batch: B.
    input_len: S.
    cache_len: T.
    dtype: params, activations and caches.
    accessed: XLA's bytes accessed.
    weights: decoder weights the call must read.
    caches: the self-attention caches.
    cross: the cross-attention K/V.
    logits: the float32 logits it writes.
    flops: XLA's flops.
    compile_seconds: time to compile it here.
  """

  model: str
  tokens: int
  batch: int
  input_len: int
  cache_len: int
  dtype: str
  accessed: float
  weights: float
  caches: float
  cross: float
  logits: float
  flops: float
  compile_seconds: float

  @property
  def needed(self) -> float:
    """What the call must access: weights + caches + cross K/V + its logits."""
    return self.weights + self.caches + self.cross + self.logits

  @property
  def ratio(self) -> float:
    """accessed / needed (1.0: no excess traffic)."""
    return self.accessed / self.needed

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, d: dict) -> 'StepTraffic':
    return cls(**d)


def _nbytes(tree) -> int:
  return sum(x.size * jnp.dtype(x.dtype).itemsize for x in jax.tree.leaves(tree))


def needed_weights(params, cfg: T5Config) -> int:
  """Bytes of the weights one decode call must read (see the module docstring)."""
  dec = params['decoder']
  cross_kv = [dec[f'layers_{i}']['encoder_decoder_attention'][n]
              for i in range(cfg.num_decoder_layers) for n in ('key', 'value')]
  tied = params['token_embedder'] if cfg.logits_via_embedding else {}
  return _nbytes(dec) - _nbytes(cross_kv) + _nbytes(tied)


def measure_step(cfg: T5Config, *, tokens: int, batch: int, input_len: int, cache_len: int,
                 device, dtype: str = 'bfloat16') -> StepTraffic:
  """Compiles one `T5.decode` call on `device` and sets its traffic against the need.

  Args:
    cfg: the architecture.
    tokens: K.
    batch: B.
    input_len: S.
    cache_len: T.
    device: a compile-only TPU core (or a CPU device).
    dtype: params, activations and caches.
  """
  model = T5(cfg.replace(dtype=dtype))
  sharding = jax.sharding.SingleDeviceSharding(device)
  place = lambda tree: jax.tree.map(
      lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding), tree)
  params = place(cast_floats(place(jax.eval_shape(model.init, jax.random.PRNGKey(0))), dtype))
  ints = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32, sharding=sharding)
  encoded = place(jax.eval_shape(model.encode, params, ints(batch, input_len)))
  cache = place(jax.eval_shape(lambda: model.init_cache(batch, cache_len)))
  start = time.perf_counter()
  compiled = jax.jit(model.decode, donate_argnums=(2,)).lower(
      params, encoded, cache, ints(batch, tokens), ints(batch)).compile()
  cost = cost_of(compiled)
  return StepTraffic(model=cfg.name, tokens=tokens, batch=batch, input_len=input_len,
                     cache_len=cache_len, dtype=jnp.dtype(dtype).name, accessed=cost.bytes,
                     weights=needed_weights(params, cfg), caches=_nbytes(cache),
                     cross=_nbytes(encoded['cross']),
                     logits=batch * tokens * cfg.vocab_size * 4, flops=cost.flops,
                     compile_seconds=time.perf_counter() - start)

