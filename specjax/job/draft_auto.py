"""`--draft auto`: no draft model; `--gamma auto` picks among the proposers that need none.

The candidates (`--auto-drafts`, default `DEFAULT` less those the target lacks: `bigram`
needs a bigram table, `rest` a datastore) are each calibrated as `--gamma auto` calibrates
one draft: a chain's gamma by the paper's formula from c, v(K) and alpha measured here
(`calibrate.choose_gamma`; with `--tree auto`, the chain or one of the trees the proposer
grows, `calibrate.choose_tree`), lookahead's own tree as it is; each one's choice is timed
against the target alone on the same inputs. The proposer measured fastest decodes; the
target alone does when none is faster. The choice is cached and reused as gamma's is.
"""
from __future__ import annotations

from typing import Callable, List, Optional

import jax
import numpy as np

from specjax.core import api
from specjax.core.figures import decode_figures
from specjax.job import calibrate, drafts, tree_auto

AUTO = 'auto'
FLAG = '--auto-drafts'
# The proposers with no draft model, in the order they are tried.
DEFAULT = ('copy', 'bigram', 'suffix', 'rest', 'rest+suffix', 'lookahead')
KINDS = ('copy, bigram[:TABLE], suffix, rest[:DIR], rest[:DIR]+suffix or '
         'lookahead[:W,N,G]')


def is_draft_free(spec: str) -> bool:
  """Whether `spec` names a proposer with no draft model (`KINDS`)."""
  return (spec == drafts.COPY or drafts.is_bigram(spec) or drafts.is_retrieval(spec)
          or drafts.is_lookahead(spec))


def candidates(job) -> List[str]:
  """The proposers `--draft auto` weighs: --auto-drafts' (';'-separated, in order, without
  repeats), or `DEFAULT` less bigram where no table is given or bundled for the target
  and rest and rest+suffix where no datastore is bundled.

  Raises:
    ValueError: an empty list or item, or a kind that is not `KINDS` (one line).
  """
  if job.auto_drafts is None:
    from specjax.datastore import store  # pylint: disable=import-outside-toplevel
    has = {drafts.BIGRAM: bool(job.draft_checkpoint) or job.target in drafts.DEFAULT_BIGRAMS,
           drafts.REST: job.target in store.DEFAULT_DATASTORES}
    return [s for s in DEFAULT if has.get(s.split('+')[0], True)]
  items = [s.strip() for s in job.auto_drafts.split(';')]
  if not job.auto_drafts.strip() or not all(items):
    raise ValueError(f'{FLAG}: an empty proposer in {job.auto_drafts!r}; list {KINDS}, '
                     'separated by ";"')
  wrong = [s for s in items if not is_draft_free(s)]
  if wrong:
    raise ValueError(f'{FLAG}: {", ".join(wrong)} needs a draft model or is no proposer; '
                     f'--draft auto weighs only those that need none: {KINDS}')
  return list(dict.fromkeys(items))


def check(job) -> None:
  """The one-line ValueErrors of --draft auto that cannot run as asked, before any model
  loads: a fixed gamma, a given tree, flags of a draft model, and bad candidates (each
  checked as `--draft` would check it)."""
  if job.gamma != AUTO:
    raise ValueError(f'--draft auto picks a proposer by --gamma auto\'s calibration: drop '
                     f'--gamma {job.gamma}, or name a proposer with --draft')
  given = [f for f, v in (('--tree', job.tree if job.tree != AUTO else None),
                          ('--tree-nodes', job.tree_nodes), ('--tree-depth', job.tree_depth),
                          ('--draft-vocab', job.draft_vocab)) if v is not None]
  if given:
    raise ValueError(f'--draft auto calibrates each proposer\'s chain (with --tree auto, its '
                     f'trees too): drop {" and ".join(given)}')
  for spec in candidates(job):
    resolved(job, spec).check()


