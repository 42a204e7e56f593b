"""`python -m specjax.bench --paper-table`: the paper's Table 2 for any pair, on any machine.

For each task (EnDe translation and a summarisation task), each draft (the draft model,
a bigram table, the copy draft, copy + the draft model) and each temperature (0, 1): a
row per gamma of the sweep (`rows.speculative_row`, every figure timed in interleaved
rounds), the cell keeping the gamma of the best measured speedup with its alpha, tokens
per target call, measured and predicted speedup; at T=1 the same gamma under block
verification beside it (greedy block verification is the token rule, token for token).
On this CPU the bundled pairs run it; on a TPU, T5-XXL and its T5 1.1 drafts
(`tpu/paper_table.sh`).
"""
from __future__ import annotations

import dataclasses
import json
import sys
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np

from specjax import checkpoints
from specjax.bench import report
from specjax.bench import rows as bench_rows
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS
from specjax.core.sampling import SamplingConfig
from specjax.demo.demo_tasks import DEMO_TASKS, TABLE_TASKS
from specjax.job import drafts as draft_specs
from specjax.job.inputs import pad_to_bucket, tokenize

# The draft spec that stands for the task's own draft model.
MODEL = 'model'
DEFAULT_DRAFTS = (MODEL, draft_specs.BIGRAM, draft_specs.COPY, draft_specs.HYBRID + MODEL)
SUMMARIZE_PREFIX = 'summarize: '


@dataclasses.dataclass
class TaskRun:
  """One task's pair and inputs, ready to decode.

  Attributes:
    task: its name ('ende', 'manpages', 'cnndm', ...).
    paper_task: the paper's task it stands for ('ende' or 'cnndm').
    target, tp: the target and its params.
    drafts: label -> (draft, params), the draft model first.
    inputs: [N, S] int32 token ids.
    source: where the inputs came from.
  """

  task: str
  paper_task: str
  target: object
  tp: object
  drafts: Dict[str, Tuple[object, object]]
  inputs: np.ndarray
  source: str


def paper_task(task: str) -> Optional[str]:
  """The paper's task a task stands for: EnDe for translation, CNN/DM for summaries, none
  for the decoder-only continuation (the paper's table is T5's)."""
  if task == 'manlm':
    return None
  return 'ende' if task == 'ende' else 'cnndm'


def draft_label(spec: str, model_name: str) -> str:
  """A draft spec with `model` spelled as the draft model's name."""
  return spec.replace(MODEL, model_name) if spec in (MODEL, draft_specs.HYBRID + MODEL) \
      else spec


def read_inputs(path: str, prefix: str, limit: int) -> List[str]:
  """The first `limit` inputs of a JSONL ("inputs", "text" or "en" fields) or text file,
  each with the task prefix (added when missing)."""
  texts = []
  with open(path, encoding='utf-8') as f:
    for line in f:
      if not line.strip():
        continue
      rec = json.loads(line) if line.lstrip().startswith('{') else {'inputs': line.strip()}
      text = rec.get('inputs') or rec.get('text') or rec.get('en') or ''
      texts.append(text if text.startswith(prefix) else prefix + text)
      if len(texts) == limit:
        break
  return texts


def resolve_drafts(specs: Sequence[str], target, target_name: str, model_name: str,
                   load: Callable[[str], Tuple], table: Optional[str]) -> Dict[str, Tuple]:
  """label -> (draft, params) for the specs (`model` is `model_name`), via
  `specjax.job.drafts.resolve_draft`; a model loads once however many specs use it."""
  loaded: Dict[str, Tuple] = {}

  def load_once(name):
    if name not in loaded:
      loaded[name] = load(name)
    return loaded[name]

  out = {}
  for spec in specs:
    spec = draft_label(spec, model_name)
    out[spec] = draft_specs.resolve_draft(spec, target, target_name, load_once, table)
  return out


