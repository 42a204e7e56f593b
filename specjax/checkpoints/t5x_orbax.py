"""T5X's Orbax checkpoint format: what current `t5x.train` writes by default.

Layout (t5x/checkpoints.py, OrbaxCheckpointManagerInterface): `<model_dir>/checkpoint_<step>/`
holds an Orbax `state` item (a PyTree of `{'target': params, 'state': {'step',
'param_states'}}`, OCDBT) and a `dataset` item. Only the `target` arrays are read (Orbax's
partial restore); optimizer slots are never touched. The older msgpack + zarr layout of the
public GCS checkpoints is `specjax.checkpoints.t5x`.
"""
from __future__ import annotations

import os
import re
from typing import Any, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from specjax.checkpoints import t5x

PyTree = Any
STATE_DIR = 'state'
_STEP_DIR = re.compile(r'^checkpoint_(\d+)$')
_ORBAX_FILES = ('_METADATA', 'manifest.ocdbt')


def _is_orbax_item(path: str) -> bool:
  """Whether `path` holds an Orbax PyTree item (its `_METADATA` or OCDBT manifest)."""
  if path.startswith('gs://'):
    return any(t5x.read_bytes(f'{path}/{name}') is not None for name in _ORBAX_FILES)
  return any(os.path.isfile(os.path.join(path, name)) for name in _ORBAX_FILES)


def find_orbax_steps(model_dir: str) -> List[int]:
  """Steps N with an Orbax `<model_dir>/checkpoint_N/state` item, ascending (local dirs)."""
  if model_dir.startswith('gs://') or not os.path.isdir(model_dir):
    return []
  steps = []
  for name in os.listdir(model_dir):
    match = _STEP_DIR.match(name)
    if match and _is_orbax_item(os.path.join(model_dir, name, STATE_DIR)):
      steps.append(int(match.group(1)))
  return sorted(steps)


def find_state_dir(path: str) -> Optional[str]:
  """The Orbax `state` item of a T5X checkpoint, or None if `path` is not one.

  Args:
    path: a `checkpoint_<step>` dir, its `state` subdir, or a model_dir (its latest
      step); local or gs:// (a gs:// model_dir cannot be listed: pass checkpoint_<step>).
  """
  path = os.fspath(path).rstrip('/')
  if os.path.basename(path) == STATE_DIR and _is_orbax_item(path):
    return path
  if _is_orbax_item(f'{path}/{STATE_DIR}'):
    return f'{path}/{STATE_DIR}'
  steps = find_orbax_steps(path)
  return f'{path}/checkpoint_{steps[-1]}/{STATE_DIR}' if steps else None


def _absolute(path: str) -> str:
  return path if '://' in path else os.path.abspath(path)  # orbax needs absolute paths


def _tree_metadata(checkpointer, state_dir: str) -> PyTree:
  meta = checkpointer.metadata(state_dir)
  tree = getattr(meta, 'item_metadata', meta)
  return getattr(tree, 'tree', tree)


def read_t5x_orbax(path: str, dtype: Any = None) -> PyTree:
  """Reads the model parameters (`target`) of a T5X Orbax checkpoint onto the host.

  Args:
    path: a T5X model_dir (its latest `checkpoint_<step>`), a `checkpoint_<step>` dir or
      its `state` subdir.
    dtype: optional dtype to cast every leaf to; None keeps the stored dtypes.

  Returns:
    The nested dict of numpy arrays with T5X names (no `target/` prefix).

  Raises:
    FileNotFoundError: no T5X Orbax checkpoint at `path`.
    ValueError: the checkpoint's state has no `target` tree.
  """
  state_dir = find_state_dir(path)
  if state_dir is None:
    raise FileNotFoundError(f'no T5X Orbax checkpoint at {path}: expected checkpoint_<step>/'
                            'state/; pass a T5X model_dir, checkpoint_<step> dir or its state '
                            'dir')
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  state_dir = _absolute(state_dir)
  checkpointer = ocp.PyTreeCheckpointer()
  tree = _tree_metadata(checkpointer, state_dir)
  if not isinstance(tree, dict) or 'target' not in tree:
    keys = sorted(tree) if isinstance(tree, dict) else type(tree).__name__
    raise ValueError(f'T5X checkpoint {state_dir} has no target params (top-level keys '
                     f'{keys}); pass a checkpoint written by a T5X trainer')
  is_leaf = lambda m: hasattr(m, 'shape')
  item = {'target': jax.tree.map(lambda m: np.zeros((), np.float32), tree['target'],
                                 is_leaf=is_leaf)}
  restore_args = {'target': jax.tree.map(lambda m: ocp.RestoreArgs(restore_type=np.ndarray),
                                         tree['target'], is_leaf=is_leaf)}
  restored = checkpointer.restore(state_dir, args=ocp.args.PyTreeRestore(
      item=item, restore_args=restore_args, partial_restore=True))['target']
  cast = (lambda a: np.asarray(a)) if dtype is None else (
      lambda a: np.asarray(a).astype(jnp.dtype(dtype)))
  return jax.tree.map(cast, restored)
