"""Filling the draft's params when T5X restores a target-only checkpoint.

The speculative model keeps the draft's params in its own params tree, under `DRAFT_KEY`,
so that T5X's partitioner shards them with its rules. A T5X checkpoint of the target has no
such key; `fill_draft` is a T5X `RestoreStateTransformationFn` (set through gin on
`utils.RestoreCheckpointConfig.state_transformation_fns`) that adds the draft's arrays,
read with `specjax.load_model` from any format it reads (T5X msgpack + zarr, T5X Orbax,
Hugging Face, specjax), or the heads that `python -m specjax.train_draft` wrote (EAGLE,
Medusa), before T5X reads the rest. Imports no t5x.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Tuple

import jax
import numpy as np

from specjax import checkpoints
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.drafting import heads_io
from specjax.models.t5_config import T5Config

PyTree = Any
DRAFT_KEY = 'draft'
# What gin's MODEL is bound to under the include (`specjax.t5x.model`).
SPECULATIVE_MODELS = ('from_model', 'SpeculativeEncoderDecoderModel')


@functools.lru_cache(maxsize=4)
def read_draft(path: str) -> Tuple[T5Config, PyTree]:
  """(config, params as host numpy float32) of a draft checkpoint, read once per process.

  Raises:
    FileNotFoundError, ValueError: as `specjax.load_model` (one line naming the fix).
  """
  with jax.ensure_compile_time_eval():  # T5X may first ask for it inside jax.eval_shape
    model, params = checkpoints.load_model(None, path)
  return model.config, jax.tree.map(np.asarray, jax.device_get(params))


@functools.lru_cache(maxsize=4)
def read_heads(path: str) -> Tuple[dict, PyTree]:
  """(meta, params as host numpy float32) of heads `python -m specjax.train_draft` wrote
  (stored in bfloat16; float32 as the model's initial params are), read once per process.

  Raises:
    FileNotFoundError: no trained heads at `path` (names the tool).
  """
  meta, params = heads_io.load_heads(path)
  return meta, jax.tree.map(lambda a: np.asarray(a, np.float32), jax.device_get(params))


def heads_meta(path: str) -> dict:
  """The draft.json of what train_draft wrote at DRAFT_CHECKPOINT_PATH `path`.

  Raises:
    ValueError: nothing it wrote is there (one line naming the binding).
  """
  try:
    return read_heads(path)[0]
  except (FileNotFoundError, OSError, ValueError) as e:
    raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r}: {" ".join(str(e).split())}') from None


def draft_params(path: str) -> PyTree:
  """The draft's params at `path`: trained heads, or a model's checkpoint."""
  if heads_io.heads_kind(path) is not None:
    return read_heads(path)[1]
  return read_draft(path)[1]


def fill_draft(draft_checkpoint_path: Optional[str]) -> Callable[..., PyTree]:
  """A T5X restore transformation that adds the draft's params where a checkpoint has none.

  Args:
    draft_checkpoint_path: the draft's checkpoint (any format `specjax.load_model` reads),
      or the heads `python -m specjax.train_draft` wrote; None (a layer-skip draft, whose
      params are the target's) fills nothing.

  Returns:
    fn(state_dict, target_state_dict, *, is_resuming=False) -> state_dict: when the model
    expects `target/draft` (target_state_dict) and the checkpoint has none (state_dict),
    the draft's arrays are added; otherwise (a checkpoint saved with its draft, or a model
    without one) state_dict is returned unchanged.

  Raises:
    ValueError: gin's MODEL is not the speculative model although the include set this
      hook: the include came before the model's gin file, which built MODEL again.
  """
  check_include_order()

  def transform(state_dict: PyTree, target_state_dict: PyTree, *,
                is_resuming: bool = False) -> PyTree:
    del is_resuming
    wanted = target_state_dict.get('target', {})
    have = state_dict.get('target', {})
    if DRAFT_KEY not in wanted or DRAFT_KEY in have or draft_checkpoint_path is None:
      return state_dict
    params = draft_params(draft_checkpoint_path)
    state_dict = dict(state_dict)
    state_dict['target'] = {**have, DRAFT_KEY: params}
    return state_dict

  return transform


def check_include_order() -> None:
  """Refuses a run whose speculative include was read before the model's gin file.

  The include wraps gin's MODEL; a model gin read after it sets MODEL again, to plain T5X
  decoding (beam search by default), while the include's restore hook stays: that run
  would ignore the draft without a word.

  Raises:
    ValueError: gin's MODEL is bound to another model than the speculative one (one line
      naming the fix). Nothing is checked outside gin, or where MODEL is unbound.
  """
  try:
    import gin  # pylint: disable=import-outside-toplevel
    model = gin.query_parameter('%MODEL')
  except (ImportError, ValueError):
    return
  wrapped = getattr(getattr(model, 'configurable', None), 'wrapped', None)
  name = getattr(wrapped, '__name__', '')
  if wrapped is not None and name not in SPECULATIVE_MODELS:
    raise ValueError(f'gin\'s MODEL is {name}, not the speculative model, although '
                     'specjax/t5x/configs/speculative.gin is included: pass that include '
                     'after the model\'s gin files (it wraps the MODEL they build)')


def default_checkpoint(name: str) -> str:
  """The bundled or public checkpoint of a registry name (e.g. 'demo_draft'), for gin files
  (`DRAFT_CHECKPOINT_PATH = @restore.default_checkpoint()`)."""
  if name not in DEFAULT_CHECKPOINTS:
    raise ValueError(f'{name} has no bundled or public checkpoint; pass one of '
                     f'{", ".join(sorted(DEFAULT_CHECKPOINTS))} or a path')
  return DEFAULT_CHECKPOINTS[name]
