"""Drafts by name for `--draft`: a model, or one of the drafts that cost nothing.

- a registry name or a checkpoint: the draft model;
- `copy`: copy from the source (`specjax.proposers.copy`);
- `bigram`: the target's bigram table (`--draft-checkpoint table.npz`, or the one bundled
  with each pair); `bigram:TABLE`: the table `python -m specjax.datastore bigram` wrote to
  TABLE;
- `copy+NAME`: copy where the output repeats the source, the draft model NAME elsewhere;
- `layerskip:M`: the target's own first M decoder layers (`specjax.proposers.layer_skip`);
  `layerskip:PATH`: the same with the early exit `python -m specjax.train_draft --kind
  layerskip` trained (M is its own);
- `medusa:PATH`: Medusa heads on the target's hidden states (`specjax.proposers.medusa`),
  trained by `python -m specjax.train_draft`; `medusa`: the heads bundled for demo_target,
  manpages_target and manlm_target;
- `eagle:PATH`: an EAGLE head (`specjax.proposers.eagle`), trained the same way; `eagle`:
  the ones bundled for demo_target, manpages_target and manlm_target;
- `rest:DIR`: continuations retrieved from a datastore (`specjax.proposers.rest`), built by
  `python -m specjax.datastore build`; `rest`: the one bundled for the target's task;
- `suffix`: continuations of the row's own earlier text (`specjax.proposers.suffix`);
- `rest+suffix` (or `rest:DIR+suffix`): one trie of both's continuations
  (`specjax.proposers.trie.Mixture`);
- `lookahead` or `lookahead:W,N,G`: lookahead decoding, the target's own Jacobi window of W
  guesses in N - 1 levels and G n-grams of N tokens from its pool, verified as one tree
  (`specjax.proposers.lookahead`);
- `cascade:NAME/CHEAP` (or `cascade:NAME/CHEAP/K`, `cascade:NAME/CHEAP/K/C`): the draft
  model NAME's chain, itself drafted K (default 3) tokens at a time by CHEAP (bigram,
  bigram:TABLE, copy, suffix, rest, rest:DIR) and verified by NAME, in at most C calls of
  NAME (default: until the chain is whole; a row short of it then proposes what it holds)
  (a vertical cascade, `specjax.proposers.cascade`);
  `cascade:NAME:K,CHEAP`: the first K drafts from NAME, the rest from CHEAP (horizontal).
"""
from __future__ import annotations

import os
from typing import Callable, Optional, Tuple

from specjax.checkpoints.registry import ASSETS, MANLM_ASSETS, MANPAGES_ASSETS, bundled
from specjax.datastore import store as datastore
from specjax.drafting import heads_io
from specjax.proposers.bigram import load_table
from specjax.proposers.draft_names import (  # pylint: disable=unused-import
    BIGRAM, CASCADE, CHEAP, COPY, LOOKAHEAD, LOOKAHEAD_BOUNDS, LOOKAHEAD_DEFAULT, PLUS_SUFFIX,
    REST, SUFFIX, Cascade, copy_draft, is_bigram, is_lookahead, is_retrieval, lookahead,
    parse_cascade, parse_lookahead, suffix_draft, table_path)
from specjax.proposers.hybrid import HybridDraft
from specjax.proposers.layer_skip import LayerSkip
from specjax.proposers import rest as rest_lib
from specjax.proposers import cascade as cascade_lib
from specjax.proposers.trie import Mixture

# The bigram table of each registry target that ships one.
DEFAULT_BIGRAMS = {'demo_target': os.path.join(ASSETS, 'bigram.npz'),
                   'manpages_target': os.path.join(MANPAGES_ASSETS, 'bigram.npz'),
                   'manlm_target': os.path.join(MANLM_ASSETS, 'bigram.npz')}
# The Medusa heads of each registry target that ships them.
DEFAULT_MEDUSA = {'demo_target': os.path.join(ASSETS, 'medusa'),
                  'manpages_target': os.path.join(MANPAGES_ASSETS, 'medusa'),
                  'manlm_target': os.path.join(MANLM_ASSETS, 'medusa')}
# The EAGLE head of each registry target that ships one.
DEFAULT_EAGLE = {'demo_target': os.path.join(ASSETS, 'eagle'),
                 'manpages_target': os.path.join(MANPAGES_ASSETS, 'eagle'),
                 'manlm_target': os.path.join(MANLM_ASSETS, 'eagle')}
HYBRID, LAYER_SKIP, MEDUSA = 'copy+', 'layerskip:', 'medusa'
EAGLE = 'eagle'


