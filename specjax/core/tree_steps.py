"""One iteration with a token tree: the proposer proposes a tree
(`specjax.core.proposal`), the target scores the root and every node in ONE call with a
tree mask, the exact tree rule (`specjax.core.tree_accept`) keeps a root path plus one
token of the target's, the target's cache gets the accepted path moved into place
(`specjax.core.tree.compact`), and the proposer is told what was kept.

Shape letters: B rows, N nodes, M = N + 1 tree slots, D depth, V vocab.
"""
from __future__ import annotations

import jax.numpy as jnp

from specjax.core import sampling, tree, tree_accept, tree_draft
from specjax.core.proposal import Proposal, wants_hidden, wants_scores
from specjax.core.state import (DecodeState, LoopConfig, commit, count_call, gather_rows,
                                split_keys)
from specjax.core.steps import Bound, accepted, nonfinite, propose


def verify_tree(target: Bound, cache, last, proposal: Proposal, pos, hidden: bool = False):
  """The ONE target call of an iteration: the root and the N nodes, each seeing its
  ancestors: (logits [B, M, V], the target's cache), and with `hidden` the hidden states
  [B, M, D]."""
  fed = jnp.concatenate([last[:, None], proposal.tokens], axis=1)  # [B, M]
  call = tree_draft.tree_call(pos, tree.slot_depths(proposal.depth), proposal.visible, 0,
                              fed.shape[1])
  return target.decode(cache, fed, pos, tree=call, hidden=hidden)


def tree_step(target: Bound, draft: Bound, cfg: LoopConfig,
              state: DecodeState) -> DecodeState:
  """One iteration: propose a tree, verify it in ONE target call, accept a path, commit."""
  depth, num = cfg.tree.depth_count, cfg.tree.num_nodes
  if cfg.sampling.greedy:
    keys, draft_keys, accept_keys = state.keys, None, None
  else:
    split = split_keys(state.keys, depth + 2)  # [D+2, B, ...]
    keys, draft_keys, accept_keys = split[0], split[1:depth + 1], split[depth + 1]
  proposal, target_cache = propose(draft, state, draft_keys, cfg)
  last = gather_rows(state.seq, state.pos)
  hidden = None
  if wants_hidden(draft.model):
    logits, target_cache, hidden = verify_tree(target, target_cache, last, proposal,
                                               state.pos, hidden=True)  # [B, M, D]
  else:
    logits, target_cache = verify_tree(target, target_cache, last, proposal, state.pos)
  if cfg.sampling.greedy:
    result = tree_accept.accept_tree_greedy(sampling.argmax(logits), proposal.tokens,
                                            proposal.parents, proposal.depth, depth,
                                            proposal.visible)
  elif cfg.rule.typical is not None:  # typical acceptance: lossy, where the rule says so
    p = sampling.warp(logits, state.sampling, cfg.sampling)  # [B, M, V]
    result = tree_accept.accept_tree_typical(p, proposal.q, proposal.tokens,
                                             proposal.parents, proposal.depth, accept_keys,
                                             depth, *cfg.rule.typical, proposal.visible)
  else:
    p = sampling.warp(logits, state.sampling, cfg.sampling)  # [B, M, V]
    result = tree_accept.accept_tree(p, proposal.q, proposal.tokens, proposal.parents,
                                     proposal.depth, accept_keys, depth, cfg.rule.lenience,
                                     proposal.visible)
  target_cache = tree.compact(target_cache, target.model.cache_axes(), state.pos,
                              result.path, result.n, num)
  if hidden is not None:  # the root's (slot 0) and each kept node's, in path order
    kept = jnp.concatenate([jnp.zeros_like(result.path[:, :1]),
                            jnp.maximum(result.path, -1) + 1], axis=1)  # [B, D+1]
    hidden = jnp.take_along_axis(hidden, kept[:, :, None], axis=1)  # [B, D+1, H]
  verdicts = sampling.argmax(logits) if wants_scores(draft.model) else None  # [B, M]
  draft_cache = accepted(draft, state, proposal, result.path, result.n, hidden, verdicts)
  block = tree_accept.accepted_tokens(proposal.tokens, result.path, result.y,
                                      result.n)  # [B, D+1]
  seq, pos, length, done, active = commit(state, block, result.n + 1, cfg)
  committed = pos - state.pos
  in_output = jnp.minimum(result.n, committed)
  verified = result.reached & (jnp.arange(depth)[None] < committed[:, None])
  stats = count_call(state.stats, active, num, in_output, committed, result.beta, verified,
                     proposal.nonfinite | nonfinite(logits))
  return state.replace(seq=seq, pos=pos, length=length, done=done, keys=keys, stats=stats,
                       target_cache=target_cache, draft_cache=draft_cache,
                       step=state.step + 1)
