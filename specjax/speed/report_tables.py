"""The prediction tables of docs/tpu_speed.md: the paper's Table 2 predicted beside
measured, v(K) and c, the speedup over gamma 1..8, batch 8 and 32, and token trees."""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple

from specjax.speed import paper, predict, t5x_peer
from specjax.speed.predict import GAMMAS, PairCosts, Prediction
from specjax.speed.programs import VERIFY_TOKENS, ProgramRow
from specjax.speed.roofline import V4_CHIP, V4_CORE

_FLAN = ('Flan-T5 XXL with Flan-T5 small/base/large has the architecture of T5 1.1 XXL with '
         'T5 1.1 small/base/large (`flan_t5_*` in the registry): its programs, and so its '
         'predictions at the same alphas, are those of the t5_xxl rows.')


def device_of(mesh: Tuple[int, int]):
  """The hardware a device of a mesh stands for (one core: a chip; a slice: a core)."""
  return V4_CHIP if tuple(mesh) == (1, 1) else V4_CORE


def prediction(grid, rows: Mapping[tuple, ProgramRow], target: str, draft: str, batch: int,
               input_len: int, mesh: Tuple[int, int], greedy: bool) -> Optional[Prediction]:
  """The Prediction of one setting, or None where its programs were not all measured."""
  try:
    costs = PairCosts.from_rows(rows, target, draft, batch, input_len, grid.max_decode_len,
                                mesh, greedy)
  except KeyError:
    return None
  if len(costs.verify) < len(VERIFY_TOKENS):
    return None
  return Prediction(costs, device_of(mesh))


def _draft_of(grid, pair_index: int, paper_draft: str) -> str:
  drafts = grid.pairs[pair_index][1]
  return drafts[min(paper.DRAFTS.index(paper_draft), len(drafts) - 1)]


def _input_len(grid, task: str) -> int:
  return dict(grid.tasks)[task]


def table2_section(grid, rows: Mapping[tuple, ProgramRow], summary: Dict[str, Any]) -> str:
  """Every (task, draft, temperature) cell of the paper's Table 2, ours beside theirs."""
  lines = ['## 4. The paper\'s Table 2: predicted beside measured (batch 1, one chip)', '',
           'Each cell of the paper\'s Table 2 (T5-XXL target, its alpha and gamma, measured '
           'against T5X on one TPU v4 chip; its Table 4 expected speedup from its own c). '
           'Ours: c from the compiled programs, the predicted speedup at the paper\'s gamma '
           '(over our target alone, and over real T5X\'s decode step), the ratio of the '
           'prediction to the paper\'s measurement, and the gamma we predict best.', '']
  cells_out: List[dict] = []
  for index, (target, _, _) in enumerate(grid.pairs):
    note = ('the paper\'s pairs' if index == 0 else
            'out-of-box pair (never measured by the paper: its alphas are the 1.1 pairs\')')
    lines += [f'### {target} ({note})', '',
              '| task | draft | T | alpha | paper gamma | paper speedup | paper expected | '
              'paper c | our c | predicted | predicted / paper | best gamma | at best | '
              'over T5X |', '|' + '---|' * 14]
    for cell in paper.TABLE2:
      draft = _draft_of(grid, index, cell.draft)
      s = _input_len(grid, cell.task)
      p = prediction(grid, rows, target, draft, 1, s, (1, 1), cell.temperature == 0)
      if p is None:
        continue
      predicted = p.speedup(cell.alpha, cell.gamma)
      best = p.best_gamma(cell.alpha)
      peer = t5x_peer.measured(rows, target, 1, s, grid.max_decode_len, (1, 1))
      over = (predict.speedup_over(p, peer.cost.seconds(V4_CHIP), cell.alpha, cell.gamma)
              if peer else None)
      cells_out.append(dict(target=target, draft=draft, task=cell.task,
                            temperature=cell.temperature, alpha=cell.alpha, gamma=cell.gamma,
                            paper_speedup=cell.speedup, paper_expected=cell.expected,
                            paper_c=cell.c, c=p.c, predicted=predicted,
                            ratio=predicted / cell.speedup, best_gamma=best,
                            predicted_at_best=p.speedup(cell.alpha, best),
                            predicted_over_t5x=over))
      lines.append(
          f'| {paper.TASKS[cell.task]} | {draft} | {cell.temperature:g} | {cell.alpha:.2f} | '
          f'{cell.gamma} | {cell.speedup:.1f}x | {cell.expected:.1f}x | {cell.c:.2f} | '
          f'{p.c:.3f} | {predicted:.2f}x | {predicted / cell.speedup:.2f} | {best} | '
          f'{p.speedup(cell.alpha, best):.2f}x | '
          f'{"" if over is None else f"{over:.2f}x"} |')
    lines.append('')
  lines.append(_FLAN)
  summary['table2'] = cells_out
  return '\n'.join(lines) + '\n'


