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
from specjax.proposers.eagle import EagleHead
from specjax.proposers.medusa import MedusaHeads

META_FILE = 'draft.json'
# The kinds of heads on the target's hidden states (a distilled draft model is a model).
HEAD_KINDS = ('medusa', 'eagle')
# What save_heads writes that is not a model: the heads, and layer-skip's early exit.
NOT_MODELS = HEAD_KINDS + ('layerskip',)


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


def heads_kind(path: str):
  """'medusa', 'eagle' or 'layerskip' where `path` holds heads or an early exit that
  `save_heads` wrote, else None (a model's checkpoint, a distilled draft model's
  included)."""
  try:
    with open(os.path.join(path, META_FILE), encoding='utf-8') as f:
      kind = json.load(f).get('kind')
  except (OSError, ValueError, AttributeError):
    return None
  return kind if kind in NOT_MODELS else None


def check_meta(meta: dict, target, path: str, kind: str, named: str = '') -> None:
  """Refuses a trained draft (its draft.json `meta`, at `path`) of another kind than `kind`
  or for another hidden width or vocabulary than the target's.

  Raises:
    ValueError: one line naming the --draft that fits, or the tool that trains one.
  """
  named = named or f'{kind} heads'
  if meta.get('kind') != kind:
    raise ValueError(f'{path} holds a {meta.get("kind")} draft, not {named}; pass '
                     f'--draft {meta.get("kind")}:{path}')
  width, vocab = target.config.emb_dim, target.vocab_size
  if (meta['hidden'], meta['vocab_size']) != (width, vocab):
    raise ValueError(f'{path} holds {named} trained for {meta["target"]} (hidden '
                     f'{meta["hidden"]}, {meta["vocab_size"]} logits), not for this target '
                     f'(hidden {width}, {vocab} logits); train one for it with python -m '
                     f'specjax.train_draft --kind {kind}')


def heads_for(meta: dict, target, path: str, kind: str):
  """The proposer (MedusaHeads or EagleHead) of heads described by `meta` (their
  draft.json), checked against the target's sizes.

  Args:
    meta: the heads' draft.json; target: the target model; path: where they are (named in
      errors); kind: the kind asked for ('medusa' or 'eagle').

  Raises:
    ValueError: heads of another kind or for another hidden width or vocabulary; an EAGLE
      head for a target that is not a T5 (one line each).
  """
  check_meta(meta, target, path, kind)
  if kind == 'eagle':
    return EagleHead(target)
  return MedusaHeads(target, int(meta['num_heads']))
