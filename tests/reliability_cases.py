"""The catalogue of docs/reliability.md: bad inputs given to `python -m specjax.decode`, and
what each gets. `python tests/reliability_cases.py` runs every case and writes the doc;
tests/test_reliability_doc.py runs them again, checks that each gets the outcome it writes
out, and that the doc says the same.
"""
import contextlib
import dataclasses
import io
import json
import os
import pathlib
import re
import sys
import tempfile
from typing import Callable, List, Optional

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = ROOT / 'docs' / 'reliability.md'
# Quick settings for every decoding case: short outputs, no target-alone comparison.
QUICK = ['--max-decode-len', '6', '--batch-size', '2', '--gamma', '3', '--no-compare', '--quiet',
         '--json']


@dataclasses.dataclass
class Case:
  """One bad input: the file given as --input (bytes), extra flags, optional set-up."""

  name: str
  data: Optional[bytes]
  flags: List[str] = dataclasses.field(default_factory=list)
  setup: Optional[Callable[[pathlib.Path], List[str]]] = None  # returns more flags
  stdin: bool = False
  process: bool = False  # run as `python -m specjax.decode` (what a damaged file's threads do)


def _nan_checkpoint(tmp: pathlib.Path) -> List[str]:
  """The demo target with one token's embedding NaN: corrupt weights that only inputs
  holding that token meet (' Drucker'... any token of line 2 and of no other line)."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, DEMO_VOCAB  # pylint: disable=import-outside-toplevel
  vocab = checkpoints.load_vocab(DEMO_VOCAB)
  token = vocab.encode('printer')[-1]
  model, params = checkpoints.load_model('demo_target', DEFAULT_CHECKPOINTS['demo_target'])
  emb = params['token_embedder']['embedding']
  params['token_embedder']['embedding'] = emb.at[token].set(jnp.nan)
  path = checkpoints.save_params(tmp / 'nan_target', params, model.config)
  return ['--target-checkpoint', str(path)]


def _stale_output(tmp: pathlib.Path) -> List[str]:
  """An output file left by a run with another seed (and its fingerprint beside it)."""
  out = tmp / 'out.jsonl'
  assert run(QUICK + ['--input', str(tmp / 'in.txt'), '--output', str(out),
                      '--temperature', '1', '--seed', '1'])[0] == 0
  return ['--output', str(out), '--temperature', '1', '--seed', '2']


def _foreign_output(tmp: pathlib.Path) -> List[str]:
  out = tmp / 'notes.jsonl'
  out.write_text('{"my": "notes"}\n')
  return ['--output', str(out)]


def _other_vocab(tmp: pathlib.Path) -> List[str]:
  """The man-page pair's vocabulary, given to the demo pair."""
  del tmp
  from specjax.checkpoints.registry import bundled  # pylint: disable=import-outside-toplevel
  return ['--vocab', bundled('manpages_target').vocab]


