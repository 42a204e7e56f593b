"""python -m specjax.decode: speculative decoding from the command line.

With no flags it translates the bundled English sample sentences into German with the
bundled demo pair and reports what speculative decoding gained over the target alone.
On Cloud TPU: `python -m specjax.decode --target t5_xxl --draft t5_small --input in.txt`.
"""
from __future__ import annotations

import os
import sys

from specjax import interrupt


class _Interrupt:
  """What a Ctrl-C under `python -m specjax.decode` reports (`specjax.interrupt`): every
  record already written is whole and on disk, so the rerun resumes from it."""

  output = None  # the run's output, once open

  @classmethod
  def where(cls) -> str:
    out = cls.output
    return (f'{out.written} inputs are in {out.path}; rerun the same command to resume'
            if out is not None and out.path != '<stdout>' else 'nothing was written to a file')


if __name__ == '__main__':  # before the imports below, which take seconds
  interrupt.exit_at_once(_Interrupt.where)

import argparse  # pylint: disable=wrong-import-position
import contextlib  # pylint: disable=wrong-import-position
import json  # pylint: disable=wrong-import-position

import jax  # pylint: disable=wrong-import-position
from tqdm import tqdm

from specjax import compile_cache
from specjax.parallel import mesh as mesh_lib
from specjax.job import task_data, tree_checks
from specjax import flags
from specjax.job.config import DecodeConfig
from specjax.job.decode_job import run
from specjax.job.output import STDOUT, open_output


def parse_args(argv=None) -> argparse.Namespace:
  p = argparse.ArgumentParser(
      prog='python -m specjax.decode',
      description='Exact speculative decoding: a draft proposes gamma tokens, the target '
                  'checks them in one call; the output is the target\'s own.',
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  flags.add_flags(p, DecodeConfig)
  return p.parse_args(argv)


def parse_config(argv=None) -> DecodeConfig:
  """The DecodeConfig of a command line (exits 2 on a bad flag, as argparse does); a
  retrieval draft with no tree flag gets --tree auto (`tree_checks.retrieval_tree_default`)."""
  return tree_checks.retrieval_tree_default(flags.from_args(DecodeConfig, parse_args(argv)))


def _tree_name(tree: dict) -> str:
  """'tree 4,2,1 (14 nodes, depth 3)' or 'dynamic tree (8 nodes, depth 4, top 2)'."""
  if tree['kind'] == 'static':
    return (f'tree {",".join(map(str, tree["branching"]))} ({tree["nodes"]} nodes, depth '
            f'{tree["depth"]})')
  return f'dynamic tree ({tree["nodes"]} nodes, depth {tree["depth"]}, top {tree["top"]})'


def _tree_figures(s: dict) -> str:
  """The tree's line: nodes verified per call and the accepted depth histogram."""
  shares = ', '.join(f'{d} in {100 * x:.0f}%' + (' of calls' if d == 0 else '')
                     for d, x in enumerate(s['accepted_depths']))
  return (f'  {s["nodes_per_call"]:.1f} nodes verified per target call; depth of the '
          f'accepted path: {shares}')


def _print_summary(s: dict) -> None:
  tree = s.get('tree')
  print(f'\n{s["num_examples"]} examples, target {s["target"]}, draft {s["draft"]}, '
        f'{_tree_name(tree) if tree else "gamma " + str(s["gamma"])}, '
        f'temperature {s["temperature"]}')
  if s.get('gamma_reason'):
    print(f'  gamma: {s["gamma_reason"]}')
  rule = [f'{"tree" if tree else s["verification"]} verification'] + (
      [f'draft threshold {s["draft_threshold"]} ({s.get("threshold_rule", "token")})']
      if s['draft_threshold'] else [])
  if s['gamma'] != 0:  # gamma 0: the target alone decoded, no rule applied
    print(f'  {", ".join(rule)}')
  if s['lenience'] < 1:
    print(f'  lenience {s["lenience"]}: NOT exact, the outputs do not follow the target\'s '
          'distribution (lenience 1 is exact)')
  if s['gamma'] != 0 and s['verification'].startswith('typical'):
    print(f'  {s["verification"]} acceptance: NOT exact, the outputs do not follow the '
          'target\'s distribution (--verification token is exact)')
  if s.get('resumed'):
    print(f'  resumed: {s["resumed"]} inputs were already in the output, {s["decoded"]} '
          'decoded now')
  if not s['decoded']:
    return
  if s['gamma'] == 0:
    print(f'  the target alone decoded (gamma 0): {s["generated_tokens"]} tokens from '
          f'{s["batched_target_calls"]} batched calls of the model')
  else:
    print(f'  alpha {s["alpha"]:.3f}, {s["tokens_per_call"]:.2f} tokens per target call: '
          f'{s["generated_tokens"]} tokens from {s["target_calls"]} per-row target calls '
          f'({s["batched_target_calls"]} batched calls of the model)')
    if tree:
      print(_tree_figures(s))
  if s['gamma'] == 0:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s, the target alone\'s (speedup 1.00x: '
          'speculation was not faster here)')
  elif s['speedup'] is None:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s speculative')
  else:
    print(f'  {s["tokens_per_second"]:.1f} tokens/s speculative vs '
          f'{s["baseline_tokens_per_second"]:.1f} tokens/s target alone: speedup '
          f'{s["speedup"]:.2f}x (both compiled before timing)')
  widths = s.get('input_widths') or []
  print(f'  inputs padded to width {", ".join(map(str, widths))}: {len(widths)} '
        f'compilation{"s" if len(widths) > 1 else ""}, {s["compile_seconds"]:.1f} s')
  if s['identical_to_target'] is not None:
    print(f'  identical to the target\'s own greedy output: {s["identical_to_target"]}')
  for name, value in (s.get('metrics') or {}).get('speculative', {}).items():
    alone = s['metrics'].get('target', {}).get(name)
    print(f'  {name} {value:.2f} speculative, '
          f'{"n/a" if alone is None else format(alone, ".2f")} target alone')


