"""The bench report's rows beyond the draft model's chain: the other drafts and rules
(`--drafts`, `--verifications`, ...), the token trees, lenience and --gamma auto, as
markdown and as terminal tables."""
from __future__ import annotations

from typing import List

from specjax.bench.kinds import OWN_TREE


def fmt(value, digits=2) -> str:
  """A number for the report, or 'n/a' for a figure that could not be measured."""
  return 'n/a' if value is None else f'{value:.{digits}f}'


_VARIANT_COLUMNS = ('draft', 'verification', 'draft_threshold', 'threshold_rule', 'gamma',
                    'temperature', 'alpha', 'tokens_per_call', 'drafted_per_call', 'c',
                    'tokens_per_second', 'speedup', 'loop_speedup', 'predicted_speedup',
                    'identical_to_target')


def cell(value) -> str:
  return fmt(value, 3) if isinstance(value, float) or value is None else str(value)


def table(rows, columns) -> List[str]:
  lines = ['| ' + ' | '.join(columns) + ' |', '|' + '---|' * len(columns)]
  lines += ['| ' + ' | '.join(cell(r.get(c)) for c in columns) + ' |' for r in rows]
  return lines + ['']


def beyond_the_draft(result: dict) -> List[str]:
  """The report's sections on other drafts, verification rules, dynamic gamma, lenience
  and --gamma auto (empty for a bench run without them)."""
  lines = []
  if result.get('variants'):
    lines += ['## Other drafts, block verification, dynamic gamma', '',
              'The same inputs and timing as the table above. `copy` proposes the token after '
              'the longest earlier match of the output\'s last tokens in the source or the '
              'output (a point mass: exact); `bigram` draws from a table of next-token '
              'counts; `copy+NAME` copies where it matches and asks NAME elsewhere; `rest` '
              'retrieves continuations from the target\'s datastore, `suffix` from the row\'s '
              'own earlier text, `rest+suffix` one trie of both; `cascade:NAME/CHEAP` is '
              'NAME\'s chain drafted by CHEAP and verified by NAME, `cascade:NAME:K,CHEAP` '
              'NAME\'s first K drafts then CHEAP\'s (rows at gammas above K only). c: the '
              'draft\'s step over the target\'s (c_timed in the JSON: for rest, suffix and '
              'cascades one proposal of G tokens over G, whose proposal is no G steps); '
              'predicted_speedup: the paper\'s formula at the row\'s alpha, gamma, c and v. '
              'Lookahead verifies a tree of its own: its rows are under "Token-tree rows". Block '
              'verification accepts the draft as a whole (exact; greedy rows are the token '
              'rule\'s, so only sampled rows are shown). With a draft threshold each row '
              'stops drafting at its first draft token whose probability (threshold_rule '
              'token) or the product of its probabilities so far (cumulative) is below it, '
              'and the target scores only as far as the longest proposal '
              '(drafted_per_call: tokens proposed per target call, of at most gamma).', '']
    lines += table(result['variants'], _VARIANT_COLUMNS)
    dynamic = [r for r in result['variants'] if r['draft_threshold'] > 0]
    for t in sorted({r['temperature'] for r in dynamic}):
      fixed = [r for r in result['rows'] + result['variants'] if r['temperature'] == t and
               r.get('draft_threshold', 0) == 0 and r.get('verification', 'token') == 'token'
               and r.get('draft', result['draft']) == result['draft']]
      best_fixed = max(fixed, key=lambda r: r['speedup'])
      best_dyn = max((r for r in dynamic if r['temperature'] == t), key=lambda r: r['speedup'])
      saved = best_dyn['gamma'] - best_dyn['drafted_per_call']
      lines += [f'- T={t}: the best threshold ({best_dyn["draft_threshold"]} '
                f'{best_dyn.get("threshold_rule") or "token"}, at most '
                f'{best_dyn["gamma"]} drafts, {best_dyn["drafted_per_call"]:.2f} proposed per '
                f'call: {saved:.2f} draft steps saved per call) runs '
                f'{best_dyn["speedup"]:.2f}x; the best fixed gamma '
                f'({best_fixed["gamma"]}) {best_fixed["speedup"]:.2f}x.']
    lines += ['']
  if result.get('trees'):
    lines += tree_section(result)
  if result.get('lenience'):
    lines += ['## Lenience: speed against quality (T=1, lossy below 1)', '']
    lines += table(result['lenience'], ('lenience', 'gamma', 'alpha', 'tokens_per_call',
                                         'tokens_per_second', 'speedup', 'bleu'))
  if result.get('gamma_auto'):
    lines += ['## --gamma auto at several batch sizes', '',
              '`python -m specjax.decode --gamma auto` on the same inputs (refill on): the '
              'gamma it picks (0: the target alone, when speculation measured slower on a '
              'probe) and the run\'s speedup over the target alone.', '']
    lines += table(result['gamma_auto'], ('batch_size', 'gamma', 'speedup',
                                           'tokens_per_second', 'baseline_tokens_per_second'))
    lines += [f'- batch {r["batch_size"]}: {r["gamma_reason"]}' for r in result['gamma_auto']]
    lines += ['']
  return lines


