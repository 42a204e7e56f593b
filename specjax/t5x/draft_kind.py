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
  layerskip --layers M` trained (under `draft`);
- 'copy': spans of the input copied where the output repeats it (`specjax.proposers.copy`);
- 'suffix': continuations of the row's own earlier text, its output and its input
  (`specjax.proposers.suffix`);
- 'lookahead' or 'lookahead:W,N,G': lookahead decoding, the target's own Jacobi window of
  W guesses in N - 1 levels and G n-grams of N tokens from its pool (`specjax.proposers.lookahead`;
  'lookahead' is 5,3,4), verified as one tree of its own shape;
- 'bigram:TABLE': the bigram table python -m specjax.datastore bigram wrote to TABLE
  (`specjax.proposers.bigram`), as `--draft bigram:TABLE`;
- 'rest:DIR': continuations retrieved from the datastore that `python -m specjax.datastore
  build` wrote to DIR (`specjax.proposers.rest`); 'rest:DIR+suffix': one trie of both's
  continuations (`specjax.proposers.trie.Mixture`);
- 'cascade:model/CHEAP[/K[/C]]' and 'cascade:model:K,CHEAP': cascades of the draft model
  of DRAFT_CHECKPOINT_PATH or DRAFT_MODULE (its params under `draft`, as for 'model') and
  CHEAP (copy, suffix, bigram:TABLE, rest:DIR or rest:DIR+suffix), as `--draft
  cascade:NAME/...` (`specjax.t5x.cascade_kind`).

The kinds from 'copy' to 'rest' need no draft model and no checkpoint
(`specjax.t5x.paramless_kind`): nothing goes under `draft` in the params tree, and
DRAFT_CHECKPOINT_PATH and DRAFT_MODULE stay unbound. A bigram table's arrays and a
datastore's (the corpus [L] and its suffix array [L'] and document starts [S], int32) do
not go into the params tree either: they are constants of the decode, which
`DraftKind.draft_params` hands it, replicated on every device of T5X's mesh (captured by
the traced decode, not passed to it). As params they would be cast by T5X's restore to
`RestoreCheckpointConfig.dtype` (bfloat16 in T5X's infer.gin, which cannot hold ids above
256), handed to the optimizer by `t5x.train`, written into every checkpoint, and the
restore hook `specjax.t5x.restore.fill_draft` would have to find them in a checkpoint that
holds none. They are read and checked once, when gin builds the model.

Trees follow the command line: 'copy' verifies a chain or a static tree, 'bigram' a chain
or any tree, a cascade a chain; 'suffix' and 'rest' verify a chain of GAMMA drafts or the
trie of what they retrieve as a dynamic tree (`speculative.from_model.tree` bound to a
`specjax.core.tree.DynamicTree`, `--tree-nodes/--tree-depth`), never a static branching;
'lookahead' verifies its own tree (`LookaheadDraft.tree_spec`; GAMMA is its depth), so
`tree` stays unbound.

Imports no t5x.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional, Tuple

from specjax.core.tree import DynamicTree
from specjax.drafting import heads_io
from specjax.proposers import draft_names as drafts
from specjax.proposers import cascade as cascade_lib
from specjax.proposers.layer_skip import LayerSkip
from specjax.proposers.lookahead import LookaheadDraft
from specjax.t5x import cascade_kind, paramless_kind, restore
from specjax.t5x.paramless_kind import COPY, LOOKAHEAD, REST, REST_SUFFIX, RETRIEVAL

MODEL, LAYER_SKIP = 'model', 'layerskip'
CASCADE = drafts.CASCADE[:-1]  # 'cascade' of 'cascade:model/CHEAP...'
PARAMLESS = paramless_kind.NAMES  # the kinds with no draft model, no checkpoint, no params
KINDS = ("'model', 'eagle', 'medusa', 'layerskip:M', 'copy', 'suffix', 'lookahead[:W,N,G]', "
         "'bigram:TABLE', 'rest:DIR', 'rest:DIR+suffix' or 'cascade:model/CHEAP[/K[/C]]'")


@dataclasses.dataclass(frozen=True)
class DraftKind:
  """A checked draft kind.

  Attributes:
    name: 'model', 'eagle', 'medusa', 'layerskip', 'copy', 'suffix', 'lookahead',
      'bigram', 'rest', 'rest+suffix' or 'cascade'.
    layers: M of 'layerskip:M' (0 for the others).
    path: DRAFT_CHECKPOINT_PATH (None for layer-skip without a trained exit, or a
      model's or cascade's DRAFT_MODULE), TABLE of 'bigram:TABLE', or DIR of 'rest:DIR'
      and 'rest:DIR+suffix'.
    heads: the draft.json of trained heads or of an early exit, else None.
    lookahead: (W, N, G) of 'lookahead[:W,N,G]', else ().
    datastore: the datastore of 'rest:DIR' (`specjax.datastore.Datastore`: tokens [L] and
      suffixes [L'] int32), read and checked when the kind was parsed, else None.
    table: the table of 'bigram:TABLE' (next ids [V', k] int32, log-probabilities [V', k]
      float32: `specjax.proposers.bigram.read_table`), read and checked when the kind was
      parsed, else None.
    cascade: the parts of 'cascade:...' (`specjax.proposers.draft_names.Cascade`, its
      model 'model'), else None.
    inner: the DraftKind of a cascade's CHEAP, else None.
  """

  name: str
  layers: int = 0
  path: Optional[str] = None
  heads: Optional[dict] = dataclasses.field(default=None, compare=False, hash=False)
  lookahead: Tuple[int, ...] = ()
  datastore: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)
  table: Any = dataclasses.field(default=None, compare=False, hash=False, repr=False)
  cascade: Optional[drafts.Cascade] = None
  inner: Optional['DraftKind'] = None

  @property
  def has_model(self) -> bool:
    """Whether the draft is a draft model ('model', or a cascade's), read from
    DRAFT_CHECKPOINT_PATH or built from DRAFT_MODULE."""
    return self.name in (MODEL, CASCADE)

  @property
  def has_params(self) -> bool:
    """Whether the draft has params of its own (under the params tree's `draft`)."""
    if self.name in PARAMLESS:
      return False
    return self.name != LAYER_SKIP or self.path is not None

  def around(self, target, draft) -> Any:
    """What the draft model `draft` drafts in: itself for 'model', the cascade of
    'cascade:...' with its CHEAP part for `target`."""
    if self.name != CASCADE:
      return draft
    parts = self.cascade
    return cascade_lib.of_parts(parts.vertical, draft, self.inner.proposer(target),
                                parts.count, parts.calls)

  def proposer(self, target) -> Any:
    """The proposer of a kind that drafts from `target` (not 'model' nor a cascade).

    Raises:
      ValueError: M outside 1 .. L - 1, heads trained for another target, or a table or
        datastore whose ids the target cannot emit (one line).
    """
    if self.name in PARAMLESS:
      return self._paramless(target)[0]
    try:
      if self.name != LAYER_SKIP:
        return heads_io.heads_for(self.heads, target, self.path, self.name)
      if self.path is not None:
        heads_io.check_meta(self.heads, target, self.path, LAYER_SKIP, 'an early exit')
      return LayerSkip(target, self.layers, trained_exit=self.path is not None)
    except ValueError as e:
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {self.path!r}: {e}') from None

  def draft_params(self, target, stored: Any) -> Any:
    """The draft's params as the decode reads them.

    Args:
      target: the specjax target the draft drafts for.
      stored: what the params tree holds under `draft` ({} where nothing).

    Returns:
      `stored` for the kinds with params or none; for 'bigram' the table's arrays
      {'next', 'logp'} [V, k], for 'rest' the datastore's {'tokens' [L], 'suffixes' [L'],
      'starts' [S]} (int32) (constants of the decode: module doc), for 'rest+suffix'
      {'0': those, '1': {}}; for a cascade {'draft': stored,
      'inner': CHEAP's} (vertical) or {'first': stored, 'rest': CHEAP's} (horizontal).
    """
    if self.name == CASCADE:
      return cascade_lib.params_of(self.cascade.vertical, stored,
                                   self.inner.draft_params(target, {}))
    if self.name in PARAMLESS:
      return self._paramless(target)[1]
    return stored

  def tree(self, tree):
    """The tree the decode verifies, given `speculative.from_model.tree` as a TreeShape,
    a DynamicTree or None (a chain): lookahead's own tree, else `tree`.

    Raises:
      ValueError: a tree bound for 'lookahead' or a cascade, a static tree for 'suffix'
        or 'rest', or a dynamic one for 'copy' (one line naming the fix).
    """
    if self.name == CASCADE and tree is not None:
      raise ValueError(f'DRAFT_KIND {self._spec()!r} is a cascade, which drafts chains: leave '
                       'speculative.from_model.tree unbound')
    if self.name == COPY and isinstance(tree, DynamicTree):
      raise ValueError(f'DRAFT_KIND {COPY!r} grows static trees only (it has no '
                       'probabilities to grow a dynamic tree by): bind children per depth, '
                       "e.g. '4,2,2,1', or leave the tree unbound for a chain")
    if self.name == LOOKAHEAD:
      spec = LookaheadDraft(1, *self.lookahead).tree_spec()
      if tree is not None:
        raise ValueError(f'DRAFT_KIND {self._spec()!r} verifies its window and n-grams as '
                         f'one tree of its own ({spec.nodes} nodes, {spec.depth} deep): '
                         'leave speculative.from_model.tree unbound')
      return spec
    if self.name in RETRIEVAL and tree is not None and not isinstance(tree, DynamicTree):
      raise ValueError(f'DRAFT_KIND {self._spec()!r} proposes the trie of what it '
                       'retrieves, not a fixed branching: bind a dynamic tree '
                       '(@tree.DynamicTree() with its nodes and depth, as --tree-nodes and '
                       '--tree-depth), or leave it unbound for a chain of GAMMA drafts')
    return tree

  def check_gamma(self, gamma: int) -> None:
    """Refuses a GAMMA that a horizontal cascade's draft model would draft alone
    (`cascade_kind.check_gamma`)."""
    if self.name == CASCADE:
      cascade_kind.check_gamma(self.cascade, self._spec(), gamma)

  def _spec(self) -> str:
    """The DRAFT_KIND this kind was parsed from."""
    if self.name == CASCADE:
      return cascade_kind.spell(self.cascade, self.inner._spec())
    if self.name in PARAMLESS:
      return paramless_kind.spell(self.name, self.path, self.lookahead)
    return self.name

  def _paramless(self, target) -> Tuple[Any, Any]:
    """(proposer, constants) of a kind with no params for `target` (`paramless_kind.build`)."""
    return paramless_kind.build(self.name, self._spec(), self.datastore, self.table, target)


def parse(kind: str, draft_module, draft_checkpoint_path: Optional[str],
          target_layers: Optional[int] = None, *, vocabulary=None,
          vocab_size: Optional[int] = None) -> DraftKind:
  """The DraftKind of speculative.from_model's draft_kind, draft_module and
  draft_checkpoint_path, checked when gin builds the model (before any restore).

  Args:
    kind, draft_module, draft_checkpoint_path: the model's arguments of those names.
    target_layers: L, the target module's decoder layers where its config says (M of
      'layerskip:M' must be below it), else None (checked when the decode is built).
    vocabulary: the model's output vocabulary, which a datastore ('rest:DIR') must have
      been built with (`paramless_kind.comparable_vocabulary`); None: not compared.
    vocab_size: V, the target module's logits where its config says (a table's or
      datastore's ids must be below it), else None (checked when the decode is built).

  Raises:
    ValueError: an unknown kind, a kind without what it reads (a checkpoint, trained
      heads of that kind, a table, a datastore), with what it does not (a module or
      checkpoint for a layer-skip, copy, suffix, lookahead, bigram or rest draft), bad
      W,N,G of 'lookahead:W,N,G', or a table or datastore that is missing, empty, damaged
      or built with another vocabulary: one line naming the gin binding.
  """
  path = draft_checkpoint_path
  if not isinstance(kind, str):
    raise ValueError(f'speculative.from_model.draft_kind (DRAFT_KIND) takes {KINDS}, got '
                     f'{kind!r}')
  if kind == MODEL or kind.startswith(drafts.CASCADE):
    cascade = inner = None
    if kind != MODEL:
      cascade, inner = _cascade(kind, target_layers, vocabulary, vocab_size)
    if draft_module is None and path is None:
      needs = 'a draft' if kind == MODEL else f'its draft model (DRAFT_KIND {kind!r})'
      raise ValueError(f'SpeculativeEncoderDecoderModel needs {needs}: set '
                       'draft_checkpoint_path (DRAFT_CHECKPOINT_PATH in gin) or draft_module')
    if draft_module is None and heads_io.heads_kind(path) is not None:
      found = heads_io.heads_kind(path)
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r} holds {found} heads, not a draft '
                       f'model: set DRAFT_KIND = \'{found}\'')
    return DraftKind(MODEL if kind == MODEL else CASCADE, path=path, cascade=cascade,
                     inner=inner)
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
    meta = restore.heads_meta(path)
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
    meta = restore.heads_meta(path)
    if meta.get('kind') != kind:
      raise ValueError(f'DRAFT_CHECKPOINT_PATH {path!r} holds a {meta.get("kind")} draft, '
                       f'not {kind} heads: set DRAFT_KIND = \'{meta.get("kind")}\'')
    return DraftKind(kind, path=path, heads=meta)
  name = paramless_kind.name_of(kind)
  if name is None:
    raise ValueError(f'speculative.from_model.draft_kind (DRAFT_KIND) takes {KINDS}, got '
                     f'{kind!r}')
  return DraftKind(name, **paramless_kind.read(kind, name, draft_module, draft_checkpoint_path,
                                               vocabulary, vocab_size))


def _cascade(kind: str, target_layers, vocabulary, vocab_size) -> Tuple[Any, DraftKind]:
  """(Cascade, the DraftKind of its CHEAP) of a cascade's DRAFT_KIND (`cascade_kind`).

  Raises:
    ValueError: not one of `cascade_kind.FORMS`, or a CHEAP datastore that does not read
      (one line).
  """
  parsed = cascade_kind.parts(kind)
  if parsed is None or paramless_kind.name_of(parsed.cheap) in (None, LOOKAHEAD):
    raise ValueError(f'DRAFT_KIND {kind!r}: {cascade_kind.FORMS}')
  return parsed, parse(parsed.cheap, None, None, target_layers, vocabulary=vocabulary,
                       vocab_size=vocab_size)
