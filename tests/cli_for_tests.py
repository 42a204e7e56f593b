"""`python -m specjax.decode` run in the test's own process, and what its runs leave."""
import contextlib
import io
import json
import pathlib

import pytest

from specjax import decode
from specjax.job import gamma_choice


def main_json(args):
  """decode.main(args) in this process: (exit code, the JSON summary or None, stderr)."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = decode.main(args)
  lines = out.getvalue().strip().splitlines()
  return code, (json.loads(lines[-1]) if code == 0 and lines else None), err.getvalue()


def predictions(path):
  """The 'prediction' of each record of an output file."""
  return [json.loads(line)['prediction'] for line in pathlib.Path(path).read_text().splitlines()]


def runs_into(tmp, args, out: dict):
  """go(name, extra=()): runs `args + extra` with the output tmp/NAME.jsonl, asserts it
  succeeded and keeps (summary, output file) in out[name]."""
  def go(name, extra=()):
    path = tmp / f'{name}.jsonl'
    code, summary, err = main_json(list(args) + list(extra) + ['--output', str(path)])
    assert code == 0, err
    out[name] = (summary, path)
  return go


def edit_the_cached_choice(**changes):
  """Changes the one entry of `--gamma auto`'s cache (SPECJAX_CACHE_DIR's) in place."""
  cache = pathlib.Path(gamma_choice.cache_file())
  (key, entry), = json.loads(cache.read_text()).items()
  entry.update(changes)
  cache.write_text(json.dumps({key: entry}))


def calibrated_runs(tmp, args, edits: dict, after=()) -> dict:
  """{name: (summary, output file)} of runs of `args` sharing one `--gamma auto` cache
  under tmp: 'first' (it calibrates), 'rerun' (it reads the cache), one run per entry of
  `edits` ({name: changes to the cached choice}), then each (name, extra flags) of
  `after`."""
  out = {}
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv('SPECJAX_CACHE_DIR', str(tmp / 'cache'))
    go = runs_into(tmp, args, out)
    go('first')
    go('rerun')
    for name, changes in edits.items():
      edit_the_cached_choice(**changes)
      go(name)
    for name, extra in after:
      go(name, extra)
  return out
