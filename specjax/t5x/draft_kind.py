"""The kinds of draft the T5X route runs (`speculative.from_model.draft_kind`, gin's
DRAFT_KIND), as `--draft` names them on the command line:

- 'model' (the default): a separate draft model, read from DRAFT_CHECKPOINT_PATH (or built
  from DRAFT_MODULE); its params sit in the model's params tree under `draft`;
- 'eagle', 'medusa': heads on the target's hidden states that `python -m
  specjax.train_draft --kind eagle|medusa` trained (DRAFT_CHECKPOINT_PATH is their
  directory); their params sit under `draft` with their logical axes, so T5X's partitioner
  shards them by its rules as it does the target's;
- 'layerskip:M': the target's own first M decoder layers, drafting in the target's cache;
  no params of its own (nothing under `draft`) and no checkpoint, or, with
  DRAFT_CHECKPOINT_PATH, the early exit that `python -m specjax.train_draft --kind
  layerskip --layers M` trained (under `draft`).

Imports no t5x.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from specjax.drafting import heads_io
from specjax.proposers.layer_skip import LayerSkip
from specjax.t5x import restore

MODEL, LAYER_SKIP = 'model', 'layerskip'
KINDS = "'model', 'eagle', 'medusa' or 'layerskip:M'"


@dataclasses.dataclass(frozen=True)
class DraftKind:
  """A checked draft kind.

  Attributes:
    name: 'model', 'eagle', 'medusa' or 'layerskip'.
    layers: M of 'layerskip:M' (0 for the others).
    path: DRAFT_CHECKPOINT_PATH (None for layer-skip without a trained exit).
    heads: the draft.json of trained heads or of an early exit, else None.
  """

  name: str
  layers: int = 0
  path: Optional[str] = None
  heads: Optional[dict] = dataclasses.field(default=None, compare=False, hash=False)

  @property
  def has_params(self) -> bool:
    """Whether the draft has params of its own (under the params tree's `draft`)."""
    return self.name != LAYER_SKIP or self.path is not None

  def proposer(self, target) -> Any:
    """The proposer of a kind that drafts from `target` (not 'model').

    Raises:
      ValueError: M outside 1 .. L - 1, or heads trained for another target (one line).
    """
    try:
      if self.name != LAYER_SKIP:
        return heads_io.heads_for(self.heads, target, self.path, self.name)
      if self.path is not None:
        heads_io.check_meta(self.heads, target, self.path, LAYER_SKIP, 'an early exit')
      return LayerSkip(target, self.layers, trained_exit=self.path is not None)
    except ValueError as e:
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {self.path!r}: {e}') from None


def parse(kind: str, draft_module, draft_checkpoint_path: Optional[str],
          target_layers: Optional[int] = None) -> DraftKind:
  """The DraftKind of speculative.from_model's draft_kind, draft_module and
  draft_checkpoint_path, checked when gin builds the model (before any restore).

  Args:
    kind, draft_module, draft_checkpoint_path: the model's arguments of those names.
    target_layers: L, the target module's decoder layers where its config says (M of
      'layerskip:M' must be below it), else None (checked when the decode is built).

  Raises:
    ValueError: an unknown kind, a kind without what it reads (a checkpoint, trained
      heads of that kind), or with what it does not (a module or checkpoint for a
      layer-skip draft): one line naming the gin binding.
  """
  path = draft_checkpoint_path
  if not isinstance(kind, str):
    raise ValueError(f'speculative.from_model.draft_kind (DRAFT_KIND) takes {KINDS}, got '
                     f'{kind!r}')
  if kind == MODEL:
    if draft_module is None and path is None:
      raise ValueError('SpeculativeEncoderDecoderModel needs a draft: set '
                       'draft_checkpoint_path (DRAFT_CHECKPOINT_PATH in gin) or draft_module')
    if draft_module is None and heads_io.heads_kind(path) is not None:
      found = heads_io.heads_kind(path)
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r} holds {found} heads, not a draft '
                       f'model: set DRAFT_KIND = \'{found}\'')
    return DraftKind(MODEL, path=path)
  if kind.startswith(LAYER_SKIP + ':'):
    layers = kind[len(LAYER_SKIP) + 1:]
    top = '' if target_layers is None else f' and below the target\'s {target_layers}'
    if not layers.isdigit() or not 1 <= int(layers) < (target_layers or int(layers) + 1):
      raise ValueError(f'DRAFT_KIND {kind!r}: pass layerskip:M, M >= 1{top}, the number of '
                       'the target\'s decoder layers that draft (e.g. \'layerskip:2\')')
    if draft_module is not None:
      raise ValueError(f'DRAFT_KIND {kind!r} drafts with the target\'s own layers: leave '
                       'DRAFT_MODULE unbound (None)')
    if path is None:
      return DraftKind(LAYER_SKIP, layers=int(layers))
    meta = _read(path)
    if meta.get('kind') != LAYER_SKIP or int(meta.get('layers', 0)) != int(layers):
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r} holds no early exit for {kind} (its '
                       f'draft.json: {meta.get("kind")}, layers {meta.get("layers")}): set it '
                       f'to what python -m specjax.train_draft --kind layerskip --layers '
                       f'{layers} wrote, or unbind it')
    return DraftKind(LAYER_SKIP, layers=int(layers), path=path, heads=meta)
  if kind in heads_io.HEAD_KINDS:
    if draft_module is not None:
      raise ValueError(f'DRAFT_KIND \'{kind}\' reads trained heads, not a module: leave '
                       'DRAFT_MODULE unbound and set DRAFT_CHECKPOINT_PATH to their directory')
    if path is None:
      raise ValueError(f'DRAFT_KIND \'{kind}\' needs the heads\' directory: set '
                       f'DRAFT_CHECKPOINT_PATH to what python -m specjax.train_draft --kind '
                       f'{kind} wrote')
    meta = _read(path)
    if meta.get('kind') != kind:
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r} holds a {meta.get("kind")} draft, '
                       f'not {kind} heads: set DRAFT_KIND = \'{meta.get("kind")}\'')
    return DraftKind(kind, path=path, heads=meta)
  raise ValueError(f'speculative.from_model.draft_kind (DRAFT_KIND) takes {KINDS}, got '
                   f'{kind!r}')


def _read(path: str) -> dict:
  """The draft.json of what train_draft wrote at `path`.

  Raises:
    ValueError: nothing it wrote is there (one line naming the binding).
  """
  try:
    return restore.read_heads(path)[0]
  except (FileNotFoundError, OSError, ValueError) as e:
    raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r}: {" ".join(str(e).split())}') from None
