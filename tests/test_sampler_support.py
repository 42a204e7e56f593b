"""No impossible token, ever: 10^6 draws at V = 32128 under top-p 0.9 and under top-k 40.

A token outside the warped support (probability 0 after top-k / top-p) must never come
out: not from the target alone's draw, not from the draft, not from an acceptance, not
from the draw after a rejection. The plain inverse CDF the sampler used before does emit
such tokens (its float32 running sum is not monotone), which the same check shows.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax.core import acceptance, sampling

pytestmark = pytest.mark.compute  # 10^6 draws over a vocabulary of 32128

V = 32128
DRAWS = 1 << 20  # >= 10^6 per setting
CHUNK = 1 << 17  # draws per call (memory)
SETTINGS = {'top-p 0.9': sampling.SamplingConfig(1.0, top_p=0.9),
            'top-k 40': sampling.SamplingConfig(1.0, top_k=40)}


def _distributions(config):
  """The warped target p and draft q at V = 32128 (the draft: the target plus noise)."""
  logits = jax.random.normal(jax.random.PRNGKey(1), (V,)) * 2.5
  noisy = logits + jax.random.normal(jax.random.PRNGKey(2), (V,))
  return (sampling.warp_all(logits[None], config)[0], sampling.warp_all(noisy[None], config)[0])


# Compiled, as the decode programs call it (op by op, each chunk took three times longer).
_sample = jax.jit(sampling.sample)


def _draw(table, keys, rows):
  """sample() from rows of a small table, CHUNK draws at a time."""
  return np.concatenate([np.asarray(_sample(keys[i:i + CHUNK], table, rows[i:i + CHUNK]))
                         for i in range(0, len(keys), CHUNK)])


@pytest.fixture(scope='module', params=list(SETTINGS))
def setting(request):
  p, q = _distributions(SETTINGS[request.param])
  return request.param, p, q


def test_target_alone_never_draws_outside_the_support(setting):
  name, p, _ = setting
  keys = jax.random.split(jax.random.PRNGKey(101), DRAWS)
  tokens = _draw(p[None], keys, jnp.zeros((DRAWS,), jnp.int32))
  assert np.all(np.asarray(p)[tokens] > 0), name
  assert len(np.unique(tokens)) > min(20, int((p > 0).sum()) // 2)  # draws really spread


def test_speculative_draws_never_leave_the_support(setting):
  """Draft from q, accept by the rule, draw from the residual after a rejection: every
  emitted token has p > 0 (gamma 1: the same functions serve every draft position)."""
  name, p, q = setting
  keys = jax.random.split(jax.random.PRNGKey(202), 3 * DRAWS).reshape(3, DRAWS, -1)
  zeros = jnp.zeros((DRAWS,), jnp.int32)
  x = _draw(q[None], keys[0], zeros)
  r = np.asarray(jax.vmap(lambda k: jax.random.uniform(k))(keys[1]))
  ok = np.asarray(acceptance.accept_draft(np.asarray(p)[x], np.asarray(q)[x], r))
  y = _draw(acceptance.residual(p, q)[None], keys[2], zeros)
  emitted = np.where(ok, x, y)
  p_host = np.asarray(p)
  assert np.all(p_host[emitted] > 0), name
  assert 0.05 < ok.mean() < 0.95  # both branches ran many times
  assert np.all(np.asarray(q)[x] > 0)  # the draft stays in its own support too


def test_a_token_of_target_probability_zero_is_never_accepted():
  """Even with r exactly 0 (one draw in 2^23), where `r * q <= p` accepted it."""
  p_x, q_x = jnp.array([0.0, 0.0, 0.3]), jnp.array([0.5, 1.0, 0.3])
  r = jnp.zeros(3)
  assert np.asarray(acceptance.accept_draft(p_x, q_x, r)).tolist() == [False, False, True]
  assert np.asarray(r * q_x <= p_x).tolist() == [True, True, True]  # the old rule


def test_the_old_inverse_cdf_fails_the_same_check():
  """sum(cumsum(p) <= u): a token of probability 0 between two positive ones owns a tiny
  interval wherever XLA's tree-shaped running sum steps backwards."""
  p, _ = _distributions(SETTINGS['top-p 0.9'])
  cdf = np.asarray(jnp.cumsum(p[None], axis=-1)[0])
  total = cdf[-1]
  keys = jax.random.split(jax.random.PRNGKey(101), DRAWS)
  u = np.asarray(jax.vmap(lambda k: jax.random.uniform(k))(keys)) * total
  u = np.minimum(u, np.nextafter(total, np.float32(0)))
  old = np.minimum(np.searchsorted(np.sort(cdf), u, side='right'), V - 1)  # = sum(cdf <= u)
  outside = int((np.asarray(p)[old] == 0).sum())
  assert outside > 0  # about 1e-5 of the draws