def bundled_run(name: str, specs: Sequence[str], num_examples: int, max_input_len: int
                ) -> TaskRun:
  """A task of the bundled pairs (`specjax.demo.demo_tasks`): its pair, bigram table and
  test split."""
  task = TABLE_TASKS[name]
  load = lambda n: checkpoints.load_model(n, DEFAULT_CHECKPOINTS[n])
  target, tp = load(task.target.name)
  vocab = checkpoints.prompt_vocabulary(task.vocab, target)
  drafts = resolve_drafts(specs, target, task.target.name, task.draft.name, load,
                          task.path('bigram.npz'))
  texts = read_inputs(task.path('test.jsonl'), task.prefix, num_examples)
  inputs = tokenize(vocab, texts, max_input_len, True)[0]
  return TaskRun(name, paper_task(name), target, tp, drafts, inputs,
                 f'specjax/assets/{task.assets.rstrip("/").split("/")[-1]}/test.jsonl')


def external_run(task: str, path: str, specs: Sequence[str], args) -> TaskRun:
  """A task given as NAME=FILE: the pair of --target / --draft (checkpoints, vocabulary,
  dtypes as `python -m specjax.decode`) on FILE's first --num-examples inputs, with
  T5's prefix for the task (translation for 'ende', summaries otherwise)."""
  from specjax.job.decode_job import DecodeJob  # pylint: disable=import-outside-toplevel
  from specjax.job.pair import load_pair  # pylint: disable=import-outside-toplevel
  job = DecodeJob(target=args.target, draft=args.draft,
                  target_checkpoint=args.target_checkpoint,
                  draft_checkpoint=args.draft_checkpoint, vocab=args.vocab,
                  dtype=args.dtype, param_dtype=args.param_dtype)
  target, tp, draft, dp, vocab = load_pair(job)

  def load(name):
    if name == args.draft:
      return draft, dp
    return checkpoints.load_model(name, DEFAULT_CHECKPOINTS.get(name), dtype=args.dtype,
                                  param_dtype=args.param_dtype)

  prefix = DEMO_TASKS['ende'].prefix if task == 'ende' else SUMMARIZE_PREFIX
  texts = read_inputs(path, prefix, args.num_examples)
  return TaskRun(task, paper_task(task), target, tp,
                 resolve_drafts(specs, target, args.target, args.draft, load,
                                args.bigram_table),
                 tokenize(vocab, texts, args.max_input_len, True)[0], path)


def runs_from_args(args) -> List[TaskRun]:
  """The tasks of --paper-tasks: bundled names ('ende', 'manpages') or NAME=FILE."""
  specs = [s for s in args.paper_drafts.split(',') if s]
  if args.quick:
    return quick_runs(specs)
  runs = []
  for item in (t for t in args.paper_tasks.split(',') if t):
    name, _, path = item.partition('=')
    if path:
      runs.append(external_run(name, path, specs, args))
    elif name in TABLE_TASKS:
      runs.append(bundled_run(name, specs, args.num_examples, args.max_input_len))
    else:
      raise ValueError(f'--paper-tasks: {name!r} is not a bundled task '
                       f'({", ".join(TABLE_TASKS)}); pass NAME=FILE for your own inputs')
  return runs


def quick_runs(specs: Sequence[str]) -> List[TaskRun]:
  """Two tasks on the tiny random test models (`--quick`): a smoke run of the table."""
  from specjax.proposers.bigram import BigramDraft  # pylint: disable=import-outside-toplevel
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import t5_tiny, t5_tiny_draft  # pylint: disable=import-outside-toplevel
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  tp, dp = target.init(jax.random.PRNGKey(0)), draft.init(jax.random.PRNGKey(1))
  bigram = BigramDraft(target.vocab_size)
  runs = []
  for i, name in enumerate(('ende', 'summarize')):
    rows = np.array(jax.random.randint(jax.random.PRNGKey(2 + i), (2, 8), 3, 32), np.int32)
    rows[:, -1] = 1
    load = lambda n: (draft, dp)
    runs.append(TaskRun(name, paper_task(name), target, tp, resolve_drafts(
        [s for s in specs if s != draft_specs.BIGRAM], target, 't5_tiny', 't5_tiny_draft',
        load, None), rows, 'random ids'))
    if draft_specs.BIGRAM in specs:
      runs[-1].drafts[draft_specs.BIGRAM] = (bigram, bigram.init(None))
  return runs


