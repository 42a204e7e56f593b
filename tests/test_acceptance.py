"""The accept / correct step alone, on hand-written distributions."""
import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from specjax.core import acceptance, sampling

P = np.array([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]], np.float32)  # [G+1, V]
Q = np.array([[0.2, 0.3, 0.5], [0.4, 0.4, 0.2]], np.float32)  # [G, V]


def _run(num, seed=0):
  kx, ka = jax.random.split(jax.random.PRNGKey(seed))
  x = jax.random.categorical(kx, jnp.log(jnp.asarray(Q))[None], axis=-1,
                             shape=(num, 2)).astype(jnp.int32)  # [B, G] drawn from q
  p = jnp.broadcast_to(jnp.asarray(P), (num,) + P.shape)
  q = jnp.broadcast_to(jnp.asarray(Q), (num,) + Q.shape)
  return x, acceptance.accept(p, q, x, jax.random.split(ka, num))


def test_accepted_count_follows_beta():
  num = 200_000
  _, res = _run(num)
  beta = np.minimum(P[:2], Q).sum(-1, dtype=np.float64)  # [G]
  expected = np.array([1 - beta[0], beta[0] * (1 - beta[1]), beta[0] * beta[1]])
  observed = np.bincount(np.asarray(res.n), minlength=3)
  assert stats.chisquare(observed, expected.astype(np.float64) / expected.sum() * num).pvalue > 1e-3
  np.testing.assert_allclose(np.asarray(res.beta[0]), beta, rtol=1e-6)
  # accepted is the prefix mask of length n
  np.testing.assert_array_equal(np.asarray(res.accepted).sum(1), np.asarray(res.n))


def test_first_emitted_token_follows_p():
  num = 200_000
  x, res = _run(num, seed=1)
  n, y = np.asarray(res.n), np.asarray(res.y)
  first = np.where(n >= 1, np.asarray(x)[:, 0], y)
  assert stats.chisquare(np.bincount(first, minlength=3), P[0].astype(np.float64) / P[0].sum(dtype=np.float64) * num).pvalue > 1e-3
  # after a full acceptance the bonus token comes from p[G]
  bonus = y[n == 2]
  assert stats.chisquare(np.bincount(bonus, minlength=3), P[2].astype(np.float64) / P[2].sum(dtype=np.float64) * len(bonus)).pvalue > 1e-3


def _keys(num, seed=0):
  return jax.random.split(jax.random.PRNGKey(seed), num)


def test_one_hot_rows_are_exact_match():
  """A greedy row inside a sampled batch: one-hot p and q accept exactly the target's
  argmax, whatever the uniforms, and the extra token is the target's argmax."""
  p = jnp.tile(jax.nn.one_hot(jnp.array([[2, 0, 1]]), 3), (256, 1, 1))
  q = jnp.tile(jax.nn.one_hot(jnp.array([[2, 1]]), 3), (256, 1, 1))
  res = acceptance.accept(p, q, jnp.tile(jnp.array([[2, 1]]), (256, 1)), _keys(256))
  assert set(np.asarray(res.n).tolist()) == {1} and set(np.asarray(res.y).tolist()) == {0}
  res = acceptance.accept(p, p[:, :2], jnp.tile(jnp.array([[2, 0]]), (256, 1)), _keys(256))
  assert set(np.asarray(res.n).tolist()) == {2} and set(np.asarray(res.y).tolist()) == {1}


