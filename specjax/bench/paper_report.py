"""The paper table's markdown report and plot (`python -m specjax.bench --paper-table`),
with the paper's own published cells beside ours."""
from __future__ import annotations

from typing import Dict, List, Optional

from specjax import reports
from specjax.speed.paper import TABLE2, TASKS as PAPER_TASKS

# The paper's bigram draft (docs/algorithm.md; the paper names no task for it).
PAPER_BIGRAM = {'alpha': 0.2, 'speedup': 1.25}
_TITLES = {'ende': 'EnDe (gettext messages)', 'manpages': 'man-page summaries',
           'manlm': 'man-page continuation (decoder-only)', 'summarize': 'summaries',
           'cnndm': 'CNN/DM'}


def _x(value, digits: int = 2, suffix: str = '') -> str:
  return 'n/a' if value is None else f'{value:.{digits}f}{suffix}'


def _kind(cell: dict, model_label: Optional[str]) -> str:
  """'model' (the task's first draft model), 'bigram', 'copy', 'copy+model', or the
  label itself (another draft model) for a cell's draft."""
  label = cell['draft']
  if label == model_label:
    return 'model'
  return 'copy+model' if label == f'copy+{model_label}' else label


def _model_label(result: dict, task: str) -> Optional[str]:
  for t in result['tasks']:
    if t['task'] == task:
      models = [d for d in t['drafts'] if d not in ('bigram', 'copy')
                and not d.startswith('copy+')]
      return models[0] if models else None
  return None


def cells_of(result: dict, task: str, temperature: Optional[float] = None) -> List[dict]:
  """The cells of one task (and temperature), in run order."""
  return [c for c in result['cells'] if c['task'] == task and
          (temperature is None or c['temperature'] == temperature)]


def task_table(result: dict, task: str) -> List[str]:
  """Markdown rows of one task's cells: best gamma, alpha, tokens per call, speedups, the
  formula's prediction, block verification at the same gamma, identity with the target."""
  lines = ['| draft | T | best gamma | alpha | tokens / call | speedup | loop speedup | '
           'predicted | block: tokens / call | block: speedup | identical to target |',
           '|---|---|---|---|---|---|---|---|---|---|---|']
  for c in cells_of(result, task):
    b = c.get('block')
    same = c.get('identical_to_target')
    lines.append(
        f'| {c["draft"]} | {c["temperature"]:g} | {c["gamma"]} | {_x(c["alpha"], 3)} | '
        f'{_x(c["tokens_per_call"])} | {_x(c["speedup"], 2, "x")} | '
        f'{_x(c["loop_speedup"], 2, "x")} | {_x(c["predicted_speedup"], 2, "x")} | '
        f'{_x(b["tokens_per_call"]) if b else "= token"} | '
        f'{_x(b["speedup"], 2, "x") if b else "= token"} | '
        f'{"" if same is None else ("yes" if same else "NO")} |')
  return lines + ['']


def paper_rows(paper_task: str) -> List[str]:
  """The paper's published cells of one task (T5-XXL on a TPU v4, Table 2)."""
  lines = ['| draft | T | gamma | alpha | speedup | expected (Table 4) |', '|---|---|---|---|---|---|']
  for c in TABLE2:
    if c.task == paper_task:
      lines.append(f'| {c.draft} (T5 1.1) | {c.temperature:g} | {c.gamma} | {c.alpha:.2f} | '
                   f'{c.speedup:.1f}x | {c.expected:.1f}x |')
  return lines + ['']


def copy_versus(result: dict, task: str, temperature: float = 0.0) -> Optional[Dict]:
  """Tokens per call of the copy and copy+model drafts against the bigram's and the draft
  model's, each at the gamma of the sweep they share (the largest), at one temperature.

  Returns:
    {'gamma', 'model', 'bigram', 'copy', 'copy+model'} tokens per call (None where the
    task has no such draft), or None when the task has no copy draft.
  """
  model_label = _model_label(result, task)
  gamma = max(result['gammas'])
  out: Dict[str, object] = {'gamma': gamma}
  for c in cells_of(result, task, temperature):
    at = [r for r in c['rows'] if r['gamma'] == gamma]
    if at:
      out[_kind(c, model_label)] = at[0]['tokens_per_call']
  return out if 'copy' in out else None


def copy_sentence(result: dict, task: str, temperature: float = 0.0) -> str:
  """One sentence: how many tokens per call the copy drafts gain over the bigram, and how
  they compare with the draft model."""
  v = copy_versus(result, task, temperature)
  if not v or v.get('bigram') is None:
    return ''
  parts = []
  for kind in ('copy', 'copy+model'):
    if v.get(kind) is None:
      continue
    text = (f'`{kind}` yields {v[kind]:.2f} tokens per target call, '
            f'{v[kind] - v["bigram"]:+.2f} against the bigram\'s {v["bigram"]:.2f}')
    if v.get('model'):
      text += (f' and {v[kind] - v["model"]:+.2f} ({v[kind] / v["model"]:.2f}x) against '
               f'the draft model\'s {v["model"]:.2f}')
    parts.append(text)
  return (f'{_TITLES.get(task, task)}, T={temperature:g}, gamma {v["gamma"]}: '
          + '; '.join(parts) + '.')


