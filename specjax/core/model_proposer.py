"""A draft model as a proposer: chains (`specjax.core.steps.draft_block`) and token trees
(`specjax.core.tree_draft`) from its own logits, its KV cache the proposer's state.

A chain needs no word of what was accepted: the cache is rolled back by position (the next
catch-up call overwrites what was rejected). A tree's nodes sit in the cache's scratch
slots after the root, so the accepted path is moved into place (`specjax.core.tree.compact`).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax
import jax.numpy as jnp

from specjax.core import proposal as proposal_lib
from specjax.core import steps, tree, tree_draft
from specjax.models import base


@dataclasses.dataclass(frozen=True)
class ModelProposer:
  """A draft model (the contract of `specjax.models.base.Model`) as a proposer.

  Every attribute of the model (its config, vocab_size, init, encode, init_cache, ...) is
  the proposer's: its params, encoding and cache are the model's own.

  Attributes:
    model: the draft model.
    catch_up: whether a proposal's first call feeds the last two committed tokens
      (`specjax.core.steps.first_call`); False for a model that drafts in the target's
      cache (`specjax.core.proposal.shares_cache`).
  """

  model: Any
  catch_up: bool = True

  def __getattr__(self, name: str):
    if name.startswith('__'):  # copy and pickle probe dunders before __init__ has run
      raise AttributeError(name)
    return getattr(self.model, name)

  def prefill(self, params, encoded, state, prompt: jax.Array):
    return base.prefill(self.model, params, encoded, state, prompt)

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma drafts, or the tree cfg.tree (see the module docstring)."""
    bound = steps.Bound(self.model, params, encoded)
    if cfg.tree is not None:
      return tree_draft.propose(bound, state, seq, pos, keys, sampling, cfg, self.catch_up)
    d = steps.draft_block(bound, state, seq, pos, keys, sampling, cfg, active=active,
                          catch_up=self.catch_up)
    return proposal_lib.chain(d.x, d.q, d.cache, d.nonfinite, d.confidence)

  def accepted(self, state, proposal: proposal_lib.Proposal, path: jax.Array,
               n: jax.Array, pos: jax.Array):
    """A chain's cache as it is; a tree's with the kept path [B, D] in place."""
    if proposal.slots is None:
      return state
    own = jnp.where(path >= 0, jnp.take_along_axis(proposal.slots, jnp.maximum(path, 0),
                                                   axis=1), -1)  # [B, D]
    return tree.compact(state, self.model.cache_axes(), pos, own, n, proposal.scratch)


def as_proposer(draft):
  """A proposer for `draft`: itself when it is one (it has `propose`), else a model's
  ModelProposer (None stays None: the target alone)."""
  if draft is None or hasattr(draft, 'propose'):
    return draft
  return ModelProposer(draft)
