"""One iteration of the decode loop: the proposer drafts G tokens, the target verifies
them in ONE call, accept, commit (or, for the target alone, one token per call).

`draft_step`, `draft_block` and `verify` are the functions the benchmark times as the
costs c and v(K) of the paper's formula; the loop runs exactly these. Shape letters:
B rows, G gamma, V vocab, W sequence width.
"""
from __future__ import annotations

from typing import Any, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp

from specjax.core import acceptance, sampling
from specjax.core.proposal import chain_path, shares_cache, wants_hidden
from specjax.core.sampling import SamplingParams
from specjax.core.state import (DecodeState, LoopConfig, commit, count_call, gather_rows,
                                split_keys)


class Bound(NamedTuple):
  """A model with its params and the encoding of the rows it decodes.

  Attributes:
    model: the model (the contract of `specjax.models.base.Model`), or for the draft
      side of the loop a proposer (`specjax.core.proposal.Proposer`).
    params: its params pytree.
    encoded: what `model.encode` returned for these rows ([B, ...] leaves).
  """

  model: Any
  params: Any
  encoded: Any

  def decode(self, cache, tokens: jax.Array, positions: jax.Array, tree=None,
             hidden: bool = False):
    """model.decode of tokens [B, K] at positions [B] (or as nodes of `tree`, a
    `specjax.models.base.Tree`): (logits [B, K, V], cache), and with `hidden` the final
    hidden states [B, K, D] after them."""
    kw = {'tree': tree} if tree is not None else {}
    if hidden:
      kw['return_hidden'] = True
    return self.model.decode(self.params, self.encoded, cache, tokens, positions, **kw)

  def propose(self, state, seq: jax.Array, pos: jax.Array, keys, params, cfg: LoopConfig,
              active: Optional[jax.Array] = None):
    """A proposer's `propose` (`specjax.core.proposal.Proposer`): a `Proposal`."""
    return self.model.propose(self.params, self.encoded, state, seq, pos, keys, params, cfg,
                              active)

  def accepted(self, state, proposal, path: jax.Array, n: jax.Array, pos: jax.Array,
               hidden: Optional[jax.Array] = None, target_tokens: Optional[jax.Array] = None):
    """A proposer's `accepted`: its state once path [B, D] (n [B] nodes) was kept; a
    proposer that reads the target's hidden states (`proposal.wants_hidden`) also gets
    hidden [B, D+1, H], the target's at the root and each kept node (index n[b] the
    last kept); one that learns from the target's verdicts (`proposal.wants_scores`)
    target_tokens [B, M], the target's argmax after every tree slot."""
    kw = {} if hidden is None else {'hidden': hidden}
    if target_tokens is not None:
      kw['target_tokens'] = target_tokens
    return self.model.accepted(state, proposal, path, n, pos, **kw)


def pick(logits: jax.Array, keys: Optional[jax.Array], params: SamplingParams,
         cfg: LoopConfig) -> Tuple[jax.Array, Optional[jax.Array]]:
  """Chooses one token per row from logits [B, V]: x [B] int32, and q [B, V], the warped
  distribution it was drawn from (None when every row is greedy: an argmax needs neither
  it nor a key)."""
  if cfg.sampling.greedy:
    return sampling.argmax(logits), None
  q = sampling.warp(logits, params, cfg.sampling)
  return sampling.sample(keys, q), q


def nonfinite(logits: jax.Array) -> jax.Array:
  """[B] bool: rows of logits [B, ..., V] holding a NaN or a +inf, or a position whose
  every logit is -inf (-inf alone is a mask, not an error)."""
  flat = logits.reshape(logits.shape[0], -1, logits.shape[-1])
  broken = jnp.isnan(flat) | (flat == jnp.inf)
  return jnp.any(broken, axis=(1, 2)) | jnp.any(jnp.all(flat == -jnp.inf, axis=-1), axis=1)


class Drafted(NamedTuple):
  """What the draft proposes in one call or one block.

  Attributes:
    x: [B] int32 (a step) or [B, G] (a block): the draft tokens.
    q: [B, V] or [B, G, V] float32: the distributions x was drawn from (None when greedy).
    cache: the draft's cache after the call.
    nonfinite: [B] bool, rows whose draft logits held a NaN or an infinity.
    confidence: [B] float32, the draft's largest probability (a step), or drafted: [B]
      int32, how many of the G tokens each row proposes (a block; G unless a confidence
      threshold stopped it earlier).
  """

  x: jax.Array
  q: Optional[jax.Array]
  cache: Any
  nonfinite: jax.Array
  confidence: jax.Array


