"""The vectorised accept / correct step of speculative sampling (docs/algorithm.md, steps 3-5).

For draft tokens x_1..x_G drawn from q_1..q_G and target distributions p_1..p_{G+1}:
accept x_i while r_i * q_i(x_i) < p_i(x_i) (r_i uniform in [0, 1), so with probability
min(1, p/q), and never a token the target gives probability 0); at the first rejection
draw the extra token from norm(max(0, p - q)); if all G are accepted draw it from
p_{G+1}. For a greedy row p and q are one-hot, and this is exact match against argmax p.
Every draw of a row comes from that row's own key.
"""
from __future__ import annotations

from typing import NamedTuple, Optional

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


def accept_greedy(target_tokens: jax.Array, x: jax.Array,
                  drafted: Optional[jax.Array] = None) -> Acceptance:
  """`accept` when every row is greedy, on token ids instead of one-hot distributions.

  Equal to `accept` on one-hot p and q (the argmax of the logits), without building
  [B, G, V] one-hots or drawing anything.

  Args:
    target_tokens: [B, G+1] int32, the target's argmax after each verified token.
    x: [B, G] int32, the draft's argmax tokens.
    drafted: [B] int32, how many of the G tokens each row proposes (default all).

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G] (1 where x matches).
  """
  ok = x == target_tokens[:, :-1]  # [B, G]
  if drafted is not None:
    ok &= jnp.arange(x.shape[1])[None] < drafted[:, None]
  accepted = jnp.cumprod(ok.astype(jnp.int32), axis=1).astype(bool)
  n = jnp.sum(accepted, axis=1).astype(jnp.int32)  # [B]
  y = jnp.take_along_axis(target_tokens, n[:, None], axis=1)[:, 0]  # [B]
  return Acceptance(n=n, y=y, accepted=accepted, beta=ok.astype(jnp.float32))


def accept_draft(p_x: jax.Array, q_x: jax.Array, r: jax.Array,
                 q_scale: float = 1.0) -> jax.Array:
  """The rule for one draft token: r * q(x) < p(x), r uniform in [0, 1).

  Strict, so a token the target gives probability 0 is never accepted, not even when r is
  exactly 0; with probability min(1, p(x) / q(x)) otherwise.

  Args:
    p_x, q_x: the target's and the draft's probability of the drafted token, any shape.
    r: uniforms of the same shape.
    q_scale: lenience l in (0, 1]; 1 is exact.

  Returns:
    Booleans of the same shape: accepted.
  """
  return r * (q_scale * q_x) < p_x


def residual(p: jax.Array, q: jax.Array, q_scale: float = 1.0) -> jax.Array:
  """norm(max(0, p - q)) over the last axis, where the next token is drawn after a rejection.

  When rounding leaves no mass (p <= q everywhere, so a rejection had probability ~0), p
  itself, so that the draw is still a token of the target's support and never NaN.
  """
  mass_left = jnp.maximum(p - q * q_scale, 0.0)
  mass = jnp.sum(mass_left, axis=-1, keepdims=True)
  return jnp.where(mass > 1e-12, mass_left / jnp.maximum(mass, 1e-30), p)


def _proposed(q: jax.Array, drafted: Optional[jax.Array]) -> jax.Array:
  """q with the positions a row did not propose zeroed (there the target's p is used)."""
  if drafted is None:
    return q
  return jnp.where((jnp.arange(q.shape[1])[None] < drafted[:, None])[..., None], q, 0.0)


