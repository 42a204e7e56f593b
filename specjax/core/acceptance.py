"""The vectorised accept / correct step of speculative sampling (PAPER.md, steps 3-5).

For draft tokens x_1..x_G drawn from q_1..q_G and target distributions p_1..p_{G+1}:
accept x_i while r_i * q_i(x_i) < p_i(x_i) (r_i uniform in [0, 1), so with probability
min(1, p/q), and never a token the target gives probability 0); at the first rejection
draw the extra token from norm(max(0, p - q)); if all G are accepted draw it from
p_{G+1}. For a greedy row p and q are one-hot, and this is exact match against argmax p.
Every draw of a row comes from that row's own key.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from specjax.core import sampling
from specjax.core.state import split_keys


class Acceptance(NamedTuple):
  """Result of one accept / correct step.

  Attributes:
    n: [B] int32, accepted draft tokens (0..G).
    y: [B] int32, the token drawn after them (correction or bonus).
    accepted: [B, G] bool, which positions were accepted (a prefix of each row).
    beta: [B, G] float32, sum_x min(p_i(x), q_i(x)) at each drafted position.
  """

  n: jax.Array
  y: jax.Array
  accepted: jax.Array
  beta: jax.Array


def accept_greedy(target_tokens: jax.Array, x: jax.Array) -> Acceptance:
  """`accept` when every row is greedy, on token ids instead of one-hot distributions.

  Equal to `accept` on one-hot p and q (the argmax of the logits), without building
  [B, G, V] one-hots or drawing anything.

  Args:
    target_tokens: [B, G+1] int32, the target's argmax after each verified token.
    x: [B, G] int32, the draft's argmax tokens.

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G] (1 where x matches).
  """
  ok = x == target_tokens[:, :-1]  # [B, G]
  accepted = jnp.cumprod(ok.astype(jnp.int32), axis=1).astype(bool)
  n = jnp.sum(accepted, axis=1).astype(jnp.int32)  # [B]
  y = jnp.take_along_axis(target_tokens, n[:, None], axis=1)[:, 0]  # [B]
  return Acceptance(n=n, y=y, accepted=accepted, beta=ok.astype(jnp.float32))


def accept(p: jax.Array, q: jax.Array, x: jax.Array, keys: jax.Array,
           q_scale: float = 1.0) -> Acceptance:
  """Accepts a prefix of the draft and draws the token that follows it.

  Args:
    p: [B, G+1, V] float32, the warped target distributions.
    q: [B, G, V] float32, the warped draft distributions x was drawn from.
    x: [B, G] int32, the draft tokens.
    keys: [B, ...] one PRNG key per row.
    q_scale: lenience l in (0, 1] (PAPER.md, appendix F); 1 is exact.

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G].
  """
  batch, gamma, vocab = q.shape
  accept_keys, extra_keys = split_keys(keys, 2)
  p_draft = p[:, :gamma]  # [B, G, V]
  p_x = jnp.take_along_axis(p_draft, x[..., None], axis=-1)[..., 0]  # [B, G]
  q_x = jnp.take_along_axis(q, x[..., None], axis=-1)[..., 0]  # [B, G]
  r = sampling.uniform(accept_keys, (gamma,))  # [B, G]
  ok = r * (q_scale * q_x) < p_x
  accepted = jnp.cumprod(ok.astype(jnp.int32), axis=1).astype(bool)  # [B, G]
  n = jnp.sum(accepted, axis=1).astype(jnp.int32)  # [B]

  # Position n gets the residual max(0, p - q); position G has no q, so it gets p itself.
  q_padded = jnp.concatenate([q * q_scale, jnp.zeros((batch, 1, vocab), q.dtype)], axis=1)
  p_n = jnp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [B, V]
  q_n = jnp.take_along_axis(q_padded, n[:, None, None], axis=1)[:, 0]  # [B, V]
  residual = jnp.maximum(p_n - q_n, 0.0)  # [B, V]
  # Rejection had probability ~0 when the residual underflows; fall back to p (no NaN).
  mass = jnp.sum(residual, axis=-1, keepdims=True)
  residual = jnp.where(mass > 1e-12, residual / jnp.maximum(mass, 1e-30), p_n)
  y = sampling.sample(extra_keys, residual)  # [B]
  beta = jnp.sum(jnp.minimum(p_draft, q), axis=-1)  # [B, G]
  return Acceptance(n=n, y=y, accepted=accepted, beta=beta)
