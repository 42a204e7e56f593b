"""Retrieval datastores: a corpus of token ids and its suffix array (`store`), built from
text by `python -m specjax.datastore build` (`cli`).

The names below are imported when first used, so that the command line can check its
arguments before the imports that take seconds.
"""
import importlib

_EXPORTS = ('DEFAULT_DATASTORES', 'MAX_QUERY', 'Datastore', 'build', 'load',
            'vocab_fingerprint', 'write')

__all__ = list(_EXPORTS)


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f'module specjax.datastore has no attribute {name!r}')
  value = getattr(importlib.import_module('specjax.datastore.store'), name)
  globals()[name] = value
  return value
