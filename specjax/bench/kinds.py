"""The drafts of `python -m specjax.bench --drafts`, spelled as `--draft` of `python -m
specjax.decode` spells them (`specjax.job.drafts`): checked before any model loads, and
which rows each one has.

A draft that verifies a tree of its own shape (lookahead) has no chain rows and one tree
row of that tree per temperature; a horizontal cascade (cascade:NAME:K,CHEAP) has chain
rows only at gammas above K; a tree of `--trees` is decoded with each draft of `--drafts`
that grows trees of its kind (static shapes: a model, copy, bigram, layer-skip, heads;
dynamic ones: every draft but copy; retrieval drafts their trie, dynamic only; cascades and
copy+NAME none), as `python -m specjax.decode` would accept it.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Union

from specjax import checkpoints
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.core.tree import DynamicTree, TreeShape
from specjax.job import drafts as job_drafts
from specjax.job.config import DecodeConfig
from specjax.proposers.draft_names import lookahead_tree

Tree = Union[TreeShape, DynamicTree]
OWN_TREE = 'own tree'  # a tree row's label for the tree a draft verifies of itself
KINDS = ('copy, bigram, copy+NAME, layerskip:M, medusa[:PATH], eagle[:PATH], rest[:DIR], '
         'suffix, rest+suffix, lookahead[:W,N,G], cascade:NAME/CHEAP[/K[/C]], '
         'cascade:NAME:K,CHEAP, or a draft model (registry name or checkpoint directory)')


def parse_drafts(spec: str) -> List[str]:
  """The drafts of a comma-separated --drafts value, keeping a horizontal cascade's
  'cascade:NAME:K,CHEAP' (whose comma is its own) whole, and lookahead's W,N,G.

  Args:
    spec: e.g. 'copy,rest,lookahead:5,3,4,cascade:demo_draft:2,bigram'.

  Returns:
    ['copy', 'rest', 'lookahead:5,3,4', 'cascade:demo_draft:2,bigram'].
  """
  out: List[str] = []
  for part in spec.split(','):
    part = part.strip()
    joins = out and (part.isdigit() and job_drafts.is_lookahead(out[-1])
                     and out[-1].count(',') < 2
                     or _open_cascade(out[-1]) and not part.startswith(job_drafts.CASCADE))
    if joins:
      out[-1] += ',' + part
    elif part:
      out.append(part)
  return out


def _open_cascade(spec: str) -> bool:
  """Whether `spec` is 'cascade:NAME:K' waiting for its ',CHEAP'."""
  body = spec[len(job_drafts.CASCADE):] if spec.startswith(job_drafts.CASCADE) else ''
  name, colon, count = body.partition(':')
  return bool(name) and bool(colon) and count.isdigit()


def _known_model(name: str) -> bool:
  """Whether a model name can load without --draft-checkpoint: a checkpoint path, or a
  registry name with a bundled or published checkpoint."""
  return checkpoints.is_checkpoint_path(name) or name in DEFAULT_CHECKPOINTS


def check_drafts(specs: Sequence[str], target: str, max_decode_len: int,
                 vocab: Optional[str] = None, target_checkpoint: Optional[str] = None,
                 quick: bool = False) -> None:
  """The checks of --drafts that need no model, before any loads.

  Args:
    specs: the drafts (`parse_drafts`).
    target: --target (whose bundled datastore 'rest' means).
    max_decode_len: L (no tree of its own deeper than that).
    vocab, target_checkpoint: --vocab and --target-checkpoint; without them a datastore is
      checked against the vocabulary of the target's bundled pair now.
    quick: --quick, where every model name is the tiny draft (not checked).

  Raises:
    ValueError, FileNotFoundError: one line naming the draft, e.g. a lookahead:W,N,G out of
      range, a malformed cascade, a missing datastore, or an unknown name (with the kinds).
  """
  for spec in specs:
    try:
      if job_drafts.is_lookahead(spec):
        depth = lookahead_tree(spec).depth_count
        if depth > max_decode_len:
          raise ValueError(f'--draft {spec} verifies a tree {depth} deep, more than '
                           f'--max-decode-len {max_decode_len}: pass a smaller W and N or a '
                           'longer --max-decode-len')
        continue
      DecodeConfig(target=target, draft=spec, max_decode_len=max_decode_len, vocab=vocab,
                   target_checkpoint=target_checkpoint).check()
    except (ValueError, FileNotFoundError) as e:
      text = ' '.join(str(e).split())
      raise type(e)('--drafts ' + text[len('--draft '):] if text.startswith('--draft ')
                    else f'--drafts {spec}: {text}') from None
    name = job_drafts.model_name(spec)
    if name is not None and not quick and not _known_model(name):
      raise ValueError(f'--drafts {spec}: {name!r} is neither a draft kind nor a model with a '
                       f'checkpoint; pass one of {KINDS}')


def own_tree(draft) -> Optional[Tree]:
  """The tree a resolved draft verifies of its own shape (lookahead's), or None."""
  return draft.tree_spec() if hasattr(draft, 'tree_spec') else None


def chain_gammas(spec: str, draft, gammas: Sequence[int]) -> List[int]:
  """The gammas of a draft's chain rows: none for a draft with a tree of its own, those
  above K for a horizontal cascade (its first K drafts are the model's), else `gammas`."""
  if own_tree(draft) is not None:
    return []
  if spec.startswith(job_drafts.CASCADE):
    parsed = job_drafts.parse_cascade(spec)
    if not parsed.vertical:
      return [g for g in gammas if g > parsed.count]
  return list(gammas)


def per_chain_cost(spec: str) -> bool:
  """Whether a draft's c is its proposal of a chain of G over G (a cascade, REST, suffix,
  rest+suffix: `rows.proposal_seconds`) rather than one draft step."""
  return spec.startswith(job_drafts.CASCADE) or job_drafts.is_retrieval(spec)


def grows(spec: str, tree: Tree, target: str, max_decode_len: int) -> bool:
  """Whether `python -m specjax.decode --draft spec` accepts `tree` (its kind and depth);
  never for lookahead, which verifies its own tree (`own_tree`)."""
  if job_drafts.is_lookahead(spec):
    return False
  if isinstance(tree, DynamicTree):
    fields = dict(tree_nodes=tree.nodes, tree_depth=tree.depth, tree_top=tree.top)
  else:
    fields = dict(tree=','.join(map(str, tree.branching)))
  try:
    DecodeConfig(target=target, draft=spec, max_decode_len=max_decode_len,
                 **fields).check()
  except ValueError:
    return False
  return True
