"""Where the generators of documents (`plan`, `plan --speed`, `bench --markdown`) write, and
how, so that no run loses a document.

- By default a generator writes under `specjax_reports/` in the current directory, never
  into a repository's docs/, which hold reviewed figures: `--output PATH` names the file.
- Every file is written whole to a temporary file beside it and renamed over it
  (`write_text`, `write_json`), so a run killed half-way leaves the old file as it was.
- The rows a long run has measured so far go to `partial_path(rows)` as they come, which
  `--resume` reads; the finished document and its rows replace the old ones only at the end.
- A quick or CPU-only run refuses to replace the document of a full TPU run
  (`downgrade_error`): the figures of the one cannot stand in for the other.
"""
from __future__ import annotations

import contextlib
import json
import os
import tempfile
from typing import Any, Iterator, List, Optional

DEFAULT_DIR = 'specjax_reports'


def default_output(name: str) -> str:
  """The path a generator writes `name` to when no --output is given."""
  return os.path.join(DEFAULT_DIR, name)


@contextlib.contextmanager
def replacing(path: str) -> Iterator[str]:
  """Yields a temporary path beside `path` (same extension) to write; renames it over
  `path` when the block ends without an error, and removes it when one is raised."""
  folder = os.path.dirname(os.path.abspath(path))
  os.makedirs(folder, exist_ok=True)
  name = os.path.basename(path)
  fd, tmp = tempfile.mkstemp(dir=folder, prefix=f'.{name}.', suffix=os.path.splitext(name)[1])
  os.close(fd)
  try:
    yield tmp
    os.replace(tmp, path)
  finally:
    if os.path.exists(tmp):
      os.unlink(tmp)


def write_text(path: str, text: str) -> None:
  """Writes `text` to `path`, whole or not at all (`replacing`)."""
  with replacing(path) as tmp:
    with open(tmp, 'w', encoding='utf-8') as f:
      f.write(text)
      f.flush()
      os.fsync(f.fileno())  # on disk before the rename makes it the file


def other_sections(path: str, text: str, own=()) -> str:
  """The sections of the report already at `path` that its generator does not write, to
  append when it rewrites the report with `text`: each '## ' section (to the next '## ')
  whose title is neither a '## ' title of `text` nor starts with one of `own` (the titles
  the generator writes on some runs only), in the file's order ('' when none or no file).

  Whatever another script added to the report stays, whether or not the generator knows
  of that script; a section the generator wrote on an earlier run is its own to rewrite
  or leave out.
  """
  try:
    with open(path, encoding='utf-8') as f:
      old = f.read()
  except OSError:
    return ''
  written = {line for line in text.splitlines() if line.startswith('## ')}
  out = ''
  for part in ('\n' + old).split('\n## ')[1:]:
    title = '## ' + part.split('\n', 1)[0]
    if title not in written and not title.startswith(tuple(own)):
      out += '\n## ' + part.rstrip('\n') + '\n'
  return out


def write_json(path: str, data: Any) -> None:
  """Writes `data` as indented JSON to `path`, whole or not at all (`write_text`)."""
  write_text(path, json.dumps(data, indent=1) + '\n')


def missing_folders(path: str) -> List[str]:
  """The folders of `path` that do not exist yet, innermost first."""
  missing = []
  folder = os.path.dirname(os.path.abspath(path))
  while not os.path.exists(folder):
    missing.append(folder)
    folder = os.path.dirname(folder)
  return missing


def unwritable(path: str) -> Optional[str]:
  """Why `path` cannot be written (a folder, or a folder that cannot be made or written
  to), or None: checked before a long run rather than after it."""
  if os.path.isdir(path):
    return 'is a directory; name a file'
  missing = missing_folders(path)
  folder = os.path.dirname(missing[-1] if missing else os.path.abspath(path))
  if not os.path.isdir(folder):
    return f'{folder} is not a directory'
  if not os.access(folder, os.W_OK | os.X_OK) or (
      os.path.exists(path) and not os.access(path, os.W_OK)):
    return 'permission denied; pass a path you can write'
  return None


def partial_path(rows_path: str) -> str:
  """Where the rows of an unfinished run go: X.json -> X.partial.json."""
  return os.path.splitext(rows_path)[0] + '.partial.json'


def read_rows(rows_path: str) -> Optional[dict]:
  """The rows a --resume starts from: those of an unfinished run if there are any, else
  the finished run's, else None."""
  for path in (partial_path(rows_path), rows_path):
    if os.path.exists(path):
      with open(path, encoding='utf-8') as f:
        return json.load(f)
  return None


def downgrade_error(rows_path: str, output: str, tpu: bool, quick: bool) -> Optional[str]:
  """The one-line error when a run that is not on TPU, or not the full grid, would replace
  the document of one that was (its rows at `rows_path` say which: a 'run' record
  {'tpu', 'quick'}, or TPU rows in a memory plan); None when it may write.
  """
  if not os.path.exists(rows_path) or (tpu and not quick):
    return None
  try:
    with open(rows_path, encoding='utf-8') as f:
      old = json.load(f)
  except (OSError, ValueError):
    return None
  run = old.get('run') if isinstance(old, dict) else None
  if isinstance(run, dict):
    full_tpu = bool(run.get('tpu')) and not run.get('quick')
  else:  # a memory plan's rows: TPU rows mean a --tpu run
    full_tpu = bool(isinstance(old, dict) and old.get('tpu'))
  if not full_tpu:
    return None
  this = ' '.join(x for x, on in (('quick', quick), ('CPU-only', not tpu)) if on)
  return (f'error: {output} holds a full TPU v4 run; this {this} run would replace it: '
          'pass another --output')
