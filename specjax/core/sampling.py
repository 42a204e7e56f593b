"""Logits -> the warped distribution that tokens are drawn from, per row.

Target and draft are warped by the same function (temperature, then top-k, then top-p),
so speculative sampling is exact for the warped target distribution (docs/algorithm.md).
Each row has its own settings (`SamplingParams`, traced arrays: one compiled program serves
any values); only `SamplingMode` (every row greedy or not, and whether any row uses top-k or
top-p at all) is static. Shape letters: B rows, V vocab.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence, Union

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """One sampling setting (for every row of a decode, or for one row of `SamplingParams`).

  Attributes:
    temperature: 0 means greedy (argmax); > 0 divides the logits.
    top_k: keep the k most likely tokens (ties with the k-th kept too); 0 keeps all.
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
    if not 0.0 <= self.temperature < float('inf'):
      raise ValueError(f'temperature must be finite and >= 0 (0 is greedy), got '
                       f'{self.temperature}')
    if isinstance(self.top_k, bool) or not isinstance(self.top_k, (int, np.integer)):
      raise ValueError(f'top_k must be an integer (0 keeps all), got {self.top_k!r}')
    if not 0 <= self.top_k <= vocab_size:
      raise ValueError(f'top_k must be in [0, vocab size {vocab_size}] (0 keeps all), '
                       f'got {self.top_k}')
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f'top_p must be in (0, 1] (1 keeps all), got {self.top_p}')

  def probs(self, logits: jax.Array) -> jax.Array:
    """Logits [..., V] warped by this setting (`warp_all`): [..., V] probabilities."""
    return warp_all(logits, self)


@dataclasses.dataclass(frozen=True)
class SamplingMode:
  """The static part of the sampling settings of a decode (hashable, part of LoopConfig).

  Attributes:
    greedy: every row is greedy: tokens are compared as ids, with no keys and no [B, V]
      distributions in the loop.
    greedy_rows: some rows of a sampled batch are greedy (their distributions are one-hot
      at the argmax).
    top_k: some row may use top-k (the warp sorts each row's logits).
    top_p: some row may use top-p.
  """

  greedy: bool = True
  greedy_rows: bool = False
  top_k: bool = False
  top_p: bool = False


@flax.struct.dataclass
class SamplingParams:
  """Per-row sampling settings, traced: changing their values does not recompile.

  Attributes:
    temperature: [B] float32, 0 for a greedy row (exactly the target's greedy decode).
    top_k: [B] int32, 0 keeps every token.
    top_p: [B] float32, 1 keeps every token.
  """

  temperature: jax.Array
  top_k: jax.Array
  top_p: jax.Array

  @classmethod
  def of(cls, settings: Union[SamplingConfig, Sequence[SamplingConfig], 'SamplingParams'],
         rows: int) -> 'SamplingParams':
    """Per-row params from one setting for every row, one setting per row, or params.

    Args:
      settings: a SamplingConfig (all rows), a sequence of `rows` SamplingConfigs, or
        SamplingParams (returned with its arrays as numpy).
      rows: B.

    Raises:
      ValueError: a sequence whose length is not B, or params whose arrays are not [B].
    """
    if isinstance(settings, SamplingParams):
      params = jax.tree.map(np.asarray, settings)
      for name in ('temperature', 'top_k', 'top_p'):
        if np.shape(getattr(params, name)) != (rows,):
          raise ValueError(f'SamplingParams.{name} has shape '
                           f'{np.shape(getattr(params, name))} for {rows} rows; pass [{rows}] '
                           'arrays (one value per row)')
      return params
    if isinstance(settings, SamplingConfig):
      settings = [settings] * rows
    settings = list(settings)
    for setting in settings:  # before the int32 array would round a float top-k
      if isinstance(setting.top_k, bool) or not isinstance(setting.top_k, (int, np.integer)):
        raise ValueError(f'top_k must be an integer (0 keeps all), got {setting.top_k!r}')
    if len(settings) != rows:
      raise ValueError(f'{len(settings)} sampling settings for {rows} rows; pass one '
                       'SamplingConfig or one per row')
    return cls(temperature=np.array([s.temperature for s in settings], np.float32),
               top_k=np.array([s.top_k for s in settings], np.int32),
               top_p=np.array([s.top_p for s in settings], np.float32))

  def mode(self) -> SamplingMode:
    """The static mode these (concrete) values need."""
    t, k, p = (np.asarray(a) for a in (self.temperature, self.top_k, self.top_p))
    sampled = t > 0
    return SamplingMode(greedy=not sampled.any(), greedy_rows=bool(sampled.any() and
                                                                   not sampled.all()),
                        top_k=bool((sampled & (k > 0)).any()),
                        top_p=bool((sampled & (p < 1)).any()))

  def validate(self, vocab_size: int) -> None:
    """Raises ValueError (one line naming the first bad row and the range) on bad values."""
    for i, (t, k, p) in enumerate(zip(*(np.asarray(a).tolist() for a in (
        self.temperature, self.top_k, self.top_p)))):
      try:
        SamplingConfig(t, k, p).validate(vocab_size)
      except ValueError as e:
        raise ValueError(f'row {i}: {e}' if np.size(self.temperature) > 1 else str(e)) from None


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


