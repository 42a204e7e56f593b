"""Nested params dicts addressed by a path of keys, as the checkpoint converters walk them."""
from __future__ import annotations

from typing import Any, Tuple


def set_path(tree: dict, path: Tuple[str, ...], value) -> None:
  """tree[path[0]]...[path[-1]] = value, creating the dicts on the way."""
  for name in path[:-1]:
    tree = tree.setdefault(name, {})
  tree[path[-1]] = value


def get_path(tree: dict, path: Tuple[str, ...]) -> Any:
  """tree[path[0]]...[path[-1]]."""
  for name in path:
    tree = tree[name]
  return tree