def costs_section(grid, rows: Mapping[tuple, ProgramRow], summary: Dict[str, Any]) -> str:
  """v(K) for K = 1..9, c and the loop's share at batch 1 on one chip."""
  s = grid.tasks[0][1]
  lines = ['## 5. v(K), c and the loop\'s own share (batch 1, one chip, EnDe input)', '',
           '| target | t(verify 1) ms | ' + ' | '.join(f'v({k})' for k in VERIFY_TOKENS) + ' |',
           '|' + '---|' * (2 + len(VERIFY_TOKENS))]
  out = {}
  for target, drafts, _ in grid.pairs:
    p = prediction(grid, rows, target, drafts[0], 1, s, (1, 1), True)
    if p is None:
      continue
    v = [p.v(k) for k in VERIFY_TOKENS]
    out[target] = dict(verify_seconds=p.seconds(p.costs.verify[1]), v=v)
    lines.append(f'| {target} | {p.seconds(p.costs.verify[1]) * 1e3:.3f} | ' +
                 ' | '.join(f'{x:.3f}' for x in v) + ' |')
  lines += ['', 'The loop\'s share is what an iteration compiles beyond its draft calls and '
            'its verify, as a share of its time; 0.000 where the compiled iteration costs no '
            'more than its parts costed apart (XLA shares reads between them).', '',
            '| target | draft | T | t(draft step) ms | t(target step) ms | c | '
            't(target alone) ms | loop share at gamma 1 | loop share at gamma 7 | '
            'draft encoder / target encoder |', '|' + '---|' * 10]
  for target, drafts, _ in grid.pairs:
    for draft in drafts:
      for greedy in (True, False):
        p = prediction(grid, rows, target, draft, 1, s, (1, 1), greedy)
        if p is None:
          continue
        c = p.costs
        enc = p.seconds(c.draft_encode) / p.seconds(c.target_encode)
        out.setdefault('pairs', []).append(dict(
            target=target, draft=draft, greedy=greedy, c=p.c, c_iteration=p.c_iteration,
            loop_share={1: p.loop_share(1), 7: p.loop_share(7)},
            alone_seconds=p.alone_seconds))
        lines.append(f'| {target} | {draft} | {0 if greedy else 1} | '
                     f'{p.seconds(c.draft_step) * 1e3:.3f} | '
                     f'{p.seconds(c.target_step) * 1e3:.3f} | {p.c:.3f} | '
                     f'{p.alone_seconds * 1e3:.3f} | {p.loop_share(1):.3f} | '
                     f'{p.loop_share(7):.3f} | {enc:.3f} |')
  summary['costs'] = out
  return '\n'.join(lines) + '\n'


def paper_alphas(draft_index: int) -> List[Tuple[str, float, float]]:
  """(task, temperature, alpha) of the paper's cells of one draft size."""
  name = paper.DRAFTS[min(draft_index, len(paper.DRAFTS) - 1)]
  return [(c.task, c.temperature, c.alpha) for c in paper.TABLE2 if c.draft == name]


def gamma_section(grid, rows: Mapping[tuple, ProgramRow], summary: Dict[str, Any]) -> str:
  """The predicted speedup over gamma 1..8 at the paper's alphas (batch 1, one chip)."""
  lines = ['## 6. Predicted speedup over gamma (batch 1, one chip)', '',
           'At each pair\'s alphas from the paper; the best gamma in bold.', '']
  out = []
  for target, drafts, _ in grid.pairs:
    lines += [f'| {target} | task | T | alpha | ' + ' | '.join(f'G={g}' for g in GAMMAS) +
              ' |', '|' + '---|' * (4 + len(GAMMAS))]
    for i, draft in enumerate(drafts):
      for task, temperature, alpha in paper_alphas(i):
        p = prediction(grid, rows, target, draft, 1, _input_len(grid, task), (1, 1),
                       temperature == 0)
        if p is None:
          continue
        speedups = [p.speedup(alpha, g) for g in GAMMAS]
        best = p.best_gamma(alpha)
        out.append(dict(target=target, draft=draft, task=task, temperature=temperature,
                        alpha=alpha, speedups=speedups, best_gamma=best))
        cells = [f'**{x:.2f}**' if g == best else f'{x:.2f}' for g, x in zip(GAMMAS, speedups)]
        lines.append(f'| {draft} | {paper.TASKS[task]} | {temperature:g} | {alpha:.2f} | ' +
                     ' | '.join(cells) + ' |')
    lines.append('')
  summary['gamma'] = out
  return '\n'.join(lines) + '\n'