def draft_step(draft: Bound, cache, token: jax.Array, pos: jax.Array, keys, params,
               cfg: LoopConfig) -> Drafted:
  """One draft step: token [B] at positions pos [B] -> the next draft token of each row."""
  logits, cache = draft.decode(cache, token[:, None], pos)
  return _drafted(logits[:, 0], keys, params, cfg, cache)


def _drafted(logits: jax.Array, keys, params, cfg: LoopConfig, cache) -> Drafted:
  x, q = pick(logits, keys, params, cfg)
  if q is None:  # the largest probability of the draft's own softmax
    logits = logits.astype(jnp.float32)
    confidence = jnp.exp(jnp.max(logits, -1) - jax.nn.logsumexp(logits, -1))
  else:
    confidence = jnp.max(q, axis=-1)
  return Drafted(x, q, cache, nonfinite(logits), confidence)


def first_call(draft: Bound, cache, seq: jax.Array, pos: jax.Array, catch_up: bool = True):
  """The draft's first call of a proposal: (the logits after each row's last token [B, V],
  the cache).

  With catch_up, two tokens at positions pos - 1 and pos, so that the draft's cache catches
  up after a fully accepted block, whose last draft token it never saw. Without, the last
  token alone: a draft that drafts in the target's cache (`proposal.shares_cache`), which
  holds every committed token already, and which it must not write below pos.
  """
  if not catch_up:
    logits, cache = draft.decode(cache, gather_rows(seq, pos)[:, None], pos)
    return logits[:, 0], cache
  start = jnp.maximum(pos - 1, 0)  # [B]
  pair = jnp.stack([gather_rows(seq, start), gather_rows(seq, start + 1)], axis=1)  # [B, 2]
  logits, cache = draft.decode(cache, pair, start)
  return jnp.take_along_axis(logits, (pos - start)[:, None, None], axis=1)[:, 0], cache


def draft_block(draft: Bound, cache, seq: jax.Array, pos: jax.Array,
                keys: Optional[jax.Array], params: SamplingParams, cfg: LoopConfig,
                active: Optional[jax.Array] = None, catch_up: bool = True) -> Drafted:
  """Runs G draft steps: x [B, G], q [B, G, V] (None when greedy), the cache, the rows whose
  logits were not finite, and how many tokens each row proposes.

  The first step is `first_call` (with catch_up, the pair at pos - 1 and pos). With
  cfg.rule.draft_threshold > 0 a row stops proposing at its first token whose confidence
  is under the threshold (the draft's largest probability for the token, or with
  cfg.rule.threshold_rule 'cumulative' its product over the row's proposals so far; the
  first token is proposed always), and the steps stop once every row has: the verify call
  then scores as many positions as
  the longest proposal (`verify_proposed`), each row uses its own count. The stopping rule
  reads the draft only, so the output stays exact.

  Args:
    draft: the draft and its rows' encoding.
    cache: the draft's cache.
    seq: [B, W] the rows' sequences; pos: [B] the position of each row's last token.
    keys: [G, B, ...] one key per step and row (None when greedy).
    params: the rows' sampling settings.
    cfg: the static loop config.
    active: [B] bool, the rows still decoding (default all): with a threshold, the steps
      stop once no ACTIVE row drafts on.
    catch_up: `first_call`'s.
  """
  greedy, gamma = cfg.sampling.greedy, cfg.gamma
  logits, cache = first_call(draft, cache, seq, pos, catch_up)
  first = _drafted(logits, None if greedy else keys[0], params, cfg, cache)
  all_rows = jnp.full(pos.shape, gamma, jnp.int32)
  if gamma == 1:
    return Drafted(first.x[:, None], None if greedy else first.q[:, None], first.cache,
                   first.nonfinite, all_rows)
  if cfg.rule.draft_threshold > 0.0:
    return _draft_until_unsure(draft, first, pos, keys, params, cfg, active)

  def step(carry, step_keys):
    cache, token, p, bad = carry
    d = draft_step(draft, cache, token, p, step_keys, params, cfg)
    return (d.cache, d.x, p + 1, bad | d.nonfinite), (d.x, d.q)

  (cache, _, _, bad), (xs, qs) = jax.lax.scan(
      step, (first.cache, first.x, pos + 1, first.nonfinite), None if greedy else keys[1:],
      length=gamma - 1)
  x = jnp.concatenate([first.x[:, None], xs.T], axis=1)  # [B, G]
  q = None if greedy else jnp.concatenate([first.q[:, None], jnp.swapaxes(qs, 0, 1)], axis=1)
  return Drafted(x, q, cache, bad, all_rows)