def accept(p: jax.Array, q: jax.Array, x: jax.Array, keys: jax.Array,
           q_scale: float = 1.0, drafted: Optional[jax.Array] = None) -> Acceptance:
  """Accepts a prefix of the draft and draws the token that follows it.

  Args:
    p: [B, G+1, V] float32, the warped target distributions.
    q: [B, G, V] float32, the warped draft distributions x was drawn from.
    x: [B, G] int32, the draft tokens.
    keys: [B, ...] one PRNG key per row.
    q_scale: lenience l in (0, 1] (docs/algorithm.md, lenience): accept when r * l * q(x) < p(x);
      1 is exact, below 1 the output is no longer the target's.
    drafted: [B] int32, how many of the G tokens each row proposes (default all): the row
      accepts at most that many, and after all of them draws from p itself.

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G].
  """
  batch, gamma, vocab = q.shape
  q = _proposed(q, drafted)
  accept_keys, extra_keys = split_keys(keys, 2)
  p_draft = p[:, :gamma]  # [B, G, V]
  p_x = jnp.take_along_axis(p_draft, x[..., None], axis=-1)[..., 0]  # [B, G]
  q_x = jnp.take_along_axis(q, x[..., None], axis=-1)[..., 0]  # [B, G]
  r = sampling.uniform(accept_keys, (gamma,))  # [B, G]
  ok = accept_draft(p_x, q_x, r, q_scale)
  if drafted is not None:  # a position the row did not propose is never accepted
    ok &= jnp.arange(gamma)[None] < drafted[:, None]
  accepted = jnp.cumprod(ok.astype(jnp.int32), axis=1).astype(bool)  # [B, G]
  n = jnp.sum(accepted, axis=1).astype(jnp.int32)  # [B]

  # Position n gets the residual max(0, p - q); position G has no q, so it gets p itself.
  q_padded = jnp.concatenate([q, jnp.zeros((batch, 1, vocab), q.dtype)], axis=1)
  p_n = jnp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [B, V]
  q_n = jnp.take_along_axis(q_padded, n[:, None, None], axis=1)[:, 0]  # [B, V]
  y = sampling.sample(extra_keys, residual(p_n, q_n, q_scale))  # [B]
  beta = jnp.sum(jnp.minimum(p_draft, q), axis=-1)  # [B, G]
  return Acceptance(n=n, y=y, accepted=accepted, beta=beta)


def typical_threshold(p: jax.Array, epsilon: float, delta: float) -> jax.Array:
  """min(epsilon, delta * exp(-H(p))) of distributions p [..., V]: [...], H the entropy
  (typical acceptance's bar for p(x))."""
  entropy = -jnp.sum(jnp.where(p > 0, p * jnp.log(jnp.maximum(p, 1e-30)), 0.0), axis=-1)
  return jnp.minimum(epsilon, delta * jnp.exp(-entropy))


def accept_typical(p: jax.Array, q: jax.Array, x: jax.Array, keys: jax.Array,
                   epsilon: float, delta: float,
                   drafted: Optional[jax.Array] = None) -> Acceptance:
  """Typical acceptance (Medusa), NOT exact: draft token x_i is kept while
  p_i(x_i) > `typical_threshold`(p_i), and the token after the kept ones is drawn from
  p itself. A greedy row (one-hot p) keeps exactly its argmax matches, as `accept`.

  Args:
    p: [B, G+1, V] float32, the warped target distributions.
    q: [B, G, V] float32, the draft's (read for beta only).
    x: [B, G] int32, the draft tokens.
    keys: [B, ...] one PRNG key per row.
    epsilon, delta: the threshold's (`specjax.core.rule.typical_parameters`).
    drafted: [B] int32, how many of the G tokens each row proposes (default all).

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G].
  """
  gamma = q.shape[1]
  p_draft = p[:, :gamma]
  p_x = jnp.take_along_axis(p_draft, x[..., None], axis=-1)[..., 0]  # [B, G]
  ok = p_x > typical_threshold(p_draft, epsilon, delta)
  if drafted is not None:
    ok &= jnp.arange(gamma)[None] < drafted[:, None]
  accepted = jnp.cumprod(ok.astype(jnp.int32), axis=1).astype(bool)  # [B, G]
  n = jnp.sum(accepted, axis=1).astype(jnp.int32)
  p_n = jnp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [B, V]
  y = sampling.sample(split_keys(keys, 2)[1], p_n)
  beta = jnp.sum(jnp.minimum(p_draft, _proposed(q, drafted)), axis=-1)
  return Acceptance(n=n, y=y, accepted=accepted, beta=beta)


def block_weights(p_x: jax.Array, q_x: jax.Array) -> jax.Array:
  """w_j = min(w_{j-1} p(x_j) / q(x_j), 1), w_0 = 1: [B, G] -> [B, G+1] (w_0 .. w_G)."""
  w = [jnp.ones(p_x.shape[:1], jnp.float32)]
  for j in range(p_x.shape[1]):
    w.append(jnp.minimum(w[-1] * p_x[:, j] / jnp.maximum(q_x[:, j], 1e-30), 1.0))
  return jnp.stack(w, axis=1)


