"""The checks of a decode's tree flags (--tree, --tree-nodes, --tree-depth, --tree-top,
--tree auto), each a one-line error before anything loads."""
from __future__ import annotations

from specjax.job import drafts, tree_auto

AUTO = 'auto'  # --gamma auto, --tree auto
TREE_TOP = 4  # --tree-top's default


def _not_the_tree_rule(cfg) -> list:
  """The flags of cfg that ask for a rule other than the exact tree rule."""
  tree_rule = cfg.verification == 'token' or cfg.rule.typical is not None
  rules = [] if tree_rule else [f'--verification {cfg.verification}']
  return rules + (['--draft-threshold'] if cfg.draft_threshold > 0 else [])


def retrieval_tree_default(cfg):
  """The config of a command line, with --tree auto where it names a retrieval draft and
  no tree (nor --gamma, --auto-trees or a rule other than the exact tree rule).

  What rest and suffix propose is the trie of what they retrieve. A chain keeps only its
  heaviest path, so --gamma auto weighing chains alone would pass over it: on the bundled
  tasks REST's best trie keeps 1.29-1.46x the tokens per call of its best chain, the
  suffix draft's 1.01-1.08x (docs/benchmarks.md). --tree auto weighs the chains and the
  tries by the same calibration.
  """
  given = (cfg.tree, cfg.tree_nodes, cfg.tree_depth, cfg.auto_trees)
  if (not drafts.is_retrieval(cfg.draft) or any(v is not None for v in given)
      or cfg.gamma != AUTO or cfg.tree_top != TREE_TOP or _not_the_tree_rule(cfg)):
    return cfg
  return cfg.replace(tree=AUTO)


def given_tree_reason(cfg, tree) -> str:
  """Why --gamma auto calibrates nothing when cfg decodes with `tree` (a TreeShape or a
  DynamicTree) as given: its depth is the gamma; --tree auto is named where it applies
  (lookahead's tree is its own)."""
  if drafts.is_lookahead(cfg.draft):
    return (f'not calibrated: {cfg.draft} verifies its own tree of {tree.num_nodes} nodes '
            f'(gamma {tree.depth_count}, its depth); --draft lookahead:W,N,G shapes it')
  return (f'not calibrated: the tree is used as given (gamma {tree.depth_count}, its depth); '
          '--tree auto picks the chain or a tree by calibration')


def check_tree(cfg) -> None:
  """One-line ValueErrors for a tree that cannot run as asked (`DecodeConfig.check`).

  Args:
    cfg: the DecodeConfig.
  """
  if cfg.tree is not None and (cfg.tree_nodes is not None
                                or cfg.tree_depth is not None):
    raise ValueError('--tree (a static tree) and --tree-nodes/--tree-depth (a dynamic one) '
                     'exclude each other: pass one of them')
  if cfg.auto_trees is not None and cfg.tree != AUTO:
    raise ValueError(f'{tree_auto.FLAG} lists the candidates of --tree auto: pass --tree '
                     f'auto, or drop {tree_auto.FLAG}')
  if cfg.tree == AUTO:
    check_tree_auto(cfg)
    return
  if (cfg.tree_nodes is None) != (cfg.tree_depth is None):
    given, missing = (('--tree-nodes', '--tree-depth') if cfg.tree_depth is None
                      else ('--tree-depth', '--tree-nodes'))
    raise ValueError(f'{given} needs {missing}: a dynamic tree takes both, e.g. '
                     '--tree-nodes 8 --tree-depth 4')
  tree = cfg.token_tree
  if tree is None:
    if cfg.tree_top != TREE_TOP:
      raise ValueError('--tree-top shapes a dynamic tree: pass --tree-nodes and '
                       '--tree-depth with it, or drop it')
    return
  if cfg.tree is not None and cfg.tree_top != TREE_TOP:
    raise ValueError('--tree-top shapes a dynamic tree (--tree-nodes), not --tree: drop it')
  rules = _not_the_tree_rule(cfg)
  if rules:
    raise ValueError(f'a tree is verified by the exact tree rule: drop '
                     f'{" and ".join(rules)}, or drop the tree')
  if cfg.draft.startswith(drafts.CASCADE):
    raise ValueError(f'--draft {cfg.draft} is a cascade, which drafts chains: drop the tree')
  if cfg.draft.startswith(drafts.HYBRID):
    raise ValueError(f'--draft {cfg.draft} proposes chains only: trees need a draft model, '
                     'copy or bigram; pass --draft NAME, copy or bigram, or drop the tree')
  if cfg.draft == drafts.COPY and cfg.tree is None:
    raise ValueError('--draft copy grows static trees only (it has no probabilities to '
                     'grow a dynamic tree by): pass --tree B1,B2,.. instead of --tree-nodes')
  if drafts.is_retrieval(cfg.draft) and cfg.tree is not None:
    raise ValueError(f'--draft {cfg.draft} proposes the trie of what it retrieves, not a '
                     'fixed branching: pass --tree-nodes N --tree-depth D instead of --tree')
  depth = tree.depth_count
  if cfg.gamma != AUTO and cfg.gamma != depth:
    raise ValueError(f'--gamma {cfg.gamma} disagrees with the tree, which drafts {depth} '
                     f'tokens deep: drop --gamma (a tree\'s gamma is its depth, {depth}), or '
                     'drop the tree')
  if depth > cfg.max_decode_len:
    raise ValueError(f'the tree is {depth} deep, more than --max-decode-len '
                     f'{cfg.max_decode_len}: no output holds that many draft tokens; pass '
                     'a shallower tree or a longer --max-decode-len')

def check_tree_auto(cfg) -> None:
  """One-line ValueErrors for --tree auto that cannot run as asked (`check_tree`)."""
  if cfg.gamma != AUTO:
    raise ValueError(f'--tree auto picks the chain\'s gamma or a tree by --gamma auto\'s '
                     f'calibration: drop --gamma {cfg.gamma}, or pass a tree (--tree '
                     'B1,B2,.. or --tree-nodes N --tree-depth D) instead of auto')
  if cfg.tree_top != TREE_TOP:
    raise ValueError('--tree-top shapes a dynamic tree (--tree-nodes); with --tree auto '
                     f'write it into {tree_auto.FLAG} (dynamic:N:D:TOP): drop --tree-top')
  rules = _not_the_tree_rule(cfg)
  if rules:
    raise ValueError(f'--tree auto may pick a tree, which the exact tree rule verifies: drop '
                     f'{" and ".join(rules)}, or drop --tree auto')
  if cfg.draft.startswith((drafts.CASCADE, drafts.HYBRID)):
    raise ValueError(f'--draft {cfg.draft} proposes chains only: --tree auto needs a '
                     'draft that grows trees (a draft model, copy, bigram, layerskip, '
                     'medusa, eagle, rest, suffix); drop --tree auto (--gamma auto '
                     'calibrates the chain)')
  trees = tree_auto.parse(cfg.auto_trees)
  if cfg.auto_trees is not None:
    wrong = (tree_auto.of_kinds(trees, static=False, dynamic=True)
             if cfg.draft == drafts.COPY else
             tree_auto.of_kinds(trees, static=True, dynamic=False)
             if drafts.is_retrieval(cfg.draft) else [])
    if wrong:
      kind, other = (('static trees only', 'dynamic') if cfg.draft == drafts.COPY else
                     ('the trie of what it retrieves (dynamic trees) only', 'static'))
      raise ValueError(f'--draft {cfg.draft} grows {kind}: drop the {other} '
                       f'{", ".join(tree_auto.label(t) for t in wrong)} from '
                       f'{tree_auto.FLAG}')