def run_dates(result: dict) -> str:
  """When the table's tasks ran: the run's date, or, for a table whose tasks were measured
  in runs of their own (a task's 'date'), each date with its tasks."""
  by_date: Dict[str, List[str]] = {}
  for t in result['tasks']:
    by_date.setdefault(t.get('date', result['machine']['date']), []).append(
        _TITLES.get(t['task'], t['task']))
  if len(by_date) == 1:
    return next(iter(by_date))
  return ' and '.join(f'{d} ({", ".join(names)})' for d, names in sorted(by_date.items()))


def write_markdown(result: dict, path: str, plot_path: Optional[str] = None) -> None:
  """docs/paper_table.md: generated by the command, never typed by hand."""
  import os  # pylint: disable=import-outside-toplevel
  m = result['machine']
  lines = [
      '# The paper\'s table, reproduced at toy scale', '',
      f'Generated by `python -m specjax.bench --paper-table` on {run_dates(result)}. Do not '
      'edit by hand; rerun it.', '',
      f'- machine: {m["processor"]}, {m["cpu_count"]} CPU cores, {m["platform"]}; backend '
      f'{m["backend"]} ({m["device_kind"]} x{m["device_count"]}), jax {m["jax"]}',
      f'- batch {result["batch_size"]}, max decode length {result["max_decode_len"]}; each '
      f'cell runs gamma in {", ".join(map(str, result["gammas"]))} and keeps the gamma of '
      f'the best measured (end-to-end) speedup over the target alone; every figure of a row '
      f'is timed in {result["rounds"]} interleaved rounds (as `docs/benchmarks.md`)',
      '- drafts: the pair\'s draft model; `bigram`, a table of next-token counts of the '
      'train references; `copy`, the token after the longest earlier match of the output\'s '
      'last tokens in the source or the output; `copy+NAME`, copy where it matches and the '
      'draft model elsewhere. All are exact: greedy outputs equal the target\'s own, '
      'checked in every greedy cell ("identical to target", at every gamma of the sweep)',
      '- tokens / call: output tokens per target call; predicted: the paper\'s formula '
      'S = E / (gamma c + v) from the measured alpha, c and v(gamma + 1); block: block '
      'verification at the same gamma (T = 1; at T = 0 it is the token rule)', '']
  for t in result['tasks']:
    lines += [f'## {_TITLES.get(t["task"], t["task"])}: {t["target"]}', '',
              f'{t["num_examples"]} inputs: the first lines of {t["source"]}.', '']
    lines += task_table(result, t['task'])
    for temperature in result['temperatures']:
      sentence = copy_sentence(result, t['task'], temperature)
      if sentence:
        lines += [sentence, '']
  if plot_path:
    rel = os.path.relpath(plot_path, os.path.dirname(os.path.abspath(path)))
    lines += [f'![tokens per call and speedup by task and draft]({rel})', '']
  lines += ['## The paper\'s published cells (T5-XXL 11B on a TPU v4, not measured here)', '',
            'Leviathan et al. 2023, Table 2 (alpha, measured speedup over T5X at batch 1) '
            'with Table 4\'s expected speedup: THE PAPER\'S TPU NUMBERS, for comparing the '
            'shape of the table (which task and draft gain most), not its values. Its bigram '
            f'draft: alpha about {PAPER_BIGRAM["alpha"]}, {PAPER_BIGRAM["speedup"]}x.', '']
  for key, title in PAPER_TASKS.items():
    lines += [f'### {title} (the paper)', ''] + paper_rows(key)
  reports.write_text(path, '\n'.join(lines))


def plot(result: dict, path: str) -> None:
  """PNG: tokens per call (bars) and measured speedup of each draft, per task and T."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  tasks = [t['task'] for t in result['tasks']]
  fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 4), squeeze=False)
  for ax, task in zip(axes[0], tasks):
    drafts = list(dict.fromkeys(c['draft'] for c in cells_of(result, task)))
    width = 0.8 / max(len(result['temperatures']), 1)
    for i, temperature in enumerate(result['temperatures']):
      by = {c['draft']: c for c in cells_of(result, task, temperature)}
      xs = [k + i * width for k in range(len(drafts))]
      ax.bar(xs, [by[d]['tokens_per_call'] if d in by else 0 for d in drafts], width,
             color=f'C{i}', alpha=0.6, label=f'tokens / call, T={temperature:g}')
      ax.plot(xs, [by[d]['speedup'] if d in by else None for d in drafts], 'k^', ms=6,
              label='speedup' if i == 0 else None)
    ax.set_xticks([k + width * (len(result['temperatures']) - 1) / 2
                   for k in range(len(drafts))])
    ax.set_xticklabels(drafts, rotation=15, fontsize=8)
    ax.axhline(1.0, color='grey', lw=0.8)
    ax.set_title(_TITLES.get(task, task))
    ax.legend(fontsize=7)
  fig.tight_layout()
  with reports.replacing(path) as tmp:  # whole or not at all
    fig.savefig(tmp, dpi=110)
  plt.close(fig)


def format_text(result: dict) -> str:
  """The tables for the terminal."""
  lines = []
  for t in result['tasks']:
    lines += [f'{_TITLES.get(t["task"], t["task"])}: {t["target"]}'] + task_table(
        result, t['task'])
    lines += [s for s in (copy_sentence(result, t['task'], x) for x in result['temperatures'])
              if s]
  return '\n'.join(lines)
