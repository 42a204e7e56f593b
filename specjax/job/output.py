"""`--output out.jsonl`: one JSON line per input, in input order, and a run that resumes.

Each record is written as one `write` of a whole line, then flushed and synced, as soon as
its batch is done. Beside the file, `out.jsonl.run.json` holds the run's fingerprint: the
models (names, checkpoints, configs, a digest of the params), the input file's hash and
everything that changes an output (sampling, seed, lengths, prefix, dtypes). Rerunning the
same command after a kill (SIGKILL, Ctrl-C) finds the records already written, drops a
line cut short by the kill, and decodes only the rest; a run whose fingerprint differs is
refused with one line naming what changed.
"""
from __future__ import annotations

import json
import os
from typing import Optional

SIDECAR_SUFFIX = '.run.json'


class JsonlOutput:
  """A resumable JSONL output file (see the module docstring).

  Attributes:
    path: the output file.
    sidecar: the fingerprint file beside it.
    written: records in the file (after `begin`: those of an earlier run).
  """

  def __init__(self, path: str):
    self.path = os.fspath(path)
    self.sidecar = self.path + SIDECAR_SUFFIX
    self.written = 0
    self._file = None

  def begin(self, fingerprint: dict, total: int) -> int:
    """Opens the file for the run; returns how many leading inputs are already done.

    Args:
      fingerprint: JSON-able description of everything the outputs depend on.
      total: the run's number of inputs.

    Raises:
      ValueError: the file exists from another run (another fingerprint, or none), or
        holds more records than the run has inputs.
    """
    if os.path.exists(self.path) and os.path.getsize(self.path) > 0:
      self.written = self._resume(fingerprint, total)
    else:
      _write_atomically(self.sidecar, json.dumps({'fingerprint': fingerprint}, indent=1,
                                                 sort_keys=True))
      open(self.path, 'w', encoding='utf-8').close()
    self._file = open(self.path, 'a', encoding='utf-8')
    return self.written

  def _resume(self, fingerprint: dict, total: int) -> int:
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
    with open(self.path, 'rb') as f:
      data = f.read()
    complete = data[:data.rfind(b'\n') + 1]  # a line cut short by a kill is dropped
    if len(complete) < len(data):
      with open(self.path, 'r+b') as f:
        f.truncate(len(complete))
    lines = complete.count(b'\n')
    if lines > total:
      raise ValueError(f'{self.path} holds {lines} records but the input has {total}; pass '
                       'another --output')
    return lines

  def write(self, record: dict) -> None:
    """Appends one record as one line, flushed to disk."""
    self._file.write(json.dumps(record, ensure_ascii=False) + '\n')
    self._file.flush()
    os.fsync(self._file.fileno())
    self.written += 1

  def close(self) -> None:
    if self._file is not None:
      self._file.close()
      self._file = None


def _write_atomically(path: str, text: str) -> None:
  tmp = path + '.tmp'
  with open(tmp, 'w', encoding='utf-8') as f:
    f.write(text)
    f.flush()
    os.fsync(f.fileno())
  os.replace(tmp, path)


def open_output(path: Optional[str]) -> Optional[JsonlOutput]:
  """The output of `--output PATH`, or None without one."""
  return JsonlOutput(path) if path else None
