"""The decode loop's state, its static config, and the per-row commit of new tokens.

Shape letters: B rows (slots), P decoder prompt length, L max_decode_len, G gamma, W the
sequence buffer width P + L + G + 1.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Union

import flax.struct
import jax
import jax.numpy as jnp

from specjax.core import figures
from specjax.core.rule import VerificationRule
from specjax.core.sampling import SamplingMode, SamplingParams
from specjax.core.tree import DynamicTree, TreeShape


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  """Static knobs of one compiled decode (hashable, a static jit argument).

  Attributes:
    gamma: G, draft tokens per iteration (0: the target alone, one token per call).
    max_decode_len: L, the most tokens generated per row, EOS included.
    sampling: the static sampling mode (the per-row values are in the state).
    eos_id: the end-of-sequence token (the models declare it).
    pad_id: written after EOS.
    rule: the verification rule (`specjax.core.rule.VerificationRule`: token or block,
      the draft threshold and its rule, the lenience).
    tree: a token tree the draft grows and the target verifies in one call (a static
      `specjax.core.tree.TreeShape` or a per-row `DynamicTree`), or None for a chain of G
      drafts; with a tree, G is its depth D.
  """

  gamma: int
  max_decode_len: int
  sampling: SamplingMode = SamplingMode()
  eos_id: int = 1
  pad_id: int = 0
  rule: VerificationRule = VerificationRule()
  tree: Optional[Union[TreeShape, DynamicTree]] = None

  def width(self, prompt_width: int) -> int:
    """W, the sequence buffer and cache length: the prompt, L tokens, and room for a
    last call of G + 1 (a tree: N + 1) tokens that runs past L."""
    extra = self.gamma if self.tree is None else max(self.gamma, self.tree.num_nodes)
    return prompt_width + self.max_decode_len + extra + 1


@flax.struct.dataclass
class DecodeStats:
  """Per-row counters of a decode.

  Every count is of the row's own output: nothing past its EOS or max_decode_len counts,
  so tokens_per_call = generated / target_calls exactly.

  Attributes:
    target_calls: [B] int32, target calls (loop iterations) made while the row was
      active: per-row calls. The batched model calls of a decode are
      `DecodeOutput.iterations`.
    drafted: [B] int32, draft tokens proposed (G per call).
    accepted: [B] int32, accepted draft tokens that are in the output.
    accepted_per_position: [B, G] int32, how often draft position i was accepted into the
      output.
    generated: [B] int32, tokens in the output (EOS included): the row's length.
    beta_sum: [B] float32, sum of beta = sum_x min(p, q) over the verified draft positions
      inside the output: up to the first rejection, none past EOS or max_decode_len.
    beta_count: [B] int32, how many positions beta_sum covers.
    nonfinite: [B] int32, calls in which the target's or the draft's logits for the row
      held a NaN or an infinity (float overflow, corrupt weights): the row's output is then
      not the model's; 0 in a healthy decode.
  """

  target_calls: jax.Array
  drafted: jax.Array
  accepted: jax.Array
  accepted_per_position: jax.Array
  generated: jax.Array
  beta_sum: jax.Array
  beta_count: jax.Array
  nonfinite: jax.Array

  @classmethod
  def zeros(cls, batch: int, gamma: int) -> 'DecodeStats':
    z = jnp.zeros((batch,), jnp.int32)
    return cls(target_calls=z, drafted=z, accepted=z,
               accepted_per_position=jnp.zeros((batch, gamma), jnp.int32), generated=z,
               beta_sum=jnp.zeros((batch,), jnp.float32), beta_count=z, nonfinite=z)

  @property
  def alpha(self) -> float:
    """Acceptance rate estimated from the beta sums, over the whole batch
    (`figures.decode_figures`)."""
    return float(figures.decode_figures(self).alpha)

  @property
  def acceptance_rate(self) -> float:
    """Accepted draft tokens / draft tokens the target verified inside the outputs (the
    positions beta covers), over the whole batch: alpha counted instead of estimated."""
    return float(figures.decode_figures(self).acceptance_rate)

  @property
  def tokens_per_call(self) -> float:
    """Output tokens per per-row target call, over the whole batch."""
    return float(figures.decode_figures(self).tokens_per_call)


def count_call(stats: DecodeStats, active: jax.Array, drafted: jax.Array,
               in_output: jax.Array, committed: jax.Array, beta: jax.Array,
               verified: jax.Array, bad: jax.Array) -> DecodeStats:
  """The counters after one speculative call (a chain or a tree).

  Args:
    stats: the counters so far.
    active: [B] bool, rows that were decoding.
    drafted: [B] int32 (or a number), draft tokens (tree nodes) the call verified.
    in_output: [B] int32, accepted draft tokens that are in the output.
    committed: [B] int32, tokens the call added to the output.
    beta: [B, G] float32, beta at each drafted position (depth); verified: [B, G] bool,
      the positions it counts for (on the output's own prefix).
    bad: [B] bool, rows whose logits held a NaN or an infinity.
  """
  a = active.astype(jnp.int32)
  g = beta.shape[1]
  return DecodeStats(
      target_calls=stats.target_calls + a,
      drafted=stats.drafted + a * drafted,
      accepted=stats.accepted + in_output,
      accepted_per_position=stats.accepted_per_position + (jnp.arange(g)[None] <
                                                           in_output[:, None]),
      generated=stats.generated + committed,
      beta_sum=stats.beta_sum + jnp.where(active, jnp.sum(beta * verified, axis=1), 0.0),
      beta_count=stats.beta_count + a * jnp.sum(verified, axis=1),
      nonfinite=stats.nonfinite + (active & bad))


@flax.struct.dataclass
class DecodeState:
  """What one iteration of the decode loop reads and returns: B rows (slots).

  Attributes:
    seq: [B, W] int32, the decoder sequence: prompt, then generated tokens.
    prompt_len: [B] int32, where generated tokens start in `seq`.
    pos: [B] int32, position of each row's last token, the one not yet in the caches.
    length: [B] int32, tokens generated so far.
    done: [B] bool, rows that hit EOS or max_decode_len (they keep running masked).
    target_cache: the target's cache pytree (leaves [B, ...]).
    draft_cache: the draft's cache pytree (empty for the target alone).
    keys: [B, ...] PRNG keys, one per row, derived from the seed and the row's input index:
      every random draw of a row comes from its own key, so its output does not depend on
      the batch, the slot, refill or the mesh.
    sampling: the rows' SamplingParams, [B] each.
    stats: the DecodeStats counters.
    step: scalar int32, iterations run.
  """

  seq: jax.Array
  prompt_len: jax.Array
  pos: jax.Array
  length: jax.Array
  done: jax.Array
  target_cache: Any
  draft_cache: Any
  keys: jax.Array
  sampling: SamplingParams
  stats: DecodeStats
  step: jax.Array


def gather_rows(seq: jax.Array, index: jax.Array) -> jax.Array:
  """seq[b, index[b]] for each row: [B]."""
  return jnp.take_along_axis(seq, index[:, None], axis=1)[:, 0]


def split_keys(keys: jax.Array, num: int) -> jax.Array:
  """Each row's key split in `num`: [B, ...] -> [num, B, ...]."""
  return jnp.swapaxes(jax.vmap(lambda k: jax.random.split(k, num))(keys), 0, 1)


def commit(state: DecodeState, block: jax.Array, count: jax.Array,
           cfg: LoopConfig) -> tuple:
  """Appends block[b, :count[b]] to each active row, cut at EOS and at max_decode_len.

  Args:
    state: the loop state.
    block: [B, K] int32 candidate tokens (the accepted drafts, then the extra token).
    count: [B] int32 in 1..K, how many of them the row produced.
    cfg: the static loop config.

  Returns:
    (seq, pos, length, done, active): the updated fields, and the [B] mask of rows that
    were active before this commit (for the stats).
  """
  width = block.shape[1]
  idx = jnp.arange(width)[None, :]  # [1, K]
  is_eos = (block == cfg.eos_id) & (idx < count[:, None])  # [B, K]
  has_eos = jnp.any(is_eos, axis=1)
  count = jnp.where(has_eos, jnp.argmax(is_eos, axis=1) + 1, count)
  room = cfg.max_decode_len - state.length
  count = jnp.minimum(count, room)
  active = ~state.done
  count = jnp.where(active, count, 0)

  def write(row, new, start):
    return jax.lax.dynamic_update_slice(row, new, (start,))

  seq = jax.vmap(write)(state.seq, block, state.pos + 1)  # beyond `count` is stale
  length = state.length + count
  done = state.done | (active & (has_eos | (length >= cfg.max_decode_len)))
  return seq, state.pos + count, length, done, active


def extract_output(state: DecodeState, cfg: LoopConfig) -> jax.Array:
  """The generated tokens [B, L] int32, pad after each row's length."""
  take = lambda row, start: jax.lax.dynamic_slice(row, (start,), (cfg.max_decode_len,))
  tokens = jax.vmap(take)(state.seq, state.prompt_len)  # [B, L]
  keep = jnp.arange(cfg.max_decode_len)[None, :] < state.length[:, None]
  return jnp.where(keep, tokens, cfg.pad_id)


@flax.struct.dataclass
class DecodeOutput:
  """What a decode returns.

  Attributes:
    tokens: [N, L] int32, generated tokens, EOS included, pad after it.
    lengths: [N] int32, generated tokens per row (EOS included).
    stats: per-row DecodeStats.
    iterations: scalar int32, loop iterations run (batched model calls of the target).
  """

  tokens: jax.Array
  lengths: jax.Array
  stats: DecodeStats
  iterations: Optional[jax.Array] = None
