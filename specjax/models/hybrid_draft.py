"""Copy where the output repeats the source, a draft model everywhere else.

Each call runs both drafts (the model's cache stays in step) and returns, per query, the
copy's point mass where it found a match and the model's logits where it did not: q is
then exactly the distribution the token is drawn from, so sampling stays exact. It costs
one model draft step per token, as the model alone does, and accepts more where outputs
copy their inputs (summaries, code edits, quotes).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Tuple

import jax
import jax.numpy as jnp

from specjax.models import base
from specjax.models.copy_draft import CopyDraft


@dataclasses.dataclass(frozen=True)
class HybridDraft:
  """CopyDraft where it matches, `model` elsewhere; params are the model's.

  Attributes:
    copy: the copy draft.
    model: the draft model (the contract of `specjax.models.base.Model`).
  """

  copy: CopyDraft
  model: Any

  @property
  def vocab_size(self) -> int:
    return self.model.vocab_size

  @property
  def eos_id(self) -> int:
    return self.model.eos_id

  @property
  def pad_id(self) -> int:
    return self.model.pad_id

  @property
  def config(self):
    """The draft model's config (sharding rules read head sizes from it)."""
    return getattr(self.model, 'config', None)

  def init(self, rng: jax.Array):
    return self.model.init(rng)

  def param_axes(self):
    return self.model.param_axes()

  def encode(self, params, inputs: jax.Array) -> dict:
    return {'copy': self.copy.encode({}, inputs), 'model': self.model.encode(params, inputs)}

  def encoded_axes(self) -> dict:
    return {'copy': self.copy.encoded_axes(), 'model': self.model.encoded_axes()}

  def decoder_prompt(self, inputs: jax.Array) -> Tuple[jax.Array, jax.Array]:
    return self.model.decoder_prompt(inputs)

  def init_cache(self, batch: int, max_len: int, dtype: Any = None) -> dict:
    return {'copy': self.copy.init_cache(batch, max_len),
            'model': self.model.init_cache(batch, max_len, dtype)}

  def cache_axes(self) -> dict:
    return {'copy': self.copy.cache_axes(), 'model': self.model.cache_axes()}

  def decode(self, params, encoded: dict, cache: dict, tokens: jax.Array,
             positions: jax.Array, tree=None, return_hidden: bool = False):
    """Logits [B, K, V]: the copy's point mass where it matched, else the model's.

    Raises:
      NotImplementedError: a token tree (the copy's history is a chain), or return_hidden
        (where the copy matched, the model's hidden state is not what the logits came
        from).
    """
    if tree is not None:
      raise NotImplementedError('the hybrid draft does not decode token trees')
    if return_hidden:
      raise NotImplementedError('the hybrid draft has no single hidden state to return')
    logits, model_cache = self.model.decode(params, encoded['model'], cache['model'], tokens,
                                            positions)
    ids = base.write_cache(cache['copy']['ids'], tokens.astype(jnp.int32), positions)
    token, found = self.copy.propose(encoded['copy'], ids, positions.astype(jnp.int32),
                                     tokens.shape[1])
    point = jnp.where(jnp.arange(self.vocab_size)[None, None] == token[..., None], 0.0,
                      -1e9)  # [B, K, V]
    logits = jnp.where(found[..., None], point, logits.astype(jnp.float32))
    return logits, {'copy': {'ids': ids}, 'model': model_cache}