def main(argv=None) -> int:
  config = parse_config(argv)
  # Before anything touches a device; then only host 0 of a pod writes and prints.
  try:
    primary = (not mesh_lib.init_distributed(
        config.multihost, coordinator_address=config.coordinator_address,
        num_processes=config.num_processes, process_id=config.process_id)
               or jax.process_index() == 0)
  except ValueError as e:
    interrupt.error_line(f'error: {" ".join(str(e).split())}')
    return 2
  job = config.replace(progress=not config.quiet and primary)
  # Before anything compiles: the programs of an earlier run are loaded, not compiled.
  with compile_cache.for_command(job.compile_cache, job.use_compile_cache):
    return _decode(job, primary)


def _decode(job: DecodeConfig, primary: bool) -> int:
  """main's decode of `job` (`primary`: this process writes and prints): its exit code."""
  output = None
  try:
    output = open_output(job.output) if primary else None
    _Interrupt.output = output

    records = []

    def on_record(record):
      if job.task:
        records.append(record)
      if not job.json and not job.quiet and primary:
        tqdm.write(f'{record["inputs"]}\n  -> {record["prediction"]}',  # above the bar
                   file=sys.stderr if job.output == STDOUT else sys.stdout)

    summary = run(job, on_record, output)
    if job.task and primary:
      summary['metrics'] = task_data.record_metrics(job.task, records)
  except (ValueError, FileNotFoundError, OSError) as e:
    interrupt.error_line(f'error: {" ".join(str(e).split())}')
    return 2
  except KeyboardInterrupt:
    where = (f'{output.written} inputs are in {output.path}; rerun the same command to resume'
             if output is not None else 'nothing was written (no --output)')
    interrupt.error_line(f'interrupted: {where}')
    return 130
  finally:
    if output is not None:
      output.close()
  if not primary:
    return 0
  # With --output -, the records hold standard output: the summary goes to stderr.
  with contextlib.redirect_stdout(sys.stderr) if job.output == STDOUT else \
      contextlib.nullcontext():
    if job.json:
      print(json.dumps(summary))
    else:
      _print_summary(summary)
  return 0


def run_main() -> None:
  """`python -m specjax.decode`: main's exit code; after an error or an interrupt the
  process ends at once (`os._exit`), so that no library's threads (orbax's event loops,
  XLA's compiler) print tracebacks or crash while the interpreter shuts down; after a
  complete run it shuts down ignoring Ctrl-C (`interrupt.finish`)."""
  code = main()
  if code:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
  interrupt.finish(0)


if __name__ == '__main__':
  run_main()