def test_residual_that_rounds_to_nothing_falls_back_to_the_target(monkeypatch):
  """q just above p at every token (a rounding case): the residual max(0, p - q) is all 0,
  so after a rejection the extra token is drawn from p itself, never NaN."""
  p = jnp.asarray(P)[None]  # [1, G+1, V]
  q = p[:, :2] * (1 + 1e-6)  # [1, G, V], above p everywhere
  np.testing.assert_array_equal(acceptance.residual(p[0, 0], q[0, 0]), p[0, 0])
  np.testing.assert_allclose(acceptance.residual(p[0, 0], 0.5 * p[0, 0]), P[0], rtol=1e-6)
  # r just below 1 rejects x_1 (r * q > p there): the fallback is what draws y
  monkeypatch.setattr(sampling, 'uniform', lambda keys, shape=(): jnp.full(
      (keys.shape[0],) + tuple(shape), np.nextafter(np.float32(1), np.float32(0))))
  res = acceptance.accept(p, q, jnp.array([[0, 1]]), _keys(1))
  assert int(res.n[0]) == 0
  assert P[0, int(res.y[0])] > 0 and np.all(np.isfinite(np.asarray(res.beta)))
  same = acceptance.accept(p, p[:, :2], jnp.array([[0, 1]]), _keys(1))
  assert int(same.n[0]) == 2  # p == q: r < 1 accepts every token


def test_accept_greedy_equals_accept_on_one_hots():
  rng = np.random.default_rng(3)
  batch, gamma, vocab = 64, 5, 4
  target_tokens = rng.integers(0, vocab, (batch, gamma + 1)).astype(np.int32)
  # Drafts that agree with the target on a random prefix, then on chance alone.
  x = np.where(rng.random((batch, gamma)) < 0.7, target_tokens[:, :gamma],
               rng.integers(0, vocab, (batch, gamma))).astype(np.int32)
  p = jax.nn.one_hot(target_tokens, vocab)
  q = jax.nn.one_hot(x, vocab)
  full = acceptance.accept(p, q, jnp.asarray(x), _keys(batch))
  fast = acceptance.accept_greedy(jnp.asarray(target_tokens), jnp.asarray(x))
  for name in ('n', 'y', 'accepted', 'beta'):
    np.testing.assert_array_equal(np.asarray(getattr(fast, name)),
                                  np.asarray(getattr(full, name)), err_msg=name)
  assert 0 < np.asarray(fast.n).mean() < gamma  # both partial and full acceptances occur
  assert (np.asarray(fast.n) == gamma).any() and (np.asarray(fast.n) == 0).any()


def test_argmax_equals_jnp_argmax_on_ties_nan_and_inf():
  """The two-reduction argmax picks what jnp.argmax picks: the first maximum, the first NaN."""
  rng = np.random.default_rng(0)
  x = rng.integers(0, 4, size=(64, 3, 50)).astype(np.float32)  # many ties for the maximum
  x[0, 0] = -np.inf
  x[1, 0, 7] = x[1, 0, 30] = np.inf
  x[2, 1, 9] = x[2, 1, 4] = np.nan
  x[3, 2, :] = np.nan
  x[4, :, :] = rng.normal(size=(3, 50))
  got = np.asarray(sampling.argmax(jnp.asarray(x)))
  assert got.dtype == np.int32 and got.shape == (64, 3)
  np.testing.assert_array_equal(got, np.asarray(jnp.argmax(jnp.asarray(x), axis=-1)))
  assert got[2, 1] == 4 and got[1, 0] == 7 and got[0, 0] == 0


def test_sample_follows_unnormalised_probs_and_never_draws_a_zero(monkeypatch):
  probs = np.array([0.0, 0.1, 0.0, 0.25, 0.05, 0.0, 0.6, 0.0], np.float32) * 3.0  # sums to 3
  draws = np.asarray(sampling.sample(jax.random.split(jax.random.PRNGKey(3), 50_000),
                                     jnp.broadcast_to(jnp.asarray(probs), (50_000, 8))))
  counts = np.bincount(draws, minlength=8)
  assert counts[probs == 0].sum() == 0 and draws.max() < 8
  expected = probs[probs > 0].astype(np.float64) / probs.sum(dtype=np.float64) * len(draws)
  assert stats.chisquare(counts[probs > 0], expected).pvalue > 1e-3
  # The extreme uniforms land on the first and the last token of positive probability.
  for u, token in ((0.0, 1), (np.nextafter(np.float32(1), np.float32(0)), 6), (1.0, 6)):
    monkeypatch.setattr(jax.random, 'uniform', lambda *a, u=u, **k: jnp.full(a[1], u))
    assert int(sampling.sample(_keys(1), jnp.asarray(probs)[None])[0]) == token