def block_stops(p: jax.Array, q: jax.Array, x: jax.Array):
  """The stop probabilities of block verification, h [B, G], and its weights w [B, G+1].

  w_j = min(w_{j-1} p_j(x_j) / q_j(x_j), 1) from w_0 = 1 (`block_weights`);
  h_j = S_j / (S_j + 1 - w_j) for j < G, S_j = sum_x max(w_j p_j(x) - q_j(x), 0) (0 where
  that is 0 / 0), and h_G = w_G. Shapes as `accept_block`.
  """
  gamma = q.shape[1]
  p_x = jnp.take_along_axis(p[:, :gamma], x[..., None], axis=-1)[..., 0]  # [B, G]
  q_x = jnp.take_along_axis(q, x[..., None], axis=-1)[..., 0]  # [B, G]
  w = block_weights(p_x, q_x)  # [B, G+1]
  # S_j for j = 1..G-1: the mass the target still owes after j accepted tokens.
  owed = jnp.sum(jnp.maximum(w[:, 1:gamma, None] * p[:, 1:gamma] - q[:, 1:gamma], 0.0),
                 axis=-1)  # [B, G-1]
  denominator = owed + 1.0 - w[:, 1:gamma]
  h = jnp.where(denominator > 0, owed / jnp.where(denominator > 0, denominator, 1.0), 0.0)
  return jnp.concatenate([h, w[:, gamma:]], axis=1), w


def accept_block(p: jax.Array, q: jax.Array, x: jax.Array, keys: jax.Array,
                 drafted: Optional[jax.Array] = None) -> Acceptance:
  """Block verification (Sun, Mendlovic, Leviathan et al., ICLR 2025): the draft is
  verified as a whole, not token by token. Exact for the target's distribution, and never
  fewer accepted tokens in expectation than `accept` (optimal among exact rules).

  n is the largest j with u_j < h_j (`block_stops`; 0 if none); the extra token is drawn
  from p_G after a full acceptance, else from norm(max(w_n p_n - q_n, 0)). With one-hot p
  and q (greedy rows) this is exact match, as the token rule.

  Args:
    p: [B, G+1, V] float32, the warped target distributions.
    q: [B, G, V] float32, the warped draft distributions x was drawn from.
    x: [B, G] int32, the draft tokens.
    keys: [B, ...] one PRNG key per row.
    drafted: [B] int32, how many of the G tokens each row proposes (default all): the
      block is then the first `drafted` tokens (h stops there: h_g = w_g, 0 beyond).

  Returns:
    An `Acceptance` with n [B], y [B], accepted [B, G], beta [B, G].
  """
  batch, gamma, vocab = q.shape
  stop_keys, extra_keys = split_keys(keys, 2)
  h, w = block_stops(p, q, x)  # [B, G], [B, G+1]
  if drafted is not None:
    j = jnp.arange(1, gamma + 1)[None]  # [1, G]
    w_g = jnp.take_along_axis(w, drafted[:, None], axis=1)  # [B, 1]
    h = jnp.where(j < drafted[:, None], h, jnp.where(j == drafted[:, None], w_g, 0.0))
    q = _proposed(q, drafted)
  stop = sampling.uniform(stop_keys, (gamma,)) < h  # [B, G]
  n = jnp.max(jnp.where(stop, jnp.arange(1, gamma + 1), 0), axis=1).astype(jnp.int32)  # [B]
  q_padded = jnp.concatenate([q, jnp.zeros((batch, 1, vocab), q.dtype)], axis=1)
  p_n = jnp.take_along_axis(p, n[:, None, None], axis=1)[:, 0]  # [B, V]
  q_n = jnp.take_along_axis(q_padded, n[:, None, None], axis=1)[:, 0]  # [B, V]
  w_n = jnp.take_along_axis(w, n[:, None], axis=1)  # [B, 1]
  y = sampling.sample(extra_keys, residual(w_n * p_n, q_n))  # [B]
  accepted = jnp.arange(gamma)[None] < n[:, None]
  beta = jnp.sum(jnp.minimum(p[:, :gamma], q), axis=-1)  # [B, G]
  return Acceptance(n=n, y=y, accepted=accepted, beta=beta)
