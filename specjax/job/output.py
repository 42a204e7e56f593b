"""`--output out.jsonl`: one JSON line per input, in input order, and a run that resumes.

Each record is written as one `write` of a whole line, then flushed and synced, as soon as
its batch is done. Beside the file, `out.jsonl.run.json` holds the run's fingerprint: the
models (names, checkpoints, configs, a digest of the params), the input file's hash and
everything that changes an output (sampling, seed, lengths, prefix, dtypes). Rerunning the
same command after a kill (SIGKILL, Ctrl-C) reads which inputs the file already holds, by
their line numbers and texts, keeps the records that are in input order from the first
input on, drops the rest (a line cut short by the kill, a record out of place) and decodes
only what is missing: every input once, in order. A run whose fingerprint differs is
refused with one line naming what changed.

Folders missing from the path are made (and removed again when the run ends before its
first record). One run writes a file at a time: the file is locked while its run lasts,
and a second run on it is refused in one line. A sidecar that specjax did not write is
never overwritten. `-` writes the records to standard output instead (nothing to resume).
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from typing import List, Optional, Sequence

from specjax import reports

SIDECAR_SUFFIX = '.run.json'
# What a sidecar written here says of itself, so that another file of that name is kept.
SIDECAR_KIND = 'specjax.decode output fingerprint'
STDOUT = '-'


class JsonlOutput:
  """A resumable JSONL output file (see the module docstring).

  Attributes:
    path: the output file.
    sidecar: the fingerprint file beside it.
    written: records in the file (after `begin`: those of an earlier run that are kept).
  """

  def __init__(self, path: str):
    """Opens and locks the file (created empty if missing, with any folders missing from
    its path), before anything slow runs.

    Raises:
      ValueError: another run holds the file, or it cannot be written (one line).
    """
    self.path = os.fspath(path)
    self.sidecar = self.path + SIDECAR_SUFFIX
    self.written = 0
    self._created = not os.path.exists(self.path)
    self._begun = False
    self._made = []  # folders made for the file, innermost first
    try:
      for folder in reversed(reports.missing_folders(self.path)):
        os.mkdir(folder)
        self._made.insert(0, folder)
      self._file = open(self.path, 'a+b')  # pylint: disable=consider-using-with
    except OSError as e:
      self._remove_made_folders()
      raise ValueError(f'cannot write --output {self.path}: {e.strerror}; pass a writable '
                       'path') from None
    try:
      fcntl.flock(self._file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      self._file.close()
      self._file = None
      self._created = False
      self._made = []
      raise ValueError(f'another run is writing {self.path}; wait for it to finish, or pass '
                       'another --output') from None

  def begin(self, fingerprint: dict, examples: Sequence[dict]) -> int:
    """Prepares the file for the run; returns how many leading inputs are already done.

    Args:
      fingerprint: JSON-able description of everything the outputs depend on.
      examples: the run's inputs, in order ('inputs', 'input_line').

    Raises:
      ValueError: the file exists from another run (another fingerprint, or none), or a
        sidecar of that name was not written by specjax.
    """
    self._begun = True
    if os.path.getsize(self.path) > 0:
      self.written = self._resume(fingerprint, examples)
    else:
      self._check_sidecar_is_ours()
      reports.write_text(self.sidecar, json.dumps(
          {'kind': SIDECAR_KIND, 'fingerprint': fingerprint}, indent=1, sort_keys=True))
    return self.written

  def stored_fingerprint(self) -> Optional[dict]:
    """The fingerprint of the run that wrote this file (from its sidecar), when there is
    one to resume; else None."""
    if os.path.getsize(self.path) == 0 or not os.path.exists(self.sidecar):
      return None
    try:
      with open(self.sidecar, encoding='utf-8') as f:
        stored = json.load(f).get('fingerprint')
    except (OSError, ValueError, AttributeError):
      return None
    return stored if isinstance(stored, dict) else None

  def _check_sidecar_is_ours(self) -> None:
    if not os.path.exists(self.sidecar):
      return
    try:
      with open(self.sidecar, encoding='utf-8') as f:
        ours = 'fingerprint' in json.load(f)
    except (OSError, ValueError, TypeError):
      ours = False
    if not ours:
      raise ValueError(f'{self.sidecar} exists and was not written by specjax; move it, or '
                       'pass another --output')

  def _resume(self, fingerprint: dict, examples: Sequence[dict]) -> int:
    if not os.path.exists(self.sidecar):
      raise ValueError(f'{self.path} exists but has no {self.sidecar}, so it cannot be '
                       'resumed; pass another --output or delete the file')
    with open(self.sidecar, encoding='utf-8') as f:
      stored = json.load(f)['fingerprint']
    changed = sorted(k for k in set(stored) | set(fingerprint)
                     if stored.get(k) != fingerprint.get(k))
    if changed:
      raise ValueError(f'{self.path} was written by a run with another {", ".join(changed)}; '
                       'pass another --output, or delete it to start over')
    self._file.seek(0)
    data = self._file.read()
    keep = done_prefix(data.split(b'\n')[:-1], examples)  # the last piece: unterminated
    kept = sum(len(line) + 1 for line in data.split(b'\n')[:keep])
    if kept < len(data):
      self._file.truncate(kept)
    return keep

  def write(self, record: dict) -> None:
    """Appends one record as one line, flushed to disk.

    Raises:
      ValueError: the line could not be written (a full disk, say): one line naming the
        file and how many records it holds; a rerun resumes from them.
    """
    try:
      self._file.write((json.dumps(record, ensure_ascii=False) + '\n').encode('utf-8'))
      self._file.flush()
      os.fsync(self._file.fileno())
    except OSError as e:
      raise ValueError(f'cannot write {self.path}: {e.strerror}; {self.written} records are '
                       'in it: free space (or pass another --output) and rerun the same '
                       'command to resume') from None
    self.written += 1

  def close(self) -> None:
    """Closes the file (and so releases its lock); a file this run created and never began
    (an error came first) is removed again, with the folders it made for it."""
    if self._file is not None:
      if self._created and not self._begun:
        os.remove(self.path)
        self._remove_made_folders()
      try:
        self._file.close()
      except OSError:  # a write failed already and said so; the lock goes with the file
        pass
      self._file = None

  def _remove_made_folders(self) -> None:
    for folder in self._made:  # innermost first; one that holds something else stays
      try:
        os.rmdir(folder)
      except OSError:
        return
    self._made = []


class StdoutOutput:
  """`--output -`: records as JSON lines on standard output, flushed one by one."""

  path = '<stdout>'

  def __init__(self):
    self.written = 0

  def begin(self, fingerprint: dict, examples: Sequence[dict]) -> int:
    del fingerprint, examples
    return 0

  def stored_fingerprint(self) -> None:
    return None  # nothing to resume

  def write(self, record: dict) -> None:
    sys.stdout.write(json.dumps(record, ensure_ascii=False) + '\n')
    sys.stdout.flush()
    self.written += 1

  def close(self) -> None:
    sys.stdout.flush()


def done_prefix(lines: List[bytes], examples: Sequence[dict]) -> int:
  """How many leading lines are the records of the leading inputs, in order.

  A line counts when it is a JSON object whose 'input_line' and 'inputs' are those of the
  input at its position; the first that is not ends the prefix.
  """
  for i, line in enumerate(lines):
    if i >= len(examples):
      return i
    try:
      record = json.loads(line)
    except ValueError:
      return i
    example = examples[i]
    if (not isinstance(record, dict) or record.get('input_line') != example['input_line']
        or record.get('inputs') != example['inputs']):
      return i
  return len(lines)


def open_output(path: Optional[str]):
  """The output of `--output PATH` (locked), standard output for '-', or None."""
  if not path:
    return None
  return StdoutOutput() if path == STDOUT else JsonlOutput(path)
