"""A bigram proposer: the next-token distribution after the last token, from a table.

The table keeps the top-k next tokens of every token with their log-probabilities (so that
V = 32k fits: V x k entries), counted on a corpus by `python -m specjax.datastore bigram`
(`table_of`); a token never seen before another gets the table's unigram fallback row. The
draft's q is exactly that distribution (renormalised over the k tokens), so sampling stays
exact. The paper reports alpha 0.20 for a bigram draft on WMT EnDe. It drafts chains token
by token, and token trees, static or dynamic, from the table's top tokens below each node
(a row depends on its token alone, so a tree needs no mask); it has no state.

Shape letters: B rows, K tokens in this call, V vocab, k kept next tokens.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import zipfile
from typing import Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from specjax.core import proposal as proposal_lib
from specjax.core import steps, tree_draft

BUILD_COMMAND = 'python -m specjax.datastore bigram'  # what writes a table
OFF = -1e9  # the logit of a token outside a row's top-k (finite: see `specjax.proposers.copy.OFF`)


@dataclasses.dataclass(frozen=True)
class BigramDraft(proposal_lib.Stateless):
  """Next-token logits from a [V, k] table (params {'next': int32, 'logp': float32}).

  Attributes:
    vocab_size: V.
    top_k: k, next tokens kept per token.
    eos_id, pad_id: the target's.
  """

  vocab_size: int
  top_k: int = 8
  eos_id: int = 1
  pad_id: int = 0

  def init(self, rng: jax.Array) -> dict:
    """A uniform table (every row: the first k tokens, equally likely)."""
    del rng
    return {'next': jnp.tile(jnp.arange(self.top_k, dtype=jnp.int32), (self.vocab_size, 1)),
            'logp': jnp.full((self.vocab_size, self.top_k), -np.log(self.top_k), jnp.float32)}

  def param_axes(self) -> dict:
    return {'next': ('vocab', None), 'logp': ('vocab', None)}

  def encode(self, params, inputs: jax.Array) -> dict:
    del params, inputs
    return {}

  def encoded_axes(self) -> dict:
    return {}

  def logits(self, params, tokens: jax.Array) -> jax.Array:
    """[B, K, V] after each of tokens [B, K]: the table's row, OFF elsewhere."""
    nxt = jnp.take(params['next'], tokens, axis=0)  # [B, K, k]
    logp = jnp.take(params['logp'], tokens, axis=0).astype(jnp.float32)  # [B, K, k]
    hit = nxt[..., None] == jnp.arange(self.vocab_size)[None, None, None]  # [B, K, k, V]
    return jnp.max(jnp.where(hit, logp[..., None], OFF), axis=2)

  def propose(self, params, encoded, state, seq: jax.Array, pos: jax.Array, keys, sampling,
              cfg, active: Optional[jax.Array] = None) -> proposal_lib.Proposal:
    """A chain of cfg.gamma drafts, or the tree cfg.tree grown from the table."""
    del encoded
    scorer = proposal_lib.Scorer(
        lambda cache, tokens, positions, tree=None: (self.logits(params, tokens), cache))
    if cfg.tree is not None:
      return tree_draft.propose(scorer, state, seq, pos, keys, sampling, cfg)
    d = steps.draft_block(scorer, state, seq, pos, keys, sampling, cfg, active=active)
    return proposal_lib.chain(d.x, d.q, state, d.nonfinite, d.confidence)


def counts_of(documents, vocab_size: int, start_id: int = 0) -> np.ndarray:
  """Bigram counts [V, V] (row: previous token) of documents, each a list of ids (its EOS
  included) framed as the decoder reads it: start_id first."""
  counts = np.zeros((vocab_size, vocab_size), np.int64)
  for ids in documents:
    np.add.at(counts, ([start_id] + list(ids[:-1]), list(ids)), 1)
  return counts


