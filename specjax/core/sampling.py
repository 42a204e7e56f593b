"""Logits -> the warped distribution that tokens are drawn from.

Target and draft are warped by the same function (temperature, then top-k, then top-p),
so speculative sampling is exact for the warped target distribution (PAPER.md).
"""
from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How tokens are chosen. Hashable: a static jit argument.

  Attributes:
    temperature: 0 means greedy (argmax); > 0 divides the logits.
    top_k: keep the k most likely tokens; 0 keeps all.
    top_p: keep the smallest set of most likely tokens whose mass reaches top_p; 1 keeps all.
  """

  temperature: float = 0.0
  top_k: int = 0
  top_p: float = 1.0

  @property
  def greedy(self) -> bool:
    return self.temperature == 0.0

  def validate(self, vocab_size: int) -> None:
    """Raises ValueError (one line naming the argument and its range) on a bad setting."""
    if not self.temperature >= 0.0:
      raise ValueError(f'temperature must be >= 0 (0 is greedy), got {self.temperature}')
    if not 0 <= self.top_k <= vocab_size:
      raise ValueError(f'top_k must be in [0, vocab size {vocab_size}] (0 keeps all), '
                       f'got {self.top_k}')
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f'top_p must be in (0, 1] (1 keeps all), got {self.top_p}')


def argmax(x: jax.Array) -> jax.Array:
  """jnp.argmax over the last axis, as plain min/max reductions: [..., V] -> [...] int32.

  The first index of the maximum (the first NaN if there is one), exactly as jnp.argmax.
  XLA:CPU runs jnp.argmax's (value, index) reduction element by element: 18 us for one
  [1, 4096] row against 4 us for these plain reductions, a quarter of a demo draft step.
  """
  vocab = x.shape[-1]
  index = jnp.arange(vocab, dtype=jnp.int32)
  first = lambda hit: jnp.min(jnp.where(hit, index, vocab), axis=-1)
  first_nan = first(jnp.isnan(x))  # XLA:CPU's max may skip NaNs; jnp.argmax does not
  first_max = first(x == jnp.max(x, axis=-1, keepdims=True))
  return jnp.where(first_nan < vocab, first_nan, first_max)


def warp(logits: jax.Array, config: SamplingConfig) -> jax.Array:
  """Turns logits into the distribution a token is drawn from.

  Args:
    logits: [..., V] float.
    config: the sampling settings.

  Returns:
    [..., V] float32 probabilities: one-hot at the argmax when greedy, else the softmax
    of logits / temperature restricted to the top-k, then to the top-p nucleus.
  """
  logits = logits.astype(jnp.float32)
  vocab = logits.shape[-1]
  if config.greedy:
    return jax.nn.one_hot(argmax(logits), vocab, dtype=jnp.float32)
  logits = logits / config.temperature
  if 0 < config.top_k < vocab:
    kth = jax.lax.top_k(logits, config.top_k)[0][..., -1:]  # [..., 1]
    logits = jnp.where(logits >= kth, logits, -jnp.inf)
  probs = jax.nn.softmax(logits, axis=-1)
  if config.top_p < 1.0:
    sorted_probs = jnp.flip(jnp.sort(probs, axis=-1), axis=-1)  # [..., V] descending
    mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    # The smallest probability still inside the nucleus; ties with it stay in too.
    in_nucleus = mass_before < config.top_p
    threshold = jnp.min(jnp.where(in_nucleus, sorted_probs, jnp.inf), axis=-1, keepdims=True)
    probs = jnp.where(probs >= threshold, probs, 0.0)
    probs = probs / jnp.sum(probs, axis=-1, keepdims=True)
  return probs


def sample(rng: jax.Array, probs: jax.Array, greedy: bool) -> jax.Array:
  """Draws one token per row from probs [..., V]; argmax when greedy. Returns [...] int32.

  Inverse CDF: one uniform u per row, and the token whose interval
  [cdf[i-1], cdf[i]) of the running sum holds u * sum(probs). probs need not be
  normalised, and a token of probability 0 has an empty interval, so it is never drawn.
  jax.random.categorical draws V Gumbel variates per row instead: 113 us for a
  [1, 4096] row on XLA:CPU against 3 us, more than a whole demo draft step.
  """
  if greedy:
    return argmax(probs)
  cdf = jnp.cumsum(probs.astype(jnp.float32), axis=-1)  # [..., V], non-decreasing
  total = cdf[..., -1:]
  u = jax.random.uniform(rng, total.shape, jnp.float32) * total
  u = jnp.minimum(u, jnp.nextafter(total, 0.0))  # u < total even where the product rounds up
  return jnp.sum(cdf <= u, axis=-1).astype(jnp.int32)