def batch_section(grid, rows: Mapping[tuple, ProgramRow], summary: Dict[str, Any]) -> str:
  """v(K) and the best speedup per draft and alpha at every (mesh, B) of the grid."""
  s = grid.tasks[0][1]
  lines = ['## 7. Batch 1, 8 and 32, one chip and v4-8 (EnDe input)', '',
           'Where the verify of K tokens stops costing one step (v(K) > 1), speculation '
           'stops paying: each cell is the best predicted speedup over gamma 1..8 and its '
           'gamma, "-" where no gamma beats the target alone. Above batch 1 the programs are the '
           'greedy ones (the T = 1 alphas use them too: sampling adds a softmax over V per '
           'position, see the batch-1 rows).', '']
  out = []
  for target, drafts, _ in grid.pairs:
    header = [f'{d} a={a:.2f} T={t:g}' for i, d in enumerate(drafts)
              for task, t, a in paper_alphas(i) if task == 'ende']
    lines += [f'### {target}', '', '| mesh | B | v(2) | v(5) | v(9) | ' +
              ' | '.join(header) + ' |', '|' + '---|' * (5 + len(header))]
    for setting in grid.settings(target):
      if setting.input_len != s or setting.modes == (False,):
        continue
      mesh = (1, 1) if setting.chips == 1 else (1, 2 * setting.chips)
      name = '1 chip' if setting.chips == 1 else f'v4-8 ({mesh[1]} cores)'
      base = prediction(grid, rows, target, drafts[0], setting.batch, s, mesh, True)
      if base is None:
        verify = {k: rows.get((target, 'verify', k, setting.batch, s, grid.max_decode_len,
                                mesh, True)) for k in (1, 2, 5, 9)}
        if all(verify.values()):
          v = [verify[k].cost.seconds(device_of(mesh)) / verify[1].cost.seconds(
              device_of(mesh)) for k in (2, 5, 9)]
          lines.append(f'| {name} | {setting.batch} | ' + ' | '.join(f'{x:.2f}' for x in v) +
                       ' | the iteration did not compile: out of one core\'s HBM (16 GiB; '
                       'a chip\'s megacore has 32) |')
        continue
      cells = []
      for i, draft in enumerate(drafts):
        if setting.drafts and draft not in setting.drafts:
          cells += ['' for task, _, _ in paper_alphas(i) if task == 'ende']
          continue
        for task, temperature, alpha in paper_alphas(i):
          if task != 'ende':
            continue
          greedy = temperature == 0 or False not in setting.modes
          p = prediction(grid, rows, target, draft, setting.batch, s, mesh, greedy)
          if p is None:
            cells.append('')
            continue
          best = predict.break_even(p, alpha)
          value = p.speedup(alpha, best or p.best_gamma(alpha))
          out.append(dict(target=target, draft=draft, mesh=mesh, batch=setting.batch,
                          temperature=temperature, alpha=alpha, best_gamma=best,
                          speedup=value, v=[p.v(k) for k in VERIFY_TOKENS]))
          cells.append(f'{value:.2f}x (G={best})' if best else f'- ({value:.2f}x)')
      lines.append(f'| {name} | {setting.batch} | {base.v(2):.2f} | {base.v(5):.2f} | '
                   f'{base.v(9):.2f} | ' + ' | '.join(cells) + ' |')
    lines.append('')
  stops = [r for r in out if r['best_gamma'] is None]
  if out:
    lines.append('Speculation stops paying (no gamma beats the target alone) at: ' + (
        ', '.join(sorted({f'{r["target"]} + {r["draft"]} B={r["batch"]} mesh {r["mesh"]} '
                          f'alpha {r["alpha"]}' for r in stops})) if stops else
        'no planned setting; its gain shrinks as v(K) grows with the batch (best '
        f'{min(r["speedup"] for r in out):.2f}x at the worst planned setting).'))
  summary['batch'] = out
  return '\n'.join(lines) + '\n'