def table_from_counts(counts: np.ndarray, top_k: int) -> dict:
  """The params of a BigramDraft from bigram counts [V, V] (row: previous token).

  Each row keeps its top_k next tokens by count, log of their share among those k (a row
  with no count gets the unigram's top_k).
  """
  counts = np.asarray(counts, np.float64)
  unigram = counts.sum(0) + 1.0
  rows = np.where(counts.sum(1, keepdims=True) > 0, counts, unigram[None])
  nxt = np.argsort(-rows, axis=1, kind='stable')[:, :top_k]
  return _params(nxt, np.take_along_axis(rows, nxt, axis=1))


def _params(nxt: np.ndarray, kept: np.ndarray) -> dict:
  """A BigramDraft's params from each row's kept next ids [V, k] and their counts [V, k]:
  the log of each one's share among the k (every kept token possible)."""
  kept = kept + 1e-3
  logp = np.log(kept / kept.sum(1, keepdims=True))
  return {'next': nxt.astype(np.int32), 'logp': logp.astype(np.float32)}


def table_of(documents, vocab_size: int, top_k: int, start_id: int = 0) -> dict:
  """`table_from_counts(counts_of(documents, ...), top_k)` without the dense [V, V] counts
  (a 32k vocabulary's are 8 GB): the bigrams that occur, counted, and a row's top_k of them.

  Args:
    documents: lists of ids below vocab_size, each with its EOS, framed with start_id first.
    vocab_size: V.
    top_k: k, next tokens kept per token.
    start_id: the token before a document's first.

  Returns:
    The params of a BigramDraft: next [V, k] int32 and logp [V, k] float32, equal to the
    dense build's (ties by id; a row with fewer than k seen next tokens fills with the
    lowest unseen ids, weight 0; a row never seen gets the unigram's top k).
  """
  pairs = [np.stack([np.concatenate([[start_id], ids[:-1]]), ids]) for ids in
           (np.asarray(d, np.int64) for d in documents) if ids.size]
  pairs = np.concatenate(pairs, axis=1) if pairs else np.zeros((2, 0), np.int64)
  if pairs.size and (pairs.min() < 0 or pairs.max() >= vocab_size):
    raise ValueError(f'token ids must be in [0, {vocab_size}), got {pairs.min()} to '
                     f'{pairs.max()}')
  unigram = np.bincount(pairs[1], minlength=vocab_size) + 1.0
  fallback = np.argsort(-unigram, kind='stable')[:top_k]
  nxt = np.tile(fallback, (vocab_size, 1))
  kept = np.tile(unigram[fallback], (vocab_size, 1))
  codes, counts = np.unique(pairs[0] * vocab_size + pairs[1], return_counts=True)
  rows, cols = codes // vocab_size, codes % vocab_size
  order = np.lexsort((cols, -counts, rows))  # by row, count down, id
  rows, cols, counts = rows[order], cols[order], counts[order]
  first = np.searchsorted(rows, rows)  # where each one's row starts
  rank = np.arange(len(rows)) - first
  seen, held = np.unique(rows, return_counts=True)
  nxt[seen], kept[seen] = 0, 0.0
  top = rank < top_k
  nxt[rows[top], rank[top]] = cols[top]
  kept[rows[top], rank[top]] = counts[top]
  for row, m in zip(seen[held < top_k], held[held < top_k]):  # the lowest unseen ids
    mine = nxt[row, :m]
    nxt[row, m:] = np.setdiff1d(np.arange(top_k + m), mine)[:top_k - m]
  return _params(nxt, kept)


def save_table(path: str, table: dict) -> None:
  """Writes a table compactly: uint16 ids (V <= 65536), float16 log-probabilities; to a
  temporary file renamed into place, so an interrupted write leaves nothing at `path`."""
  if table['next'].max() >= 1 << 16:
    raise ValueError('a bigram table stores ids as uint16; this vocabulary is too large')
  folder = os.path.dirname(os.path.abspath(path))
  with tempfile.NamedTemporaryFile(dir=folder, prefix='.bigram-', suffix='.npz',
                                   delete=False) as f:
    try:
      np.savez_compressed(f, next=np.asarray(table['next'], np.uint16),
                          logp=np.asarray(table['logp'], np.float16))
    except BaseException:
      os.unlink(f.name)
      raise
  mask = os.umask(0)  # the mode a plain open would give (a temporary file's is 0600)
  os.umask(mask)
  os.chmod(f.name, 0o666 & ~mask)
  os.replace(f.name, path)