def _float_order(bits: jax.Array) -> jax.Array:
  """float32 bits (as int32) <-> an int32 that orders as the float does; its own inverse.

  A negative float's bits order in reverse: flipping all but the sign bit of those puts
  every float (-0.0 just below +0.0, NaNs at the ends) in the int32 order of its value.
  """
  return jnp.where(bits < 0, bits ^ jnp.iinfo(jnp.int32).max, bits)


def sort_descending(x: jax.Array) -> jax.Array:
  """The values of x [..., V] float32 along the last axis, largest first, NaNs last.

  The values of `-jnp.sort(-x, axis=-1)`, found by sorting integers: each float's bits
  mapped once to an int32 that orders as the float does, where jnp.sort maps both
  operands at every comparison. XLA:CPU sorts 8000 rows of 4096 in 1.5 s this way, in
  6.6 s with jnp.sort. One difference: XLA:CPU compares floats below the smallest normal
  one (|x| < 1.2e-38) as zero, so jnp.sort leaves them in input order among the zeros;
  here they keep their own order (the arithmetic after the sort reads them as zero
  either way).

  Args:
    x: [..., V] float32.

  Returns:
    [..., V] float32, each row sorted in descending order.
  """
  ordered = _float_order(jax.lax.bitcast_convert_type(x, jnp.int32))
  key = jnp.where(jnp.isnan(x), jnp.iinfo(jnp.int32).max, ~ordered)  # `~` reverses
  key = ~jax.lax.sort(key, dimension=x.ndim - 1)
  return jax.lax.bitcast_convert_type(_float_order(key), jnp.float32)


def _rows(a: jax.Array, like: jax.Array) -> jax.Array:
  """Per-row values [B] shaped to broadcast against like [B, ..., V]: [B, 1, ..., 1]."""
  return a.reshape(a.shape + (1,) * (like.ndim - a.ndim))


def warp(logits: jax.Array, params: SamplingParams, mode: SamplingMode) -> jax.Array:
  """Turns logits into the distributions tokens are drawn from, each row by its settings.

  Args:
    logits: [B, ..., V] float.
    params: per-row settings, [B] each.
    mode: the static mode (greedy: every row is one-hot, params unused).

  Returns:
    [B, ..., V] float32 probabilities: one-hot at the argmax for a greedy row (exactly
    what greedy decoding picks), else the softmax of logits / temperature restricted to
    the row's top-k, then to its top-p nucleus.
  """
  logits = logits.astype(jnp.float32)
  vocab = logits.shape[-1]
  if mode.greedy:
    return jax.nn.one_hot(argmax(logits), vocab, dtype=jnp.float32)
  temperature = _rows(params.temperature, logits)
  greedy_row = temperature == 0.0
  scaled = logits / jnp.where(greedy_row, 1.0, temperature)  # [B, ..., V]
  if mode.top_k or mode.top_p:
    descending = sort_descending(scaled)  # [B, ..., V]
  if mode.top_k:
    k = _rows(params.top_k, logits)
    kth = jnp.take_along_axis(descending, jnp.clip(k - 1, 0, vocab - 1), axis=-1)
    scaled = jnp.where((k <= 0) | (scaled >= kth), scaled, -jnp.inf)
    descending = jnp.where((k <= 0) | (descending >= kth), descending, -jnp.inf)
  if mode.top_p:
    # The nucleus in logit space, so that the mask and the softmax below see the same
    # values: the smallest logit whose mass before it (descending) is under top_p.
    top_p = _rows(params.top_p, logits)
    sorted_probs = jax.nn.softmax(descending, axis=-1)
    mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    threshold = jnp.min(jnp.where(mass_before < top_p, descending, jnp.inf), axis=-1,
                        keepdims=True)
    scaled = jnp.where((top_p >= 1.0) | (scaled >= threshold), scaled, -jnp.inf)
  probs = jax.nn.softmax(scaled, axis=-1)
  if not mode.greedy_rows:
    return probs
  return jnp.where(greedy_row, jax.nn.one_hot(argmax(logits), vocab, dtype=jnp.float32), probs)


