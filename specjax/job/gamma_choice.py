"""`--gamma auto` made reproducible: a rerun of a command writes the same file.

A sampled output depends on gamma (each iteration draws its own randomness), and
calibration times the machine, so two runs of one command could pick two gammas and write
two outputs. Here a sampled run's choice is a function of its setting:

- resuming an output, the run reuses the gamma the run that wrote it chose (its sidecar
  records it), so the resumed file is the file an uninterrupted run writes;
- otherwise the first run of a setting calibrates and keeps its choice in a cache
  (`cache_file()`), keyed by everything the choice depends on: the run's fingerprint but
  its seed, and the batch, refill, padding, mesh and devices; later runs of that setting
  reuse it, so a rerun of the same command writes the same file.

Greedy runs are cached alike: their predictions do not depend on gamma, but each record's
counters (target calls, accepted drafts) do.

`--tree auto`'s choice (a chain's gamma, a tree, or the target alone) is kept and reused
the same way, under a key that adds its candidates (`DecodeConfig.tree_auto_setting`).
"""
from __future__ import annotations

import datetime
import hashlib
import json
import os
from typing import Optional

import jax

from specjax import reports

CACHE_ENV = 'SPECJAX_CACHE_DIR'
CACHE_NAME = 'gamma_auto.json'


def cache_dir() -> str:
  """The user's specjax cache folder: $SPECJAX_CACHE_DIR, else $XDG_CACHE_HOME/specjax or
  ~/.cache/specjax (it holds this cache and the compile cache, `specjax.compile_cache`)."""
  return os.environ.get(CACHE_ENV) or os.path.join(
      os.environ.get('XDG_CACHE_HOME') or os.path.join(os.path.expanduser('~'), '.cache'),
      'specjax')


def cache_file() -> str:
  """$SPECJAX_CACHE_DIR/gamma_auto.json, else under $XDG_CACHE_HOME/specjax or
  ~/.cache/specjax (`cache_dir`)."""
  return os.path.join(cache_dir(), CACHE_NAME)


def setting_key(fingerprint: dict, job) -> str:
  """sha256 of what a run's gamma choice depends on: the fingerprint without the
  seed and gamma, the batch, refill, padding and mesh, and the devices it runs on; with
  --tree auto, its candidates too (`DecodeConfig.tree_auto_setting`)."""
  devices = jax.devices()
  setting = {k: v for k, v in fingerprint.items() if k != 'seed and gamma'}
  auto = getattr(job, 'tree_auto_setting', lambda: None)()
  if auto is not None:  # a chain's key stays as it was
    setting['tree auto'] = auto
  setting.update(batch=[job.batch_size, job.refill, job.pad_inputs], mesh=job.mesh,
                 devices=[jax.default_backend(), devices[0].device_kind, len(devices)])
  return hashlib.sha256(json.dumps(setting, sort_keys=True, default=repr).encode()
                        ).hexdigest()


def _read_cache() -> dict:
  try:
    with open(cache_file(), encoding='utf-8') as f:
      data = json.load(f)
  except (OSError, ValueError):
    return {}
  return data if isinstance(data, dict) else {}


def cached(key: str) -> Optional[dict]:
  """The cached choice for `key`: {'gamma', 'reason', 'calibration', 'date'} (and with
  --tree auto 'tree': the chosen tree as `DecodeConfig.tree_json` names it, None for a
  chain or the target alone), or None."""
  entry = _read_cache().get(key)
  if isinstance(entry, dict) and isinstance(entry.get('gamma'), int):
    return entry
  return None


def remember(key: str, gamma: int, reason: str, calibration: dict,
             tree: Optional[dict] = None, tree_auto: bool = False,
             draft: Optional[str] = None) -> Optional[str]:
  """Keeps a choice in the cache (with `tree_auto`, its tree too: None for a chain or the
  target alone; with --draft auto, the `draft` chosen); returns the cache file, or None
  when it cannot be written (the run goes on; its rerun then calibrates again)."""
  data = _read_cache()
  data[key] = {'gamma': gamma, 'reason': reason, 'calibration': calibration,
               'date': datetime.date.today().isoformat(), **({'tree': tree} if tree_auto
                                                            else {}),
               **({'draft': draft} if draft is not None else {})}
  try:
    reports.write_json(cache_file(), data)
  except OSError:
    return None
  return cache_file()


def resumed_gamma(sidecar_fingerprint: Optional[dict], fingerprint: dict) -> Optional[int]:
  """The gamma of the run being resumed: the one its sidecar records, when everything but
  the gamma is this run's; else None."""
  if not sidecar_fingerprint:
    return None
  stored = sidecar_fingerprint.get('seed and gamma')
  mine = fingerprint.get('seed and gamma')
  others = set(sidecar_fingerprint) | set(fingerprint)
  same = all(sidecar_fingerprint.get(k) == fingerprint.get(k) for k in others
             if k != 'seed and gamma')
  if (same and isinstance(stored, list) and isinstance(mine, list) and len(stored) == 2
      and stored[0] == mine[0] and isinstance(stored[1], int)):
    return stored[1]
  return None


def resumed_choice(sidecar_fingerprint: Optional[dict], fingerprint: dict) -> Optional[tuple]:
  """With --tree auto: (gamma, tree) of the sampled run being resumed, the tree as its
  sidecar records it (None: a chain), when everything but the gamma and the tree is this
  run's (`fingerprint`, --tree auto's before its choice); else None."""
  if not sidecar_fingerprint:
    return None
  stored = {k: v for k, v in sidecar_fingerprint.items() if k != 'tree'}
  gamma = resumed_gamma(stored, fingerprint)
  if gamma is None:
    return None
  return gamma, sidecar_fingerprint.get('tree')
