"""When a bench run frees the programs it compiled.

Every program XLA:CPU compiles keeps its code in memory maps of its own. A long run (every
variant, every gamma) compiles thousands, and once the process holds the kernel's limit
(`vm.max_map_count`) LLVM fails: "Unable to allocate section". `free_if_needed` clears
JAX's caches only once the process holds more than half that limit, so that shorter runs
keep what they compiled and a row that needs a program an earlier row built reuses it.
"""
from __future__ import annotations

from typing import Optional

import jax

MAPS = '/proc/self/maps'
MAP_LIMIT = '/proc/sys/vm/max_map_count'
# Past this share of the limit a run frees its compiled programs: the next row's
# compilations (a few hundred maps) fit well within the rest.
FREE_AT = 0.5


def map_count(path: str = MAPS) -> Optional[int]:
  """The memory maps this process holds, or None where the system does not say (no /proc)."""
  try:
    with open(path, 'rb') as f:
      return sum(1 for _ in f)
  except OSError:
    return None


def map_limit(path: str = MAP_LIMIT) -> Optional[int]:
  """The most memory maps a process may hold (`vm.max_map_count`), or None where unknown."""
  try:
    with open(path, encoding='ascii') as f:
      return int(f.read().strip())
  except (OSError, ValueError):
    return None


def free_if_needed(maps: str = MAPS, limit: str = MAP_LIMIT) -> bool:
  """Clears JAX's caches (`jax.clear_caches`) when this process holds more than FREE_AT of
  the memory maps it may hold.

  Args:
    maps, limit: where the count and the limit are read (Linux's /proc files).

  Returns:
    Whether it cleared them. Where either figure is unknown there is no such limit to
    meet (the failure above is Linux's) and nothing is cleared.
  """
  count, most = map_count(maps), map_limit(limit)
  if count is None or most is None or count <= FREE_AT * most:
    return False
  jax.clear_caches()
  return True