def _damaged_checkpoint(part: str) -> Callable[[pathlib.Path], List[str]]:
  """A copy of the demo target's checkpoint with one file cut to half its length: its
  `_METADATA`, or the largest file of its arrays (`data`)."""
  def setup(tmp: pathlib.Path) -> List[str]:
    import shutil  # pylint: disable=import-outside-toplevel
    from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS  # pylint: disable=import-outside-toplevel
    path = tmp / 'target'
    shutil.copytree(DEFAULT_CHECKPOINTS['demo_target'], path)
    files = [p for p in path.rglob('*') if p.is_file()]
    cut = (path / '_METADATA' if part == 'metadata'
           else max(files, key=lambda p: p.stat().st_size))
    data = cut.read_bytes()
    cut.write_bytes(data[:len(data) // 2])
    return ['--target-checkpoint', str(path)]
  return setup


CASES = [
    Case('a text line that starts with "{"', b'{0} not found\nOpen the file\n'),
    Case('JSONL: every line a JSON object with "inputs"; other fields are carried through',
         b'{"inputs": "Open the file", "id": 7}\n{"inputs": "Print the page", "id": 8}\n'),
    Case('a JSONL file (its first line a JSON object) with a line that is not',
         b'{"inputs": "Open the file"}\nPrint the page\n'),
    Case('a JSONL line without "inputs"', b'{"inputs": "Open the file"}\n{"text": "Print"}\n'),
    Case('a JSONL field the output writes itself ("prediction")',
         b'{"inputs": "Open the file", "prediction": "mine"}\n'),
    Case('a JSONL escape of a lone surrogate (\\ud800)', b'{"inputs": "Open \\ud800 file"}\n'),
    Case('a JSONL file with a byte order mark', b'\xef\xbb\xbf{"inputs": "Open the file"}\n'),
    Case('lines ended by a lone CR', b'Open the file\rPrint the page\r'),
    Case('--input-format jsonl with a line that is not JSON',
         b'{"inputs": "Open the file"}\nPrint the page\n', ['--input-format', 'jsonl']),
    Case('bytes that are not UTF-8', b'Open the file\nPrint \xff page\n'),
    Case('bytes that are not UTF-8, --errors replace', b'Open the file\nPrint \xff page\n',
         ['--errors', 'replace']),
    Case('empty and blank lines', b'\nOpen the file\n  \n\nPrint the page\n'),
    Case('a 10,000-character line', b'Open the file\n' + b'a' * 10_000 + b'\n'),
    Case('a 10,000-character line, --truncate-inputs', b'Open the file\n' + b'a' * 10_000 +
         b'\n', ['--truncate-inputs']),
    Case('an empty file', b'\n\n'),
    Case('a file that does not exist', None, ['--input', '/nonexistent/in.txt']),
    Case('inputs on standard input (--input -)', b'Open the file\nPrint the page\n',
         stdin=True),
    Case('weights that make the logits NaN for one input (line 2)',
         b'Open the file\nPrint on the printer\nClose the window\n', setup=_nan_checkpoint),
    Case('an --output written by a run with another seed',
         b'Open the file\nPrint the page\n', setup=_stale_output),
    Case('an --output that another program wrote', b'Open the file\n',
         setup=_foreign_output),
    Case('--gamma 0', b'Open the file\n', ['--gamma', '0']),
    Case('--top-p 1.5 with sampling', b'Open the file\n', ['--temperature', '1', '--top-p',
                                                           '1.5']),
    Case('--max-decode-len 0', b'Open the file\n', ['--max-decode-len', '0']),
    Case('--gamma 100000', b'Open the file\n', ['--gamma', '100000']),
    Case('--seed 4294967296 (2**32)', b'Open the file\n', ['--seed', '4294967296']),
    Case('--temperature inf', b'Open the file\n', ['--temperature', 'inf']),
    Case('--output -: the records on standard output', b'Open the file\nPrint the page\n',
         ['--output', '-']),
    Case('--output under a file, not a folder', b'Open the file\n',
         ['--output', '/dev/null/records.jsonl']),
    Case('--vocab of another model (the man-page pair\'s, given to the demo pair)',
         b'Open the file\n', setup=_other_vocab),
    Case('--dtype foo', b'Open the file\n', ['--dtype', 'foo']),
    Case('a checkpoint whose orbax _METADATA is cut short', b'Open the file\n',
         setup=_damaged_checkpoint('metadata')),
    Case('a checkpoint whose largest array file is cut short', b'Open the file\n',
         setup=_damaged_checkpoint('data'), process=True),
    Case('--gamma 1000000000 --max-decode-len 1000000000 (far more memory than there is)',
         b'Open the file\n', ['--gamma', '1000000000', '--max-decode-len', '1000000000']),
    Case('--coordinator-address without --num-processes and --process-id', b'Open the file\n',
         ['--coordinator-address', 'localhost:1234']),
]


def run(args: List[str], stdin: Optional[bytes] = None):
  """(exit code, stdout, stderr) of `python -m specjax.decode args`, in this process."""
  from specjax import decode  # pylint: disable=import-outside-toplevel
  out, err = io.StringIO(), io.StringIO()
  saved = sys.stdin
  if stdin is not None:
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin))
  try:
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      try:
        code = decode.main(args)
      except SystemExit as e:  # argparse refusing a flag
        code = e.code
  finally:
    sys.stdin = saved
  return code, out.getvalue(), err.getvalue()


