"""Layer-skip self-speculation: the target's own first m decoder layers draft for it.

The draft is the target cut after decoder layer m, closed by the target's final norm and
output projection: no params of its own. It reads the target's params and the target's
encoding (the encoder output and the cross-attention K/V of layers 0 .. m-1, computed once
per input for the target), so a draft step costs m of the target's L decoder layers and
nothing runs twice per input. It keeps no cache either: it drafts in the target's own
(`specjax.core.proposal.shares_cache`), whose first m layers already hold the K/V of every
committed token, computed by the target's verify calls; its own K/V of the draft tokens
go where the next verify call writes the target's. So the draft needs no memory of its
own and its first call of a proposal is one token, not the two a draft model's cache needs
to catch up. It drafts chains and static or dynamic trees as a draft model does
(`specjax.core.model_proposer`).

With a trained early exit (`python -m specjax.train_draft --kind layerskip`), the draft
closes its m layers with its own copy of the final norm and of the (untied) output
projection instead of the target's: those are its only params, and every other weight it
reads is still the target's.

The verify is the target's as always, so the output is the target's own (greedy) or follows
the target's distribution (sampled); m only trades the draft's cost against its acceptance.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import jax

from specjax.core import model_proposer
from specjax.core.proposal import Stateless
from specjax.proposers.of_target import OfTarget


# Where a target's exit sits in its params tree: the final norm and the output projection
# (absent when the logits reuse the embedding), for T5 and for the decoder-only models.
EXITS = (('decoder', 'decoder_norm'), ('decoder', 'logits_dense'), ('final_norm',),
         ('lm_head',))


def exit_params(tree: dict) -> dict:
  """The exit's part of a target's params (or param axes) tree: the subtrees at EXITS
  that it has, in the same nesting."""
  out = {}
  for path in EXITS:
    node = tree
    for key in path:
      node = node.get(key) if isinstance(node, Mapping) else None
    if node is not None:
      parent = out
      for key in path[:-1]:
        parent = parent.setdefault(key, {})
      parent[path[-1]] = node
  return out


def overlay(base: dict, top: dict) -> dict:
  """`base` with the leaves of `top` (a tree of the same nesting) in place of its own, each
  in the dtype of the leaf it replaces (a bfloat16 exit over float32 params is cast once
  here, not promoted in every draft step's matmul)."""
  if not top:
    return base
  out = dict(base)
  for key, value in top.items():
    out[key] = (overlay(base[key], value) if isinstance(value, Mapping) else
                value.astype(base[key].dtype))
  return out


def layer_count(model) -> int:
  """L, the decoder layers of a T5 or a decoder-only model."""
  cfg = model.config
  return cfg.num_decoder_layers if hasattr(cfg, 'num_decoder_layers') else cfg.num_layers


def truncated(model, layers: int):
  """`model` with its first `layers` decoder layers only (its params tree unchanged: the
  layers past them are never read).

  Raises:
    ValueError: layers outside 1 .. L - 1 (names the range).
  """
  total = layer_count(model)
  if not 1 <= layers < total:
    raise ValueError(f'layerskip:{layers} needs 1 <= M < {total}, the target\'s decoder '
                     f'layers; pass layerskip:M with M in 1..{total - 1}')
  field = 'num_decoder_layers' if hasattr(model.config, 'num_decoder_layers') else 'num_layers'
  changes = {field: layers}
  if hasattr(model.config, 'name'):
    changes['name'] = f'{model.config.name or "target"}_layerskip{layers}'
  return dataclasses.replace(model, config=dataclasses.replace(model.config, **changes))


@dataclasses.dataclass(frozen=True)
class LayerSkip(Stateless, OfTarget):
  """The proposer of the target's first `layers` decoder layers.

  It reads the target (`reads_target`): the loop hands it params and encoding as
  {'target': the target's, 'own': its own ({}, or a trained exit: `exit_params`' part of a
  params tree, read in place of the target's)}, and as its state the target's cache
  (`shares_cache`): it keeps none of its own (`Stateless`).

  Attributes:
    target: the target model (the contract of `specjax.models.base.Model`).
    layers: M, 1 <= M < L.
    trained_exit: whether its own params hold a trained exit.
  """

  target: Any
  layers: int
  trained_exit: bool = False
  shares_cache = True

  def __post_init__(self):
    truncated(self.target, self.layers)  # the range check, at construction

  @property
  def model(self):
    """The target cut after layer M."""
    return truncated(self.target, self.layers)

  @property
  def config(self):
    """The cut model's config (sharding rules read head sizes from it)."""
    return self.model.config

  def init(self, rng: jax.Array) -> dict:
    """{} without a trained exit; else a fresh target's exit."""
    return exit_params(self.target.init(rng)) if self.trained_exit else {}

  def param_axes(self) -> dict:
    return exit_params(self.target.param_axes()) if self.trained_exit else {}

  def propose(self, params, encoded, state, seq, pos, keys, sampling, cfg, active=None):
    """The cut model's proposal, drafted in `state`, the target's cache (its first M
    layers'); the proposal's state is the target's cache with the draft's K/V at pos and
    after."""
    head = first_layers(state, self.model.cache_axes())
    proposal = model_proposer.ModelProposer(self.model, catch_up=False).propose(
        _params(params), encoded['target'], head, seq, pos, keys, sampling, cfg,
        active=active)
    return proposal._replace(state=with_first_layers(state, proposal.state))


def first_layers(cache, axes):
  """The part of a target's cache (a dict of layers, or a list) that a cut model's cache
  axes `axes` name: the same keys, or the first len(axes) entries."""
  if isinstance(axes, Mapping):
    return {key: cache[key] for key in axes}
  return list(cache[:len(axes)])


def with_first_layers(cache, head):
  """The target's cache with `first_layers`' part replaced by `head`."""
  if isinstance(head, Mapping):
    return {**cache, **head}
  return list(head) + list(cache[len(head):])


def _params(params: dict) -> dict:
  """The params the cut model drafts with: the target's, its own exit in place."""
  return overlay(params['target'], params.get('own') or {})
