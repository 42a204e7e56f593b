"""Copy where the output repeats the source, a draft model everywhere else.

Each draft step runs both (the model's cache stays in step) and takes, per query, the
copy's point mass where it found a match and the model's logits where it did not: q is
then exactly the distribution the token is drawn from, so sampling stays exact. It costs
one model draft step per token, as the model alone does, and accepts more where outputs
copy their inputs (summaries, code edits, quotes). It drafts chains; its state is the
model's cache.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import steps
from specjax.models import base
from specjax.proposers.copy import CopyDraft, point_mass


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

  def init_cache(self, batch: int, length: int, dtype: Any = None) -> dict:
    """The model's cache."""
    return self.model.init_cache(batch, length, dtype)

  def cache_axes(self) -> dict:
    return self.model.cache_axes()

  def prefill(self, params, encoded, state, prompt: jax.Array):
    return base.prefill(self.model, params, encoded['model'], state, prompt)

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma drafts.

    Raises:
      ValueError: a token tree (the copy's matches and the model's tree do not combine).
    """
    if cfg.tree is not None:
      raise ValueError('the copy+model draft drafts chains only; pass --draft copy, '
                       '--draft bigram or --draft NAME for a tree, or drop the tree')

    def decode(cache, tokens, positions, tree=None):
      del tree
      ids, model_cache = cache
      logits, model_cache = self.model.decode(params, encoded['model'], model_cache, tokens,
                                              positions)
      ids, token, found = self.copy.lookup(encoded['copy'], ids, tokens, positions)
      logits = jnp.where(found[..., None], point_mass(token, self.vocab_size),
                         logits.astype(jnp.float32))  # [B, K, V]
      return logits, (ids, model_cache)

    d = steps.draft_block(proposal_lib.Scorer(decode), (seq.astype(jnp.int32), state), seq,
                          pos, keys, sampling, cfg, active=active)
    return proposal_lib.chain(d.x, d.q, d.cache[1], d.nonfinite, d.confidence)

  def accepted(self, state, proposal, path, n, pos):
    """The model's cache is rolled back by position (as a chain's)."""
    del proposal, path, n, pos
    return state