def _draft_until_unsure(draft: Bound, first: Drafted, pos, keys, params,
                        cfg: LoopConfig, active: Optional[jax.Array]) -> Drafted:
  """Steps 2..G of `draft_block` with a confidence threshold, in a while loop that ends
  once no row drafts on."""
  greedy, gamma, batch = cfg.sampling.greedy, cfg.gamma, pos.shape[0]
  x = jnp.zeros((batch, gamma), jnp.int32).at[:, 0].set(first.x)
  q = None if greedy else jnp.zeros((batch, gamma) + first.q.shape[1:]).at[:, 0].set(first.q)
  cumulative = cfg.rule.threshold_rule == 'cumulative'
  confidence = first.confidence  # [B]: the token's own, or the product so far
  sure = confidence >= cfg.rule.draft_threshold  # [B]: still drafting (not finished rows)
  sure = sure if active is None else sure & active
  drafted = jnp.ones((batch,), jnp.int32)

  def cond(c):
    return (c[0] < gamma) & jnp.any(c[6])

  def body(c):
    i, cache, token, bad, x, q, sure, drafted, confidence = c
    d = draft_step(draft, cache, token, pos + i, None if greedy else keys[i], params, cfg)
    x = x.at[:, i].set(d.x)
    q = None if greedy else q.at[:, i].set(d.q)
    confidence = confidence * d.confidence if cumulative else d.confidence
    sure = sure & (confidence >= cfg.rule.draft_threshold)
    return (i + 1, d.cache, d.x, bad | d.nonfinite, x, q, sure, drafted + sure,
            confidence)

  carry = (jnp.int32(1), first.cache, first.x, first.nonfinite, x, q, sure, drafted,
           confidence)
  _, cache, _, bad, x, q, _, drafted, _ = jax.lax.while_loop(cond, body, carry)
  return Drafted(x, q, cache, bad, drafted)


def verify(target: Bound, cache, last: jax.Array, x: jax.Array, pos: jax.Array,
           hidden: bool = False):
  """The ONE target call of an iteration: [last, x_1..x_G] at pos -> logits [B, G+1, V]
  and the cache (and with `hidden` the hidden states [B, G+1, D])."""
  return target.decode(cache, jnp.concatenate([last[:, None], x], axis=1), pos,
                       hidden=hidden)


def verify_proposed(target: Bound, cache, last: jax.Array, x: jax.Array, pos: jax.Array,
                    longest: jax.Array):
  """`verify` of only the first `longest` drafts: [last, x_1..x_k] at pos, k = longest.

  With a confidence threshold the rows propose fewer than G tokens, and where a verify of
  K tokens costs more the larger K (a CPU, a GPU or a TPU at a large batch), scoring the
  G + 1 positions would waste the difference. One branch per k (all of 1..G compiled, the
  one taken runs); the cache beyond what a call writes is never read (queries see keys
  at positions <= their own), so skipping the last positions changes no output.

  Args:
    target: the target and its rows' encoding.
    cache: the target's cache.
    last: [B] each row's last token; x: [B, G] the drafts; pos: [B] where `last` sits.
    longest: scalar int32 in 1..G, the most drafts any active row proposes.

  Returns:
    (logits [B, G+1, V], zero past position k, and the target's cache).
  """
  gamma = x.shape[1]

  def upto(k):
    def run(cache):
      logits, cache = verify(target, cache, last, x[:, :k], pos)
      return jnp.pad(logits, ((0, 0), (0, gamma - k), (0, 0))), cache
    return run

  return jax.lax.switch(jnp.clip(longest, 1, gamma) - 1,
                        [upto(k) for k in range(1, gamma + 1)], cache)


def propose(draft: Bound, state: DecodeState, keys, cfg: LoopConfig):
  """The proposal below each row's last token, and the target's cache that the verify
  call reads: the state's, or the proposal's for a draft that drafts in it
  (`specjax.core.proposal.shares_cache`)."""
  shared = shares_cache(draft.model)
  proposal = draft.propose(state.target_cache if shared else state.draft_cache, state.seq,
                           state.pos, keys, state.sampling, cfg, active=~state.done)
  return proposal, proposal.state if shared else state.target_cache


def accepted(draft: Bound, state: DecodeState, proposal, path: jax.Array, n: jax.Array,
             hidden: Optional[jax.Array] = None, target_tokens: Optional[jax.Array] = None):
  """The draft's state once the target kept path [B, D] (n [B] nodes) below the roots at
  state.pos: `Bound.accepted`, or none for a draft in the target's cache."""
  if shares_cache(draft.model):
    return state.draft_cache
  return draft.accepted(proposal.state, proposal, path, n, state.pos, hidden=hidden,
                        target_tokens=target_tokens)