def run_process(args: List[str], stdin: Optional[bytes] = None):
  """(exit code, stdout, stderr) of `python -m specjax.decode args`, as its own process."""
  import subprocess  # pylint: disable=import-outside-toplevel
  proc = subprocess.run([sys.executable, '-m', 'specjax.decode'] + args, input=stdin,
                        capture_output=True, timeout=600,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def decode_module():
  from specjax import decode  # pylint: disable=import-outside-toplevel
  return decode


def outcome(case: Case) -> str:
  """What the case gets, in one line: the error, or the records written."""
  with tempfile.TemporaryDirectory() as tmp:
    tmp = pathlib.Path(tmp)
    src = tmp / 'in.txt'
    if case.data is not None:
      src.write_bytes(case.data)
    flags = list(case.flags) + (case.setup(tmp) if case.setup else [])
    if '--input' not in flags:
      flags = ['--input', '-' if case.stdin else str(src)] + flags
    if '--output' not in flags:
      flags += ['--output', str(tmp / 'records.jsonl')]
    runner = run_process if case.process else run
    code, stdout, err = runner(QUICK + flags, case.data if case.stdin else None)  # flags win
    if code != 0:
      lines = err.strip().splitlines()
      # A process's last line of its own: library threads (orbax's, on a damaged
      # checkpoint) may print a traceback after it before the process ends.
      mine = [l for l in lines if l.startswith(('error:', 'python -m specjax'))]
      line = mine[-1] if case.process and mine else lines[-1]
      package = os.path.dirname(os.path.abspath(decode_module().__file__))
      line = line.replace(str(tmp) + os.sep, '').replace(package + os.sep, 'specjax/')
      line = re.sub(r'the [0-9,.]+ GiB of this host', 'the N GiB of this host', line)
      return f'exit {code}: `{line}`'
    path = flags[flags.index('--output') + 1]
    text = stdout if path == '-' else pathlib.Path(path).read_text()
    records = [json.loads(r) for r in text.splitlines()]
    shown = [{k: (v[:40] + '...' if isinstance(v, str) and len(v) > 40 else v)
              for k, v in r.items() if k not in ('prediction', 'target_calls', 'accepted',
                                                 'drafted', 'num_tokens')} for r in records]
    return f'exit 0, {len(records)} records: `{json.dumps(shown, ensure_ascii=False)}`'


HEADER = """# Reliability

Generated by `python tests/reliability_cases.py`; `tests/test_reliability_doc.py` runs every
case again and fails if this page no longer says what happens. Each case runs `python -m
specjax.decode --input FILE --output records.jsonl {quick}` on the bundled demo pair;
records are shown without their predictions and counts.

## Bad inputs and what each gets

| case | what happens |
|---|---|
"""

ELSEWHERE = """
## Cases that take more than one decode, and the test that runs each

| case | what happens | test |
|---|---|---|
| Ctrl-C during the imports, the loading, the compilation or the decode | exit 130, one line: `interrupted: N inputs are in OUT; rerun the same command to resume` (or `nothing was written to a file`); every record written is whole | `tests/test_resume.py::test_ctrl_c_at_any_moment_is_one_line_and_exit_130` |
| Ctrl-C under `bench`, `plan`, `plan --speed` or `evaluate` | exit 130, one line saying what is left (the bench and the plans write their files whole at the end; a plan's rows so far are in its .partial.json, which `--resume` continues from) | `tests/test_interrupt.py::test_ctrl_c_ends_each_tool_in_one_line` |
| Ctrl-C in the first tenth of a second, before Python runs the tool's first line | killed by the signal (exit -2, no line) before Python installs its handler, then Python's own KeyboardInterrupt traceback (no tool can catch it yet); nothing was written | none |
| Ctrl-C after a run wrote everything, while Python shuts down (most of a second after jax) | ignored: the tool ends with its own exit code (`interrupt.finish`; the shutdown would otherwise kill it with the signal: exit -2, no line) | `tests/test_interrupt.py::test_ctrl_c_during_the_shutdown_after_a_complete_run_is_ignored` |
| kill -9 mid-run (a record cut short), then the same command | the cut record is dropped and redecoded: the file of an uninterrupted run, byte for byte | `tests/test_resume.py::test_killed_and_resumed_run_writes_the_uninterrupted_file` |
| the disk fills while records are written | exit 2: `error: cannot write OUT: No space left on device; 2 records are in it: free space (or pass another --output) and rerun the same command to resume`; the rerun completes the file | `tests/test_output_file.py::test_a_full_disk_is_one_line_and_the_rerun_resumes` |
| two runs started on one --output | the second: exit 2, `error: another run is writing OUT; wait for it to finish, or pass another --output`, before any model loads | `tests/test_output_file.py::test_a_second_writer_is_refused_in_one_line_before_any_load` |
| a record deleted from a finished output (or one too many), then the same command | the missing input is redecoded in its place; nothing is repeated | `tests/test_output_file.py::test_resume_redecodes_a_deleted_record_in_place` |
| an OUT.run.json that specjax did not write | exit 2, `... exists and was not written by specjax ...`; the file is left as it was | `tests/test_output_file.py::test_a_sidecar_specjax_did_not_write_is_kept` |
| --output in folders that do not exist | they are made; a run that ends before its first record (a bad --target, say) removes them again, and nothing else | `tests/test_output_file.py::test_folders_made_for_a_run_that_ends_before_its_first_record_are_removed` |
| a resume with another seed, target or --max-decode-len | exit 2, `error: OUT was written by a run with another ...`; the file is left as it was | `tests/test_resume.py::test_a_resume_with_another_setting_or_model_is_refused` |
| the same `--gamma auto` command run twice, or interrupted and rerun (greedy or sampled) | one gamma (measured once, kept in a cache keyed by the settings, and a sampled run's in its sidecar), so one file | `tests/test_reruns.py::test_sampled_gamma_auto_is_kept_and_reused`, `tests/test_reruns.py::test_sigkill_of_a_sampled_gamma_auto_refill_run_then_rerun` |
| `python -m specjax.plan` or `plan --speed` without --output | writes specjax_reports/ in the current folder, never the committed docs/ | `tests/test_reports.py` |
| a quick or CPU-only `plan --speed` given a full TPU plan's path | exit 2 before compiling anything; the file is left as it was | `tests/test_reports.py::test_the_plans_refuse_to_replace_tpu_documents_before_compiling` |
| a plan or bench killed while it writes, or a write that fails | the old file whole, no temporary left | `tests/test_reports.py::test_a_failed_write_leaves_the_old_file_and_no_temporary`, `tests/test_speed.py::test_quick_speed_plan_killed_leaves_the_old_report_then_resumes` |
| an unwritable `--json`, `--plot` or `--markdown` of the bench | exit 2 naming the flag, before any work | `tests/test_reports.py::test_unwritable_outputs_are_refused_before_any_work` |
| the API given float or bool ids, rows or settings of the wrong length, num_inputs < 0, an EOS id outside the vocabulary, a float top_k, an int rng | a one-line ValueError naming the argument | `tests/test_api_validation.py::test_bad_arguments_are_one_line_value_errors` |
| the API given the draft's params as the target's | a one-line ValueError ending `(were target_params and draft_params swapped?)` | `tests/test_api_validation.py::test_swapped_params_are_named` |
"""

EXACTNESS = """
## What exactness is proven by which test

| property | test |
|---|---|
| greedy speculative output equals the target's own greedy decode, token for token (Markov, decoder-only transformer, T5; gamma 1, 3, 7; batch 1 and 4; same, unrelated and adversarial drafts) | `tests/test_greedy_exact.py::test_greedy_speculative_equals_target`, `tests/test_t5_speculative.py::test_t5_greedy_speculative_equals_target` |
| sampled output follows the target's warped distribution (chi-square against exactly enumerated Markov probabilities: T=1, T=0.7 + top-k, top-p) and a deliberately broken rule fails the same test | `tests/test_sampling_exact.py::test_first_three_tokens_follow_target`, `tests/test_sampling_exact.py::test_broken_rule_with_unwarped_q_is_detected` |
| a vocabulary of 4096 under top-p 0.9 (the tail binned) | `tests/test_sampling_exact.py::test_first_token_over_four_thousand_follows_the_target_under_top_p` |
| rows of one batch with their own settings (greedy, T=0.7 + top-k, T=1 + top-p): greedy rows exact, sampled rows follow their own targets, new values without recompiling | `tests/test_sampling_exact.py::test_rows_of_one_batch_sample_with_their_own_settings_without_recompiling` |
| no token outside the warped support in 10^6 draws at V = 32128 (top-p 0.9, top-k 40), for the target alone and for speculative decoding; the old inverse CDF fails the same check | `tests/test_sampler_support.py` |
| a token of target probability 0 is never accepted, even at r = 0 | `tests/test_sampler_support.py::test_a_token_of_target_probability_zero_is_never_accepted` |
| top-k and top-p agree with an independent reference (hand-enumerated boundary cases, ties at the k-th value, Hugging Face's warpers) | `tests/test_warp_reference.py` |
| acceptance and commit invariants for random p, q, drafts, positions, EOS and lengths | `tests/test_properties.py` |
| the refilled stream, the mesh (1x8, 2x4, 8x1) and refill on a mesh give each input the output of its own unsharded decode, greedy and sampled; an input's sampled output does not depend on batch, refill or mesh | `tests/test_streaming.py`, `tests/multidevice/test_sharding.py` |
| a killed and resumed run writes the file an uninterrupted run writes | `tests/test_resume.py` |
| interrupted and rerun, greedy and sampled, `--gamma auto` and a fixed gamma, with and without refill: the file of an uninterrupted run; two runs of one sampled command write one file | `tests/test_reruns.py::test_interrupted_and_rerun_equals_an_uninterrupted_run`, `tests/test_reruns.py::test_sigkill_of_a_sampled_gamma_auto_refill_run_then_rerun` |
| two processes joined by `jax.distributed` write the file of one process on the same mesh, from process 0 alone | `tests/multihost/test_two_processes.py` |
| the plans and the bench write their documents whole or not at all, and a quick or CPU-only plan never replaces a full TPU one | `tests/test_reports.py`, `tests/test_speed.py::test_quick_speed_plan_killed_leaves_the_old_report_then_resumes` |
| arguments of the wrong kind, shape or range (float ids, swapped params, an int rng, ...) are one-line ValueErrors | `tests/test_api_validation.py` |
| non-finite logits are counted for their row only | `tests/test_bad_inputs.py::test_nonfinite_logits_are_counted_for_their_row_only` |
| ids outside the vocabulary and rows of padding alone are refused before anything runs | `tests/test_bad_inputs.py` |
"""


def render() -> str:
  rows = [f'| {case.name} | {outcome(case)} |' for case in CASES]
  return (HEADER.format(quick=' '.join(QUICK)) + '\n'.join(rows) + '\n' + ELSEWHERE +
          EXACTNESS)


if __name__ == '__main__':
  sys.path.insert(0, str(ROOT))
  DOC.write_text(render())
  print(f'wrote {DOC}')