# The drafts trained by python -m specjax.train_draft: their bundled checkpoints.
TRAINED = {MEDUSA: DEFAULT_MEDUSA, EAGLE: DEFAULT_EAGLE}


def trained_kind(spec: str) -> Optional[str]:
  """'medusa' or 'eagle' for a spec of heads trained by train_draft (KIND or KIND:PATH),
  else None."""
  for kind in TRAINED:
    if spec == kind or spec.startswith(kind + ':'):
      return kind
  return None


def is_builtin(spec: str) -> bool:
  """Whether `spec` names a draft that is not a plain model (copy, bigram, copy+NAME,
  layerskip:M, medusa:PATH, eagle:PATH, rest[:DIR], suffix)."""
  return (spec == COPY or is_bigram(spec) or spec.startswith((HYBRID, LAYER_SKIP, CASCADE))
          or trained_kind(spec) is not None or is_retrieval(spec) or is_lookahead(spec))


def datastore_path(spec: str, target_name: str) -> str:
  """The datastore directory of 'rest:DIR' (DIR), or of 'rest' (the target's bundled one).

  Raises:
    ValueError: 'rest' for a target that ships none (names the build command).
  """
  spec = spec[:-len(PLUS_SUFFIX)] if spec.endswith(PLUS_SUFFIX) else spec
  path = spec[len(REST) + 1:] if spec.startswith(REST + ':') else ''
  path = path or datastore.DEFAULT_DATASTORES.get(target_name)
  if path is None:
    raise ValueError(f'no datastore ships with {target_name}; build one with '
                     f'{datastore.BUILD_COMMAND} --input FILE --output DIR --target '
                     f'{target_name} and pass --draft rest:DIR')
  return path


def check_datastore(spec: str, target_name: str, own_vocab: bool = True) -> None:
  """The checks of a 'rest[:DIR]' draft that need no model, before anything loads: the
  datastore is one and is not empty, and with `own_vocab` (the target's vocabulary is the
  one its bundled pair ships) it was built with that vocabulary. Otherwise the vocabulary is
  checked once it is loaded (`retrieval`).

  Raises:
    ValueError, FileNotFoundError: one line, naming the fix.
  """
  path = datastore_path(spec, target_name)
  pair = bundled(target_name) if own_vocab else None
  vocab = None
  if pair is not None:
    from specjax import checkpoints  # pylint: disable=import-outside-toplevel
    vocab = checkpoints.load_vocab(pair.vocab)
  datastore.load(path, vocab)


def retrieval(spec: str, target, target_name: str, vocab=None):
  """(draft, params) of 'rest[:DIR]' (the datastore checked against `vocab`, the job's
  vocabulary, when given) or 'suffix'.

  Raises:
    ValueError, FileNotFoundError: a datastore that is missing, empty, damaged, built
      with another vocabulary, or holding ids the target cannot emit.
  """
  if spec == SUFFIX:
    return suffix_draft(target), {}
  if spec.endswith(PLUS_SUFFIX):
    parts = [retrieval(s, target, target_name, vocab)
             for s in (spec[:-len(PLUS_SUFFIX)], SUFFIX)]
    return Mixture(tuple(d for d, _ in parts)), {str(i): p for i, (_, p) in enumerate(parts)}
  path = datastore_path(spec, target_name)
  store = datastore.load(path, vocab)
  if store.vocab_size > target.vocab_size:
    raise ValueError(f'datastore {path} was built with a vocabulary of {store.vocab_size} '
                     f'ids, more than the target\'s {target.vocab_size} logits; build it with '
                     'the target\'s vocabulary')
  return rest_lib.from_arrays(store.tokens, store.suffixes, store.max_query, target)


def bigram_table(spec: str, target_name: str, table: Optional[str] = None) -> str:
  """The table of 'bigram:TABLE' (TABLE), or of 'bigram': --draft-checkpoint (`table`), else
  the one bundled with the target.

  Raises:
    ValueError: the table named twice, or none for a target that ships none (one line).
  """
  path = table_path(spec)
  if path is not None and table is not None and table != path:
    raise ValueError(f'--draft {spec} names its table, and --draft-checkpoint {table} '
                     'another: pass one of them')
  path = path or table or DEFAULT_BIGRAMS.get(target_name)
  if path is None:
    raise ValueError(f'no bigram table ships with {target_name}; build one (python -m '
                     f'specjax.datastore bigram --target {target_name} --input TEXT --output '
                     'TABLE.npz) and pass --draft bigram:TABLE.npz')
  return path


