"""Checkpoints of heads trained by `python -m specjax.train_draft`: an orbax checkpoint of
the params (bfloat16: what ships is as small as it can be stored) and `draft.json` beside
them (the kind, the target, the sizes, how it was trained)."""
from __future__ import annotations

import json
import os
from typing import Tuple

import jax
import jax.numpy as jnp

from specjax.checkpoints import loader

META_FILE = 'draft.json'


def save_heads(path: str, params: dict, meta: dict, config=None) -> str:
  """Writes params (as bfloat16) and meta to the new directory `path`; returns it. With a
  model's `config` (a distilled draft model) it is a checkpoint `--draft PATH` loads.

  Raises:
    FileExistsError: `path` exists (nothing is overwritten).
  """
  path = os.path.abspath(path)
  if os.path.exists(path):
    raise FileExistsError(f'{path} exists; pass another --output, or remove it')
  small = jax.tree.map(lambda a: jnp.asarray(a, jnp.bfloat16), params)
  loader.save_params(path, small, config)
  with open(os.path.join(path, META_FILE), 'w', encoding='utf-8') as f:
    json.dump(meta, f, indent=1)
  return path


def load_heads(path: str) -> Tuple[dict, dict]:
  """(meta, params) of a directory `save_heads` wrote.

  Raises:
    FileNotFoundError: no such directory, or no draft.json in it (names the tool).
  """
  meta_path = os.path.join(path, META_FILE)
  if not os.path.isfile(meta_path):
    raise FileNotFoundError(f'{path} holds no trained draft ({META_FILE} missing); train '
                            'one with python -m specjax.train_draft')
  with open(meta_path, encoding='utf-8') as f:
    meta = json.load(f)
  return meta, loader.load_params_orbax(path)
