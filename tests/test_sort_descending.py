"""`sampling.sort_descending` (the sort under top-k and top-p) against numpy's sort, and
against the jnp.sort it replaced; a sort of the raw float bits fails the same check."""
import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import sampling

# Ties, both zeros, both infinities, NaN, the largest and the smallest normal floats.
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.5, -1.5, 7.0, 3.4e38, -3.4e38,
                    1.2e-38, -1.2e-38], np.float32)


def _rows(seed: int) -> np.ndarray:
  """[6, 33] float32: rows drawn from SPECIAL, rows of normal draws, a row of one value."""
  rng = np.random.default_rng(seed)
  special = rng.choice(SPECIAL, size=(3, 33))
  normal = rng.normal(scale=5.0, size=(2, 33))
  return np.concatenate([special, normal, np.full((1, 33), -2.0)]).astype(np.float32)


def _numpy_descending(x: np.ndarray) -> np.ndarray:
  """Each row's numbers largest first, then its NaNs."""
  out = []
  for row in x:
    numbers = row[~np.isnan(row)]
    out.append(np.concatenate([np.sort(numbers)[::-1], row[np.isnan(row)]]))
  return np.stack(out)


def _raw_bits_descending(x: jax.Array) -> jax.Array:
  """The broken variant: float bits sorted as they are (a negative float's bits order in
  reverse)."""
  bits = jax.lax.bitcast_convert_type(x, jnp.int32)
  return jax.lax.bitcast_convert_type(-jnp.sort(-bits, axis=-1), jnp.float32)


def _agrees(sort, x: np.ndarray) -> bool:
  return np.array_equal(np.asarray(jax.jit(sort)(x)), _numpy_descending(x), equal_nan=True)


def test_rows_are_numpys_descending_sort_with_nans_last():
  for seed in range(20):
    assert _agrees(sampling.sort_descending, _rows(seed)), seed


def test_values_are_those_of_the_jnp_sort_it_replaced():
  for seed in range(20):
    x = _rows(seed)
    got = np.asarray(jax.jit(sampling.sort_descending)(x))
    want = np.asarray(jax.jit(lambda x: -jnp.sort(-x, axis=-1))(x))
    assert np.array_equal(got, want, equal_nan=True), seed


def test_sorting_the_raw_float_bits_fails_the_same_check():
  assert not any(_agrees(_raw_bits_descending, _rows(seed)) for seed in range(20))
  positive = np.abs(_rows(0)[3:5])  # no negative float: the raw bits order as the values
  assert _agrees(_raw_bits_descending, positive)


def test_sorts_along_the_last_axis_of_any_rank():
  x = np.stack([_rows(0), _rows(1)])  # [2, 6, 33]
  got = np.asarray(jax.jit(sampling.sort_descending)(x))
  assert got.shape == x.shape
  for i in range(2):
    assert np.array_equal(got[i], _numpy_descending(x[i]), equal_nan=True)