def model_name(spec: str) -> Optional[str]:
  """The draft model a spec loads (NAME of copy+NAME, spec itself for a model), or None."""
  if spec.startswith(HYBRID):
    return spec[len(HYBRID):]
  if spec.startswith(CASCADE):
    return parse_cascade(spec).model
  return None if is_builtin(spec) else spec


def layer_skip(spec: str, target):
  """(LayerSkip, params) of 'layerskip:M' ({}: the target's own exit) or 'layerskip:PATH'
  (the exit trained at PATH, M its own).

  Raises:
    ValueError: neither a whole number nor a directory (names the forms); M outside
      1 .. L - 1; a PATH holding another kind of draft, or an exit for another target.
  """
  rest = spec[len(LAYER_SKIP):]
  if rest.isdigit():
    return LayerSkip(target, int(rest)), {}
  if not os.path.isdir(rest):
    raise ValueError(f'--draft {spec}: {rest!r} is neither a number of layers nor a '
                     'directory; pass layerskip:M, M the number of the target\'s decoder '
                     'layers that draft (e.g. layerskip:2), or layerskip:PATH, an early exit '
                     'trained by python -m specjax.train_draft --kind layerskip')
  meta, params = heads_io.load_heads(rest)
  heads_io.check_meta(meta, target, rest, 'layerskip', 'an early exit')
  return LayerSkip(target, int(meta['layers']), trained_exit=True), params


def trained_heads(path: str, target, kind: str = MEDUSA):
  """(MedusaHeads or EagleHead, params) of the heads at `path`, checked against the
  target's sizes.

  Raises:
    ValueError: heads of another kind or for another hidden width or vocabulary; an EAGLE
      head for a target that is not a T5.
  """
  meta, params = heads_io.load_heads(path)
  return heads_io.heads_for(meta, target, path, kind), params


def cascade(parsed: Cascade, target, target_name: str, load_model, table=None, vocab=None):
  """(VerticalCascade or HorizontalCascade, params) of a parsed cascade spec."""
  model, params = load_model(parsed.model)
  cheap, cheap_params = resolve_draft(parsed.cheap, target, target_name, load_model, table,
                                      vocab)
  return (cascade_lib.of_parts(parsed.vertical, model, cheap, parsed.count, parsed.calls),
          cascade_lib.params_of(parsed.vertical, params, cheap_params))


def resolve_draft(spec: str, target, target_name: str, load_model: Callable[[str], Tuple],
                  table: Optional[str] = None, vocab=None):
  """(draft, params) for a --draft spec.

  Args:
    spec: 'copy', 'bigram[:TABLE]', 'copy+NAME', 'layerskip:M', 'layerskip:PATH', 'medusa[:PATH]',
      'eagle[:PATH]', 'rest[:DIR]', 'suffix', or a model NAME.
    target: the loaded target (vocabulary size and special ids).
    target_name: its --target (which bundled bigram table is its own).
    load_model: NAME -> (model, params), the pair's loader.
    table: --draft-checkpoint, for 'bigram' (`bigram_table`).
    vocab: the job's vocabulary, which a datastore ('rest') must have been built with.

  Raises:
    ValueError: 'bigram' without a table for this target (`bigram_table`), or a table
      built with more ids than the target's logits;
      'layerskip:M' with M outside 1 .. L - 1; heads trained for another target.
    FileNotFoundError: 'medusa:PATH' or 'eagle:PATH' without trained heads at PATH.
  """
  if spec == COPY:
    return copy_draft(target), {}
  if is_retrieval(spec):
    return retrieval(spec, target, target_name, vocab)
  if is_lookahead(spec):
    return lookahead(spec, target), {}
  if is_bigram(spec):
    return load_table(bigram_table(spec, target_name, table), target.vocab_size,
                      target.eos_id, target.pad_id)
  if spec.startswith(LAYER_SKIP):
    return layer_skip(spec, target)
  kind = trained_kind(spec)
  if kind is not None:
    path = spec[len(kind) + 1:] or TRAINED[kind].get(target_name)
    if path is None:
      raise ValueError(f'no {kind} heads ship with {target_name}; train them with python -m '
                       f'specjax.train_draft --kind {kind} and pass --draft {kind}:PATH')
    return trained_heads(path, target, kind)
  if spec.startswith(HYBRID):
    model, params = load_model(spec[len(HYBRID):])
    return HybridDraft(copy_draft(target), model), params
  if spec.startswith(CASCADE):
    return cascade(parse_cascade(spec), target, target_name, load_model, table, vocab)
  return load_model(spec)
