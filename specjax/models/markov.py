"""A Markov model: the next-token distribution depends only on the last token.

Its sequence probabilities can be enumerated exactly, which makes it the reference for
the statistical exactness tests, and a zero-cost draft of the n-gram kind. It behaves as
a decoder-only model: the right-padded inputs are the prompt, and the last prompt token
is the first state.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.models.base import decoder_only_prompt


@dataclasses.dataclass(frozen=True)
class MarkovModel:
  """A first-order Markov chain over a vocabulary of `vocab_size` tokens.

  Params: {'logits': [V, V] float32}, row s holding the next-token logits after token s.
  """

  vocab_size: int
  eos_id: int = 1
  pad_id: int = 0

  def init(self, rng: jax.Array, scale: float = 2.0) -> dict:
    """Random transition logits, N(0, scale^2)."""
    return {'logits': scale * jax.random.normal(rng, (self.vocab_size, self.vocab_size))}

  def encode(self, params, inputs: jax.Array) -> dict:
    """No context beyond the prompt."""
    del params, inputs
    return {}

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    """The right-padded inputs [B, P] and their non-pad lengths [B] (at least 1)."""
    return decoder_only_prompt(inputs, self.pad_id)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> dict:
    """A Markov chain needs no cache."""
    del batch, max_len, dtype
    return {}

  def cache_axes(self) -> dict:
    """No cache, no axes."""
    return {}

  def encoded_axes(self) -> dict:
    """No encoding, no axes."""
    return {}

  def decode(self, params, encoded, cache, tokens: jax.Array, positions: jax.Array,
             tree=None, return_hidden: bool = False):
    """Logits [B, K, V] after each of tokens [B, K]: row `tokens` of the table.

    They depend on each token alone, so a token tree (`base.Tree`) changes nothing.

    Raises:
      NotImplementedError: return_hidden (a table has no hidden state).
    """
    del encoded, positions, tree
    if return_hidden:
      raise NotImplementedError('a Markov model has no hidden state to return')
    return jnp.take(params['logits'], tokens, axis=0).astype(jnp.float32), cache

  def transition_probs(self, params, sampling_config) -> np.ndarray:
    """The warped transition matrix [V, V] as float64 numpy (for exact enumeration).

    Args:
      params: the chain's params.
      sampling_config: a sampling setting with `probs(logits)`, the warped distribution
        (`specjax.core.sampling.SamplingConfig`): the warp belongs to the decode, not to
        the model.
    """
    return np.asarray(sampling_config.probs(params['logits']), np.float64)

