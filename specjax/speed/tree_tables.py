"""The token-tree section of `python -m specjax.plan --speed`'s report (docs/tpu_speed.md):
the tree verify, draft and iteration costs beside the chain's, and the predicted speedup
of a tree against the chain as a function of its tokens per target call."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

from specjax.core import theory
from specjax.core.state import LoopConfig
from specjax.core.tree import TreeShape
from specjax.speed import paper, predict, report_tables as tables
from specjax.speed.predict import GAMMAS
from specjax.speed.programs import ITERATION_GAMMAS, VERIFY_TOKENS, ProgramRow


def _tree_label(shape: Tuple[int, ...]) -> str:
  return f'tree N={TreeShape(shape).num_nodes} ({",".join(map(str, shape))})'


def _draft_calls(shape: Tuple[int, ...]) -> str:
  """The token counts of the draft's calls that grow a static tree: the catch-up pair,
  then the nodes of each depth but the last."""
  return ' + '.join(['2'] + [str(n) for n in TreeShape(shape).level_sizes()[:-1]])


def tree_section(grid, rows: Mapping[tuple, ProgramRow], summary: Dict[str, Any],
                 recompiled: Optional[Mapping[tuple, ProgramRow]] = None) -> str:
  """The target's tree verify of N = 8, 16, 32 beside its chain verify of K = 1..9, the
  draft's calls of a tree beside a chain block's, and the predicted speedup of a tree over
  the target alone and against the chain as a function of E (one chip, greedy).

  `recompiled`: the target's chain calls compiled again beside the trees (rows of an
  earlier run with trees added later); where given they stand for the grid's in this
  section's comparisons (the chain's whole iterations stay the grid's).
  """
  if not grid.trees:
    return ''
  recompiled = dict(recompiled or {})
  beside = {**rows, **recompiled} if recompiled else rows
  s = grid.tasks[0][1]
  es = predict.TREE_TOKENS_PER_CALL
  lines = [
      '## 8. Token trees on TPU v4 (one chip, greedy, EnDe input)', '',
      'A token tree of N nodes is verified by ONE target call of the root and the N nodes '
      '(K = N + 1 tokens, each seeing its ancestors through the tree mask: '
      '`tree_steps.verify_tree`), compiled like the chain\'s verify of K tokens, with the '
      'caches of a decode of that tree (1 + L + N + 1 positions; the chain\'s hold 1 + L + '
      '7 + 1). The draft grows a static tree (`tree_draft.propose`) with D calls: its '
      'catch-up call of two tokens, then one call per further depth of that depth\'s nodes '
      'with the tree mask, each followed by its top-k; these are compiled as ONE program '
      '(no loop inside: every call is counted). The tree\'s whole iteration '
      '(`tree_steps.tree_step`: grow, verify, the tree rule, the accepted path moved into '
      'place in both caches, commit) is compiled too. The static shapes (children per '
      'depth): ' + ', '.join(sorted({f'({",".join(map(str, shape))}) N = '
                                     f'{TreeShape(shape).num_nodes}'
                                     for t in grid.trees for shape in t.shapes},
                                    key=lambda x: int(x.split('= ')[1]))) +
      '; a tree of depth D reaches E = D + 1 tokens per call at most. v = t(call) / '
      't(one-token verify); d = t(the draft\'s calls of one iteration) / t(target step). The '
      'chain\'s rows are those of sections 1-7 where not said otherwise below.', '']
  out: Dict[str, Any] = {'tokens_per_call': list(es), 'settings': []}
  for trees in grid.trees:
    pair_index = next(i for i, (t, _, _) in enumerate(grid.pairs) if t == trees.target)
    drafts = grid.pairs[pair_index][1]
    alphas = [(task, a) for task, t, a in tables.paper_alphas(drafts.index(trees.draft)) if t == 0]
    cache = LoopConfig(gamma=max(ITERATION_GAMMAS), max_decode_len=grid.max_decode_len)
    found = []
    for batch in trees.batches:
      grid_chain = tables.prediction(grid, rows, trees.target, trees.draft, batch, s, (1, 1),
                                     True)
      chain = tables.prediction(grid, beside, trees.target, trees.draft, batch, s, (1, 1),
                                True)
      if grid_chain is None or chain is None:
        continue
      made = [(shape, predict.TreePrediction.from_rows(
          rows, chain, trees.target, trees.draft, TreeShape(shape).num_nodes, batch, s,
          grid.max_decode_len, (1, 1))) for shape in trees.shapes]
      made = [(shape, t) for shape, t in made if t is not None]
      if made:
        found.append((batch, chain, made, grid_chain))
    if not found:
      continue
    lines += [f'### {trees.target} verifying, {trees.draft} drafting', '']
    ratios = []  # (bytes, flops) of a recompiled chain call over the grid's
    for batch, _, _, _ in found:
      for key, row in recompiled.items():
        if key[0] == trees.target and key[3] == batch and key in rows:
          ratios.append((row.bytes / rows[key].bytes, row.flops / rows[key].flops))
    if ratios:
      lines += [f'The target\'s chain calls of this section ({len(ratios)}: its step and its '
                'verify of K = 1..9 at each B) were compiled again beside the trees, by the '
                'same code and compiler (`python scripts/tpu_tree_speed.py --check`, kept as '
                'the rows\' "recompiled"): they read '
                f'{min(b for b, _ in ratios):.4f}-{max(b for b, _ in ratios):.4f} times the '
                'bytes of the rows of sections 1-7 (the grid\'s earlier run), flops within '
                f'{max(abs(f - 1) for _, f in ratios) * 100:.2f}%, and stand for them here; '
                'the chain\'s whole iterations are the grid\'s.', '']
    # The target's calls.
    lines += [f'The target\'s calls ({trees.target}):', '',
              '| B | call | tokens | cache | GB accessed | GFLOP | roofline ms | bound | v |' +
              (' sections 1-7: GB accessed |' if ratios else ''),
              '|' + '---|' * (10 if ratios else 9)]
    for batch, chain, made, _ in found:
      one = chain.seconds(chain.costs.verify[1])
      key = lambda program, k: (trees.target, program, k, batch, s, grid.max_decode_len,
                                (1, 1), True)
      calls = [('step (one token and its pick)', 1, cache.width(1), chain.costs.target_step,
                key('step', 1))]
      calls += [(f'chain verify K={k}', k, cache.width(1), chain.costs.verify[k],
                 key('verify', k)) for k in VERIFY_TOKENS]
      calls += [(_tree_label(shape), t.nodes + 1,
                 LoopConfig(gamma=len(shape), max_decode_len=grid.max_decode_len,
                            tree=TreeShape(shape)).width(1), t.verify, None)
                for shape, t in made]
      for name, tokens, width, cost, grid_key in calls:
        line = (f'| {batch} | {name} | {tokens} | {width} | {cost.bytes / 1e9:.3f} | '
                f'{cost.flops / 1e9:.2f} | {chain.seconds(cost) * 1e3:.3f} | '
                f'{cost.bound(chain.device)} | {chain.seconds(cost) / one:.3f} |')
        if ratios:
          line += (f' {rows[grid_key].bytes / 1e9:.3f} |' if grid_key in rows else ' |')
        lines.append(line)
    # The draft's calls.
    lines += ['', f'The draft\'s calls of one iteration ({trees.draft}); a chain block of '
              'gamma G is its first call (two tokens) and G - 1 one-token steps (costed '
              'apart and added), a tree\'s its compiled growth:', '',
              '| B | draft | calls (tokens each) | GB accessed | GFLOP | roofline ms | d |',
              '|' + '---|' * 7]
    chain_gammas = (4, 7)
    for batch, chain, made, _ in found:
      c = chain.costs
      for g in chain_gammas:
        cost = c.draft_first + c.draft_step.scaled(g - 1)
        lines.append(f'| {batch} | chain G={g} | 2 + {g - 1} x 1 | {cost.bytes / 1e9:.3f} | '
                     f'{cost.flops / 1e9:.2f} | {chain.seconds(cost) * 1e3:.3f} | '
                     f'{predict.chain_draft_units(chain, g):.4f} |')
      for shape, t in made:
        lines.append(f'| {batch} | {_tree_label(shape)} | {_draft_calls(shape)} | '
                     f'{t.draft.bytes / 1e9:.3f} | {t.draft.flops / 1e9:.2f} | '
                     f'{chain.seconds(t.draft) * 1e3:.3f} | {t.d:.4f} |')
    # The speedups.
    alpha_text = ' and '.join(f'{a:.2f} ({paper.TASKS[task]})' for task, a in alphas)
    lines += ['', f'Predicted speedup over the target alone, S = E / (d + v) at E tokens per '
              'target call (the paper\'s E / (G c + v), G c the draft\'s calls of one '
              'iteration); in brackets the same over the whole compiled iteration, the '
              'loop\'s own work included: E t(target alone) / t(iteration) (a chain\'s '
              'iteration as in sections 4-7). A chain of gamma G reaches E = (1 - '
              'alpha^(G+1)) / (1 - alpha); what a tree reaches is the measured tokens per '
              'call of a tree decode (`tokens_per_call` of its output). "E to match" is the E '
              'at which the tree equals the chain\'s best S over gamma 1..8 at the paper\'s '
              f'greedy {trees.draft} alphas {alpha_text} (same formula).', '',
              '| B | decode | d | v | d + v | loop share | ' +
              ' | '.join(f'S at E={e:g}' for e in es) + ' | ' +
              ' | '.join(f'E to match a={a:.2f}' for _, a in alphas) + ' |',
              '|' + '---|' * (6 + len(es) + len(alphas))]
    for batch, chain, made, grid_chain in found:
      best = {a: predict.chain_best(chain, a) for _, a in alphas}
      for g in chain_gammas:
        d, v = predict.chain_draft_units(chain, g), chain.v(g + 1)
        cells = [f'{predict.chain_speedup(chain, g, e):.2f} ('
                 f'{e * grid_chain.alone_seconds / grid_chain.iteration_seconds(g):.2f})'
                 for e in es]
        lines.append(f'| {batch} | chain G={g} | {d:.3f} | {v:.3f} | {d + v:.3f} | '
                     f'{grid_chain.loop_share(g):.3f} | ' + ' | '.join(cells) + ' | ' +
                     ' | '.join('' for _ in alphas) + ' |')
      for shape, t in made:
        share = t.loop_share
        cells = [f'{t.speedup(e):.2f}' + ('' if share is None else
                                          f' ({t.speedup_with_loop(e):.2f})') for e in es]
        match = {a: best[a][1] * (t.d + t.v) for _, a in alphas}
        lines.append(f'| {batch} | {_tree_label(shape)} | {t.d:.3f} | {t.v:.3f} | '
                     f'{t.d + t.v:.3f} | {"" if share is None else f"{share:.3f}"} | ' +
                     ' | '.join(cells) + ' | ' + ' | '.join(f'{match[a]:.2f}' for _, a in alphas)
                     + ' |')
        out['settings'].append(dict(
            target=trees.target, draft=trees.draft, batch=batch, shape=list(shape),
            nodes=t.nodes, verify_bytes=t.verify.bytes, verify_flops=t.verify.flops,
            verify_seconds=chain.seconds(t.verify), v=t.v, draft_bytes=t.draft.bytes,
            draft_seconds=chain.seconds(t.draft), d=t.d, loop_share=share,
            speedup={str(e): t.speedup(e) for e in es},
            speedup_with_loop=None if share is None else {
                str(e): t.speedup_with_loop(e) for e in es},
            against_chain={str(a): {str(e): t.speedup(e) / best[a][1] for e in es}
                           for _, a in alphas},
            tokens_to_match={str(a): match[a] for _, a in alphas}))
      out.setdefault('chain', []).append(dict(
          target=trees.target, draft=trees.draft, batch=batch,
          verify_seconds=chain.seconds(chain.costs.verify[1]),
          v=[chain.v(k) for k in VERIFY_TOKENS],
          d={g: predict.chain_draft_units(chain, g) for g in GAMMAS},
          best={str(a): dict(gamma=best[a][0], speedup=best[a][1],
                             tokens_per_call=theory.expected_tokens_per_call(a, best[a][0]))
                for _, a in alphas}))
    shares = [(batch, t.loop_share, grid_chain.loop_share(max(chain_gammas)))
              for batch, _, made, grid_chain in found for _, t in made
              if t.loop_share is not None]
    if shares:
      lines += ['', 'The loop share is what the compiled iteration costs beyond its draft calls '
                'and its verify: for a tree the tree rule, the accepted path moved into place '
                'in both caches (`tree.compact`: a per-row slice, pick and update along the '
                'cache\'s length) and the commit; ' + '; '.join(
                    f'B={b}: trees {min(x for bb, x, _ in shares if bb == b):.3f}-'
                    f'{max(x for bb, x, _ in shares if bb == b):.3f}, chain G='
                    f'{max(chain_gammas)} {next(c for bb, _, c in shares if bb == b):.3f}'
                    for b in sorted({b for b, _, _ in shares})) + '.']
    # Tree against chain.
    lines += ['', 'Tree against chain: the tree\'s S at E over the chain\'s best S at the '
              'paper\'s alpha (same formula; above 1 the tree is predicted faster).', '',
              '| B | tree | alpha | chain best G | chain E | chain S | ' +
              ' | '.join(f'E={e:g}' for e in es) + ' |', '|' + '---|' * (6 + len(es))]
    for batch, chain, made, _ in found:
      for shape, t in made:
        for _, a in alphas:
          g, best_s = predict.chain_best(chain, a)
          lines.append(f'| {batch} | {_tree_label(shape)} | {a:.2f} | {g} | '
                       f'{theory.expected_tokens_per_call(a, g):.2f} | {best_s:.2f} | ' +
                       ' | '.join(f'{t.speedup(e) / best_s:.2f}' for e in es) + ' |')
    lines.append('')
  summary['trees'] = out
  return '\n'.join(lines) + '\n'
