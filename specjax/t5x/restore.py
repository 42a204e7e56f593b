"""Filling the draft's params when T5X restores a target-only checkpoint.

The speculative model keeps the draft's params in its own params tree, under `DRAFT_KEY`,
so that T5X's partitioner shards them with its rules. A T5X checkpoint of the target has no
such key; `fill_draft` is a T5X `RestoreStateTransformationFn` (set through gin on
`utils.RestoreCheckpointConfig.state_transformation_fns`) that adds the draft's arrays,
read with `specjax.load_model` from any format it reads (T5X msgpack + zarr, T5X Orbax,
Hugging Face, specjax), before T5X reads the rest. Imports no t5x.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Tuple

import jax
import numpy as np

from specjax import checkpoints
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.models.t5_config import T5Config

PyTree = Any
DRAFT_KEY = 'draft'


@functools.lru_cache(maxsize=4)
def read_draft(path: str) -> Tuple[T5Config, PyTree]:
  """(config, params as host numpy float32) of a draft checkpoint, read once per process.

  Raises:
    FileNotFoundError, ValueError: as `specjax.load_model` (one line naming the fix).
  """
  with jax.ensure_compile_time_eval():  # T5X may first ask for it inside jax.eval_shape
    model, params = checkpoints.load_model(None, path)
  return model.config, jax.tree.map(np.asarray, jax.device_get(params))


def fill_draft(draft_checkpoint_path: str) -> Callable[..., PyTree]:
  """A T5X restore transformation that adds the draft's params where a checkpoint has none.

  Args:
    draft_checkpoint_path: the draft's checkpoint (any format `specjax.load_model` reads).

  Returns:
    fn(state_dict, target_state_dict, *, is_resuming=False) -> state_dict: when the model
    expects `target/draft` (target_state_dict) and the checkpoint has none (state_dict),
    the draft's arrays are added; otherwise (a checkpoint saved with its draft, or a model
    without one) state_dict is returned unchanged.
  """
  def transform(state_dict: PyTree, target_state_dict: PyTree, *,
                is_resuming: bool = False) -> PyTree:
    del is_resuming
    wanted = target_state_dict.get('target', {})
    have = state_dict.get('target', {})
    if DRAFT_KEY not in wanted or DRAFT_KEY in have:
      return state_dict
    _, params = read_draft(draft_checkpoint_path)
    state_dict = dict(state_dict)
    state_dict['target'] = {**have, DRAFT_KEY: params}
    return state_dict

  return transform


def default_checkpoint(name: str) -> str:
  """The bundled or public checkpoint of a registry name (e.g. 'demo_draft'), for gin files
  (`DRAFT_CHECKPOINT_PATH = @restore.default_checkpoint()`)."""
  if name not in DEFAULT_CHECKPOINTS:
    raise ValueError(f'{name} has no bundled or public checkpoint; pass one of '
                     f'{", ".join(sorted(DEFAULT_CHECKPOINTS))} or a path')
  return DEFAULT_CHECKPOINTS[name]
