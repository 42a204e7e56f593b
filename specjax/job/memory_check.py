"""A decode whose buffers cannot fit in memory is refused in one line before it compiles
(`--gamma 100000 --max-decode-len 100000` would end in an out-of-memory error or an abort
inside XLA). The estimate counts what grows with the flags: both models' caches, sized
by the model contract's `init_cache` (shapes only, nothing allocated), and the verify
call's logits and distributions, [B, G + 1, V] float32 a few times over."""
from __future__ import annotations

import os
from typing import Optional

import jax

GIB = 2 ** 30
# The [B, G + 1, V] float32 arrays a verify step holds at once (logits, p, q, residual).
BLOCK_ARRAYS = 4


def decode_bytes(target, draft, batch: int, input_width: int, max_decode_len: int,
                 gamma: int) -> int:
  """Bytes of the caches of target and draft (None: the target alone) for `batch` rows of
  W = input width + L + G + 1 positions, and of the verify step's [B, G + 1, V] arrays."""
  width = input_width + max_decode_len + gamma + 1
  total = 0
  for model in (target, draft):
    init_cache = getattr(model, 'init_cache', None)
    if init_cache is None:
      continue
    shapes = jax.eval_shape(lambda m=model: m.init_cache(batch, width))
    total += sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes))
  return total + BLOCK_ARRAYS * batch * (gamma + 1) * target.vocab_size * 4


def available_bytes(mesh=None) -> tuple:
  """(bytes, where): the memory of the devices the decode runs on, or of this host where
  the devices do not say (CPU)."""
  devices = list(mesh.devices.flat) if mesh is not None else jax.devices()[:1]
  try:
    stats = devices[0].memory_stats() or {}
  except Exception:  # pylint: disable=broad-except
    stats = {}
  if stats.get('bytes_limit'):
    return stats['bytes_limit'] * len(devices), f'{len(devices)} {devices[0].device_kind}'
  return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES'), 'this host'


def check_fits(target, draft, batch: int, input_width: int, max_decode_len: int,
               gamma: int, mesh=None, gamma_flag: Optional[str] = None) -> None:
  """Raises a one-line ValueError naming the flags to lower when the decode's buffers
  (`decode_bytes`) exceed the memory it runs on (`available_bytes`)."""
  need = decode_bytes(target, draft, batch, input_width, max_decode_len, gamma)
  have, where = available_bytes(mesh)
  if need > have:
    raise ValueError(
        f'{gamma_flag or f"--gamma {gamma}"} with --max-decode-len {max_decode_len} at '
        f'--batch-size {batch} needs about {need / GIB:,.1f} GiB for the caches and '
        f'logits, more than the {have / GIB:,.1f} GiB of {where}; lower --max-decode-len, '
        '--gamma or --batch-size')