def read_table(path: str) -> Tuple[np.ndarray, np.ndarray]:
  """The arrays of a table `save_table` wrote: next ids [V', k] int32 and their
  log-probabilities [V', k] float32, V' the ids of the vocabulary it was built with.

  Raises:
    FileNotFoundError: no file at `path`.
    ValueError: the file is not a bigram table (one line naming its build command).
  """
  fix = f'build one with {BUILD_COMMAND}'
  if os.path.isfile(path) and not zipfile.is_zipfile(path):
    raise ValueError(f'{path} is not a bigram table (not an .npz archive); {fix}')
  try:
    with np.load(path) as f:
      nxt, logp = f['next'].astype(np.int32), f['logp'].astype(np.float32)
  except FileNotFoundError:
    raise FileNotFoundError(f'bigram table {path} does not exist; {fix}') from None
  except (KeyError, ValueError, OSError, TypeError) as e:
    raise ValueError(f'{path} is not a bigram table ({" ".join(str(e).split())}); '
                     f'{fix}') from None
  if (nxt.ndim != 2 or nxt.shape != logp.shape or not nxt.size or nxt.min() < 0
      or nxt.max() >= nxt.shape[0]):
    raise ValueError(f'{path} is not a bigram table (next ids {nxt.shape}, log-probabilities '
                     f'{logp.shape}: two [V, k] arrays, the ids below V); {fix}')
  return nxt, logp


def check_fits(rows: int, vocab_size: Optional[int], path: str = 'the table') -> None:
  """Refuses a table of `rows` ids for a target of vocab_size logits (None: unknown).

  Raises:
    ValueError: rows above vocab_size (one line).
  """
  if vocab_size is not None and rows > vocab_size:
    raise ValueError(f'bigram table {path} was built with a vocabulary of {rows} ids, more '
                     f'than the target\'s {vocab_size} logits; build it with the target\'s '
                     f'vocabulary ({BUILD_COMMAND} --vocab)')


def table_for(nxt: np.ndarray, logp: np.ndarray, vocab_size: Optional[int] = None,
              eos_id: int = 1, pad_id: int = 0, path: str = 'the table'):
  """(BigramDraft, params) of the arrays `read_table` returns, for a target.

  Args:
    nxt, logp: the table [V', k].
    vocab_size: the target's V, when its logits outnumber the vocabulary's ids (T5 pads
      them): the rows of the ids no text produces repeat the start token's row.
    eos_id, pad_id: the target's.
    path: where the table was read (for the error).

  Raises:
    ValueError: V' above V: the table was built with a larger vocabulary (one line).
  """
  check_fits(nxt.shape[0], vocab_size, path)
  if vocab_size is not None and vocab_size > nxt.shape[0]:
    extra = vocab_size - nxt.shape[0]
    nxt = np.concatenate([nxt, np.repeat(nxt[pad_id:pad_id + 1], extra, 0)])
    logp = np.concatenate([logp, np.repeat(logp[pad_id:pad_id + 1], extra, 0)])
  draft = BigramDraft(vocab_size=nxt.shape[0], top_k=nxt.shape[1], eos_id=eos_id,
                      pad_id=pad_id)
  return draft, {'next': jnp.asarray(nxt), 'logp': jnp.asarray(logp)}


def load_table(path: str, vocab_size: Optional[int] = None, eos_id: int = 1, pad_id: int = 0):
  """(BigramDraft, params) from a table `save_table` wrote (`read_table`, `table_for`).

  Raises:
    FileNotFoundError: no file at `path`.
    ValueError: the file is not a bigram table, or was built with more ids than
      vocab_size.
  """
  return table_for(*read_table(path), vocab_size, eos_id, pad_id, path)