def speculative_step(target: Bound, draft: Bound, cfg: LoopConfig,
                     state: DecodeState) -> DecodeState:
  """One iteration: draft G tokens, verify them in ONE target call, accept, commit."""
  g = cfg.gamma
  if cfg.sampling.greedy:  # no randomness: the keys are passed through untouched
    keys, draft_keys, accept_keys = state.keys, None, None
  else:
    split = split_keys(state.keys, g + 2)  # [G+2, B, ...]
    keys, draft_keys, accept_keys = split[0], split[1:g + 1], split[g + 1]
  d, target_cache = propose(draft, state, draft_keys, cfg)
  x, drafted = d.tokens, d.drafted  # [B, G], [B]: each row's own count of proposals
  last = gather_rows(state.seq, state.pos)
  hidden = None
  if cfg.rule.draft_threshold > 0.0 and g > 1:  # score only as far as the longest proposal
    if wants_hidden(draft.model):
      raise ValueError('a draft that reads the target\'s hidden states drafts its heads\' '
                       'tokens whole: drop the draft threshold')
    longest = jnp.max(drafted)  # finished rows propose 1
    logits, target_cache = verify_proposed(target, target_cache, last, x, state.pos,
                                           longest)  # [B, G+1, V]
  elif wants_hidden(draft.model):
    logits, target_cache, hidden = verify(target, target_cache, last, x, state.pos,
                                          hidden=True)  # [B, G+1, D]
  else:
    logits, target_cache = verify(target, target_cache, last, x, state.pos)
  if cfg.sampling.greedy:
    result = acceptance.accept_greedy(sampling.argmax(logits), x, drafted)
  else:
    p = sampling.warp(logits, state.sampling, cfg.sampling)  # [B, G+1, V]
    if cfg.rule.typical is not None:  # lossy, where the rule says so
      result = acceptance.accept_typical(p, d.q, x, accept_keys, *cfg.rule.typical, drafted)
    elif cfg.rule.verification == 'block':
      result = acceptance.accept_block(p, d.q, x, accept_keys, drafted)
    else:
      result = acceptance.accept(p, d.q, x, accept_keys, cfg.rule.lenience, drafted)
  block = jnp.concatenate([x, x[:, :1]], axis=1)  # [B, G+1]
  block = jnp.where(jnp.arange(g + 1)[None] == result.n[:, None], result.y[:, None], block)
  seq, pos, length, done, active = commit(state, block, result.n + 1, cfg)
  # hidden [B, G+1, H]: the root's and the drafts', in order; the kept ones are 0 .. n.
  draft_cache = accepted(draft, state, d, chain_path(result.n, g), result.n, hidden)
  committed = pos - state.pos  # [B] tokens this call added to the output (0 if inactive)
  in_output = jnp.minimum(result.n, committed)  # accepted drafts that are in the output
  # beta counts where the target checked a draft token on the output's own prefix: up to the
  # first rejection, and not past the output's end (after EOS or max_decode_len nothing is
  # generated, so a mismatch there says nothing about alpha).
  verified = jnp.arange(g)[None] < jnp.minimum(jnp.minimum(result.n + 1, committed),
                                                drafted)[:, None]
  stats = count_call(state.stats, active, drafted, in_output, committed, result.beta,
                     verified, d.nonfinite | nonfinite(logits))
  return state.replace(seq=seq, pos=pos, length=length, done=done, keys=keys, stats=stats,
                       target_cache=target_cache, draft_cache=draft_cache,
                       step=state.step + 1)


def autoregressive_step(target: Bound, cfg: LoopConfig, state: DecodeState) -> DecodeState:
  """One target step of one token per row."""
  last = gather_rows(state.seq, state.pos)  # [B]
  if cfg.sampling.greedy:
    keys, draw_keys = state.keys, None
  else:
    keys, draw_keys = split_keys(state.keys, 2)
  d = draft_step(target, state.target_cache, last, state.pos, draw_keys, state.sampling, cfg)
  seq, pos, length, done, active = commit(state, d.x[:, None], jnp.ones_like(d.x), cfg)
  s = state.stats
  stats = s.replace(target_calls=s.target_calls + active, generated=s.generated + active,
                    nonfinite=s.nonfinite + (active & d.nonfinite))
  return state.replace(seq=seq, pos=pos, length=length, done=done, keys=keys, stats=stats,
                       target_cache=d.cache, step=state.step + 1)


def step(target: Bound, draft: Optional[Bound], cfg: LoopConfig,
         state: DecodeState) -> DecodeState:
  """The loop body: speculative when cfg.gamma >= 1, else the target alone."""
  if cfg.gamma:
    return speculative_step(target, draft, cfg, state)
  return autoregressive_step(target, cfg, state)