_TREE_COLUMNS = ('draft', 'tree', 'nodes', 'depth', 'temperature', 'alpha', 'tokens_per_call',
                 'nodes_per_call', 'seconds', 'tokens_per_second', 'speedup',
                 'identical_to_target')


def tree_section(result: dict) -> List[str]:
  """The report's section on the --trees rows, each against the best gamma row (by tokens
  per target call) at its temperature."""
  lines = ['## Token-tree rows (--trees)', '',
           'The same inputs, each tree decode timed against the target alone in interleaved '
           'rounds as the rows above are. A static tree (children per depth, e.g. 4,1,1) '
           'verifies N = b1 + b1 b2 + ... nodes in one target call; dynamic:N:D:K grows N '
           'nodes per row from the draft\'s cumulative probabilities (EAGLE-2: depth D, K '
           'expanded per depth). nodes_per_call: nodes the target verified per call; '
           'alpha: the acceptance of the first child tried at each depth reached (a '
           'chain\'s alpha when the tree is a chain). The trees are decoded with the draft '
           'model and each draft of --drafts that grows them (rest and suffix their trie, '
           'dynamic trees only; copy static ones); `own tree` is the tree a draft verifies of '
           'its own shape (lookahead:W,N,G: its Jacobi window and n-grams, in the same '
           'target call: no draft call, so no c, and the formula does not apply).', '']
  lines += table(result['trees'], _TREE_COLUMNS)
  model = result['draft']
  for t in sorted({r['temperature'] for r in result['trees']}):
    for name in dict.fromkeys(r.get('draft', model) for r in result['trees']):
      trees = [r for r in result['trees'] if r['temperature'] == t
               and r.get('draft', model) == name]
      chains = [r for r in result['rows'] if r['temperature'] == t] if name == model else [
          r for r in result.get('variants', []) if r['temperature'] == t
          and r['draft'] == name and r['draft_threshold'] == 0
          and r['verification'] == 'token']
      if not trees:
        continue
      tree = max(trees, key=lambda r: r['tokens_per_call'])
      best = (f'the best tree ({tree["tree"]}, {tree["nodes"]} nodes)' if len(trees) > 1
              or tree['tree'] != OWN_TREE else f'its own tree ({tree["nodes"]} nodes)')
      if chains:
        chain = max(chains, key=lambda r: r['tokens_per_call'])
        lines.append(f'- {name}, T={t}: {best} makes '
                     f'{tree["tokens_per_call"]:.2f} tokens per target call, '
                     f'{tree["tokens_per_call"] / chain["tokens_per_call"]:.2f}x the best '
                     f'gamma\'s ({chain["gamma"]}: {chain["tokens_per_call"]:.2f}); speedup '
                     f'{tree["speedup"]:.2f}x against {chain["speedup"]:.2f}x on this machine.')
      else:
        lines.append(f'- {name}, T={t}: {best} makes {tree["tokens_per_call"]:.2f} tokens '
                     f'per target call; speedup {tree["speedup"]:.2f}x on this machine.')
  return lines + ['']



def format_variants(result: dict) -> str:
  """The rows of other drafts, verification rules and dynamic gamma as a markdown table
  ('' without them)."""
  return '\n'.join(table(result['variants'], _VARIANT_COLUMNS)) if result.get('variants') else ''


def format_trees(result: dict) -> str:
  """The --trees rows as a markdown table ('' without them)."""
  return '\n'.join(table(result['trees'], _TREE_COLUMNS)) if result.get('trees') else ''