def _compact(row: dict) -> dict:
  keep = ('gamma', 'temperature', 'alpha', 'tokens_per_call', 'predicted_tokens_per_call',
          'speedup', 'loop_speedup', 'predicted_speedup', 'tokens_per_second',
          'baseline_tokens_per_second', 'c', 'v', 't_1', 'identical_to_target',
          'compile_seconds', 'tokens', 'target_calls', 'verification')
  return {k: row[k] for k in keep if k in row}


def cell(run: TaskRun, label: str, sampling: SamplingConfig, gammas: Sequence[int],
         batches, max_len: int, seed: int, rounds: int, repeats: int,
         block: bool = True) -> dict:
  """One cell: a row per gamma, the best one's figures, and block verification at T > 0.

  Returns:
    {'task', 'paper_task', 'draft', 'temperature', 'gamma' (the best measured speedup's),
    'alpha', 'tokens_per_call', 'speedup', 'loop_speedup', 'predicted_speedup',
    'identical_to_target' (greedy: every gamma's output equals the target's; None when
    sampling), 'block' (the block rule's row at that gamma, or None), 'rows'}.
  """
  draft, dp = run.drafts[label]
  cache_len = max_len + max(gammas) + 2
  kw = dict(seed=seed, rounds=rounds, repeats=repeats, cache_len=cache_len)
  rows = []
  for gamma in gammas:
    row = bench_rows.speculative_row(run.target, run.tp, draft, dp, batches, gamma, sampling,
                                     max_len, **kw)
    rows.append(_compact(row))
    print(f'{run.task} {label}: ' + report.format_row(row), file=sys.stderr)
  best = max(rows, key=lambda r: r['speedup'])
  out = {'task': run.task, 'paper_task': run.paper_task, 'draft': label,
         'temperature': sampling.temperature, **{k: best.get(k) for k in (
             'gamma', 'alpha', 'tokens_per_call', 'predicted_tokens_per_call', 'speedup',
             'loop_speedup', 'predicted_speedup', 'c', 'v')},
         'identical_to_target': (all(r['identical_to_target'] for r in rows)
                                 if sampling.greedy else None),
         'block': None, 'rows': rows}
  if block and not sampling.greedy:
    row = bench_rows.speculative_row(run.target, run.tp, draft, dp, batches, best['gamma'],
                                     sampling, max_len, verification='block', **kw)
    out['block'] = _compact(row)
    print(f'{run.task} {label} block: ' + report.format_row(row), file=sys.stderr)
  return out


def run_table(runs: Sequence[TaskRun], gammas: Sequence[int], temperatures: Sequence[float],
              max_len: int, batch_size: int = 1, seed: int = 0, rounds: int = 3,
              repeats: int = 32, pad_inputs: str = 'bucket') -> dict:
  """Every cell of every task (see the module docstring), as one JSON-ready dict."""
  cells, tasks = [], []
  for run in runs:
    inputs = run.inputs[:len(run.inputs) // batch_size * batch_size]
    if len(inputs) == 0:
      raise ValueError(f'{run.task}: fewer inputs than --batch-size {batch_size}; lower it')
    batches = [pad_to_bucket(inputs[i:i + batch_size], pad_inputs)
               for i in range(0, len(inputs), batch_size)]
    tasks.append({'task': run.task, 'paper_task': run.paper_task, 'source': run.source,
                  'num_examples': len(inputs), 'target': _name(run.target),
                  'drafts': list(run.drafts)})
    for temperature in temperatures:
      for label in run.drafts:
        cells.append(cell(run, label, SamplingConfig(temperature=temperature), gammas,
                          batches, max_len, seed, rounds, repeats))
  return {'tasks': tasks, 'cells': cells, 'gammas': list(gammas),
          'temperatures': list(temperatures), 'batch_size': batch_size,
          'max_decode_len': max_len, 'rounds': rounds, 'machine': report.machine_info()}


def _name(model) -> str:
  config = getattr(model, 'config', None)
  return getattr(config, 'name', None) or type(model).__name__