def warp_all(logits: jax.Array, config: SamplingConfig) -> jax.Array:
  """`warp` of logits [..., V] with one setting for every row: [..., V] probabilities."""
  flat = logits.reshape((-1, logits.shape[-1]))  # [R, V]
  params = SamplingParams.of(config, flat.shape[0])
  return warp(flat, params, params.mode()).reshape(logits.shape)


def uniform(keys: jax.Array, shape=()) -> jax.Array:
  """One uniform draw in [0, 1) of `shape` per row, each from its own key: [B, *shape]."""
  return jax.vmap(lambda k: jax.random.uniform(k, shape, jnp.float32))(keys)


# Tokens per block of the two-level inverse CDF in `sample`.
SAMPLE_BLOCK = 128


def _first(hit: jax.Array) -> jax.Array:
  """Index of the first True along the last axis (its size where there is none)."""
  size = hit.shape[-1]
  return jnp.min(jnp.where(hit, jnp.arange(size, dtype=jnp.int32), size), axis=-1)


def _last(hit: jax.Array) -> jax.Array:
  """Index of the last True along the last axis (0 where there is none)."""
  return jnp.max(jnp.where(hit, jnp.arange(hit.shape[-1], dtype=jnp.int32), 0), axis=-1)


def sample(keys: jax.Array, probs: jax.Array, rows: Optional[jax.Array] = None) -> jax.Array:
  """Draws one token per key from probs, never a token of probability 0. Returns [N] int32.

  A two-level inverse CDF: one uniform u per draw, scaled by the row's total (probs need
  not be normalised); the first block of SAMPLE_BLOCK tokens whose running mass passes u
  and that has mass at all, then the first token of that block whose running mass passes
  u and whose own probability is positive. A running sum in float32 is not monotone (XLA
  adds it as a tree), so a plain inverse CDF gives a token of probability 0 a tiny
  interval: about 1e-5 of the draws under top-p 0.9 at V = 32128. Here the positive
  probability is part of the rule, so such a token is never drawn; and a draw costs
  V / SAMPLE_BLOCK + SAMPLE_BLOCK steps once a row's block sums are known.
  jax.random.categorical draws V Gumbel variates per row instead: 113 us for a [1, 4096]
  row on XLA:CPU, more than a whole demo draft step.

  Args:
    keys: [N, ...] one PRNG key per draw.
    probs: [M, V] non-negative, each row with positive mass.
    rows: [N] int32, the row of `probs` each draw uses (default: draw i uses row i).

  Returns:
    [N] int32 tokens, each with probs[row, token] > 0.
  """
  probs = probs.astype(jnp.float32)
  vocab = probs.shape[-1]
  block = min(SAMPLE_BLOCK, vocab)
  count = -(-vocab // block)
  blocks = jnp.pad(probs, ((0, 0), (0, count * block - vocab))).reshape(
      probs.shape[0], count, block)  # [M, NB, K]
  mass = jnp.sum(blocks, axis=-1)  # [M, NB]
  cdf = jnp.cumsum(mass, axis=-1)  # [M, NB]
  if rows is None:
    rows = jnp.arange(probs.shape[0])
  else:
    mass, cdf = mass[rows], cdf[rows]  # [N, NB]
  total = cdf[:, -1]  # [N]
  u = jnp.minimum(uniform(keys) * total, jnp.nextafter(total, 0.0))  # [N], u < total
  b = _first((cdf > u[:, None]) & (mass > 0))  # [N]
  b = jnp.where(b < count, b, _last(mass > 0))
  before = jnp.where(b > 0, jnp.take_along_axis(cdf, jnp.maximum(b - 1, 0)[:, None],
                                                axis=1)[:, 0], 0.0)
  inner = blocks[rows, b]  # [N, K]
  inner_cdf = before[:, None] + jnp.cumsum(inner, axis=-1)
  i = _first((inner_cdf > u[:, None]) & (inner > 0))
  i = jnp.where(i < block, i, _last(inner > 0))
  return jnp.minimum(b * block + i, vocab - 1).astype(jnp.int32)
