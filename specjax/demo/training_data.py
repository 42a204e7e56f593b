"""Training data as fixed-shape batches: length buckets, padding, the shift right of T5X's
decoder inputs, and a reproducible epoch order. Shape letters: B batch, S encoder length,
T decoder length.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

PAD_ID = 0


@dataclasses.dataclass(frozen=True)
class Bucket:
  """One padded batch shape: inputs [batch, input_len], targets [batch, target_len]."""

  input_len: int
  target_len: int
  batch: int


def pad_rows(rows: Sequence[Sequence[int]], length: int) -> np.ndarray:
  """Right-pads id lists (each <= length) with PAD_ID into int32 [len(rows), length]."""
  out = np.full((len(rows), length), PAD_ID, np.int32)
  for i, row in enumerate(rows):
    out[i, :len(row)] = row
  return out


def shift_right(targets: jax.Array) -> jax.Array:
  """Decoder inputs [B, T]: the targets [B, T] shifted right, starting with token 0 (T5X)."""
  return jnp.pad(targets[:, :-1], ((0, 0), (1, 0)), constant_values=PAD_ID)


def assign_buckets(inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                   buckets: Sequence[Bucket]) -> np.ndarray:
  """Index of the smallest bucket each pair fits (both sides, EOS included), -1 if none."""
  which = np.full(len(inputs), -1, np.int64)
  by_size = sorted(range(len(buckets)), key=lambda b: dataclasses.astuple(buckets[b]))
  for i, (x, y) in enumerate(zip(inputs, targets)):
    fits = [b for b in by_size if len(x) <= buckets[b].input_len and
            len(y) <= buckets[b].target_len]
    which[i] = fits[0] if fits else -1
  return which


class BucketedData:
  """Training pairs padded into fixed-shape buckets; batch k of the stream is deterministic.

  Optional soft targets (a teacher's top-K log-probs at each target position) travel
  with their pairs, for `loss_fn`'s distillation term.

  Every epoch shuffles each bucket with a seed derived from (seed, epoch), cuts it into
  full batches (the remainder waits for a later epoch's shuffle) and interleaves the
  batches of all buckets in a shuffled order, so `batch(step)` can be recomputed after a
  restart without replaying the stream. One compiled step per bucket shape.

  Attributes:
    buckets: the batch shapes.
    dropped: pairs that fit no bucket (left out of training).
    steps_per_epoch: batches per epoch.
  """

  def __init__(self, inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
               buckets: Sequence[Bucket], seed: int = 0,
               soft: Optional[Tuple[np.ndarray, np.ndarray]] = None):
    """Pads the pairs (id lists, EOS included) into `buckets`; `soft`: optional (ids,
    logp), each [N, >= longest target, K], a teacher's top-K at each target position."""
    self.buckets, self.seed = tuple(buckets), seed
    which = assign_buckets(inputs, targets, self.buckets)
    self.dropped = int(np.sum(which < 0))
    self._data = []
    for b, bucket in enumerate(self.buckets):
      idx = np.flatnonzero(which == b)
      fields = (pad_rows([inputs[i] for i in idx], bucket.input_len),  # [n, S]
                pad_rows([targets[i] for i in idx], bucket.target_len))  # [n, T]
      if soft is not None:  # [n, T, K] each
        fields += tuple(np.asarray(a)[idx, :bucket.target_len] for a in soft)
      self._data.append(fields)
    self._plans: Dict[int, List[Tuple[int, np.ndarray]]] = {}
    self.steps_per_epoch = sum(len(f[0]) // bucket.batch
                               for f, bucket in zip(self._data, self.buckets))
    if self.steps_per_epoch == 0:
      raise ValueError('no bucket holds a full batch; lower the batch sizes or add data')

  def __len__(self) -> int:
    return sum(len(f[0]) for f in self._data)

  def _plan(self, epoch: int) -> List[Tuple[int, np.ndarray]]:
    """The (bucket, row indices) of every batch of one epoch."""
    if epoch not in self._plans:
      rng = np.random.default_rng([self.seed, epoch])
      plan = []
      for b, (fields, bucket) in enumerate(zip(self._data, self.buckets)):
        perm = rng.permutation(len(fields[0]))
        plan += [(b, perm[k * bucket.batch:(k + 1) * bucket.batch])
                 for k in range(len(perm) // bucket.batch)]
      self._plans = {epoch: [plan[k] for k in rng.permutation(len(plan))]}
    return self._plans[epoch]

  def batch(self, step: int) -> Tuple[np.ndarray, ...]:
    """Batch `step`: inputs [B, S], targets [B, T] (and soft ids, logp [B, T, K])."""
    epoch, k = divmod(step, self.steps_per_epoch)
    b, rows = self._plan(epoch)[k]
    return tuple(f[rows] for f in self._data[b])


def eval_batches(inputs: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
                 buckets: Sequence[Bucket]) -> List[Tuple[np.ndarray, np.ndarray]]:
  """All pairs that fit a bucket, as full batches; the last of each is topped up with pad
  rows (which carry no loss), so every batch has a compiled shape."""
  which = assign_buckets(inputs, targets, buckets)
  out = []
  for b, bucket in enumerate(buckets):
    idx = np.flatnonzero(which == b)
    for k in range(0, len(idx), bucket.batch):
      rows, fill = list(idx[k:k + bucket.batch]), [[]] * (bucket.batch - len(idx[k:]))
      out.append((pad_rows([inputs[i] for i in rows] + fill, bucket.input_len),
                  pad_rows([targets[i] for i in rows] + fill, bucket.target_len)))
  return out