def choose(job, target, tp, vocab, probe, mesh, rules, most: Callable, check_fits: Callable,
           rule: dict, echo: Optional[Callable[[str], None]] = None) -> tuple:
  """Calibrates every candidate (module doc) and picks the one measured fastest.

  Args:
    job: the run's config (--draft auto).
    target, tp, vocab: the loaded target, its params and vocabulary.
    probe: [U, S] the inputs the candidates decode and are timed on (the first B of them
      the batch c and v(K) are measured on).
    mesh, rules: the run's mesh (None: one device) and axis rules.
    most: draft -> the deepest chain --gamma auto considers for it.
    check_fits: (config, draft) -> None, the memory check of a candidate (raises).
    rule: the verification rule's keywords.
    echo: called with a line as each candidate is done (progress), or None.

  Returns:
    (spec, gamma, tree, reason, calibration): the chosen proposer's --draft spec, its
    gamma (0: the target alone), its tree as `tree_auto.to_json` writes it (None: a chain),
    a one-line explanation naming every candidate's measured speedup, and the
    measurements, JSON-able ('candidates': each one's 'draft', 'gamma', 'tree', 'alpha'
    (of its probe decode; None for lookahead), 'tokens_per_call' (of the tree decoded;
    None for a chain), 'predicted_speedup' (None for lookahead), 'measured_speedup';
    'chosen').
  """
  rows = []
  kw = dict(mesh=mesh, rules=rules, slots=job.batch_size if job.refill else None)
  for spec in candidates(job):
    draft, dp = resolve(job, spec, target, vocab)
    one = resolved(job, spec)
    check_fits(one, draft)
    rows.append(_calibrated(one, spec, target, tp, draft, dp, probe, most(draft), kw, rule))
    if echo:
      echo(f'--draft auto: {spec} measures {rows[-1]["measured_speedup"]:.2f}x')
  best = max(range(len(rows)), key=lambda i: (rows[i]['measured_speedup'], -i))
  pick = rows[best]
  faster = pick['measured_speedup'] >= 1.0
  if not faster:  # the target alone decodes; the draft named is a chain's where one was
    pick = next((r for r in sorted(rows, key=lambda r: -r['measured_speedup'])
                 if not drafts.is_lookahead(r["draft"])), pick)
  listed = ', '.join(f'{r["draft"]} ({_plan(r)}) {r["measured_speedup"]:.2f}x' for r in rows)
  found = (f'each proposer with no draft model calibrated as --gamma auto calibrates one and '
           f'timed against the target alone on {len(probe)} inputs: {listed}')
  reason = (f'{found}; {pick["draft"]} ({_plan(pick)}) measures fastest, so it decodes' if
            faster else f'{found}; none is faster than the target alone, so gamma 0: the '
            f'target alone decodes (--draft {pick["draft"]} named)')
  calibration = {'candidates': rows, 'chosen': pick['draft'] if faster else 'target alone'}
  return (pick['draft'], pick['gamma'] if faster else 0, pick['tree'] if faster else None,
          reason, calibration)


def _no_model(name: str):
  raise ValueError(f'--draft auto weighs proposers with no draft model; {name} is one')


def resolve(job, spec: str, target, vocab) -> tuple:
  """(draft, params) of the candidate `spec` for `target` (as `--draft spec` resolves it)."""
  return drafts.resolve_draft(spec, target, job.target, _no_model,
                              table=job.draft_checkpoint, vocab=vocab)


def resolved(job, spec: str, tree: Optional[dict] = None):
  """The config of --draft auto resolved to the candidate `spec`: --draft spec, and with
  --tree auto the `tree` chosen for it (`tree_auto.to_json`'s; None: a chain; lookahead
  keeps its own; no tree given: --tree auto still to choose, as on a resumed run)."""
  own = drafts.is_lookahead(spec)  # its own tree: no tree flags
  one = job.replace(draft=spec, auto_drafts=None, tree=None if own else job.tree,
                    auto_trees=None if own else job.auto_trees)
  return one.with_tree(tree) if one.tree == AUTO and tree is not None else one


def _plan(row: dict) -> str:
  """What a candidate decoded with, in words."""
  tree = tree_auto.from_json(row['tree'])
  if drafts.is_lookahead(row['draft']):
    return f'its own tree of {tree.num_nodes} nodes'
  return tree_auto.describe(row['gamma'], tree) if row['gamma'] else 'gamma 0'


def _calibrated(job, spec, target, tp, draft, dp, probe, most, kw, rule) -> dict:
  """One candidate's row: its plan (gamma, tree), tokens per call and speedups."""
  batch = probe[:job.batch_size]
  if drafts.is_lookahead(spec):  # its own tree: nothing to choose, timed as it is
    tree, last = job.token_tree, []

    def decode():  # its figures are those of the last timed decode (each decodes alike)
      last[:] = [api.speculative_decode(target, tp, draft, dp, probe, gamma=tree.depth_count,
                                        tree=tree, max_decode_len=job.max_decode_len,
                                        sampling=job.sampling, **kw, **rule)]
      return last[0]

    spec_tps, alone = calibrate.tokens_per_second(
        [decode, lambda: api.autoregressive_decode(target, tp, probe,
                                                   max_decode_len=job.max_decode_len,
                                                   sampling=job.sampling, **kw)], passes=3)
    figures = decode_figures(jax.tree.map(np.asarray, last[0].stats))
    return dict(draft=spec, gamma=tree.depth_count, tree=tree_auto.to_json(tree), alpha=None,
                tokens_per_call=float(figures.tokens_per_call), predicted_speedup=None,
                measured_speedup=spec_tps / alone)
  common = dict(max_gamma=most, probe_gamma=min(4, most), probe=probe, **kw, **rule)
  if job.tree == AUTO:
    trees = tree_auto.fit(job.auto_tree_candidates, job.max_decode_len)
    _, _, _, cal = calibrate.choose_tree(target, tp, draft, dp, batch, job.sampling,
                                         job.max_decode_len, trees, **common)
    row = next(r for r in cal['candidates'] if r['name'] == cal['choice'])
    return dict(draft=spec, gamma=row['gamma'], tree=row['tree'], alpha=cal['alpha'],
                tokens_per_call=row['tokens_per_call'],
                predicted_speedup=cal['predicted_speedup'],
                measured_speedup=cal['measured_speedup'])
  _, _, costs = calibrate.choose_gamma(target, tp, draft, dp, batch, job.sampling,
                                       job.max_decode_len, **common)
  return dict(draft=spec, gamma=costs['predicted_best'], tree=None, alpha=costs['alpha'],
              tokens_per_call=None,
              predicted_speedup=costs['predicted_speedup'],
              measured_speedup=costs['measured_speedup'])
