"""Input files of `python -m specjax.decode`: plain lines or JSONL, read strictly.

A file is JSONL only when every non-empty line parses as a JSON object with the input
field (or `--input-format jsonl` says so, and then a line that does not is an error naming
it); otherwise every line is a text, whatever it starts with ("{0} not found" is a text).
Bytes that are not UTF-8 stop the run with the line's number, unless `--errors replace`.
Empty lines are skipped; each example keeps the number of the line it came from
(`input_line`), so every output record can be traced back to its input.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from typing import List, Optional, Tuple

from specjax.checkpoints.registry import DEMO_SAMPLES

INPUT_FORMATS = ('auto', 'text', 'jsonl')
ERROR_MODES = ('strict', 'replace')
FIELD = 'inputs'
LINE = 'input_line'


def _read_bytes(path: str) -> bytes:
  if path == '-':
    return sys.stdin.buffer.read()
  if not os.path.exists(path):
    raise FileNotFoundError(f'input file {path} does not exist; pass --input FILE (or - for '
                            'stdin)')
  with open(path, 'rb') as f:
    return f.read()


def _lines(data: bytes, path: str, errors: str) -> List[Tuple[int, str]]:
  """(line number, text) of every non-empty line, decoded as UTF-8."""
  out = []
  for number, raw in enumerate(data.split(b'\n'), 1):
    raw = raw[:-1] if raw.endswith(b'\r') else raw
    try:
      text = raw.decode('utf-8')
    except UnicodeDecodeError as e:
      if errors != 'replace':
        raise ValueError(f'{path}:{number}: byte 0x{raw[e.start]:02x} at column {e.start + 1} '
                         'is not UTF-8; fix the file or pass --errors replace') from None
      text = raw.decode('utf-8', errors='replace')
    if text.strip():
      out.append((number, text))
  return out


def _as_record(text: str):
  """The JSON object of a line with a string input field, or None."""
  try:
    record = json.loads(text)
  except ValueError:
    return None
  ok = isinstance(record, dict) and isinstance(record.get(FIELD), str)
  return record if ok else None


def read_inputs(path: Optional[str], prefix: str, input_format: str = 'auto',
                errors: str = 'strict') -> Tuple[List[dict], str]:
  """Reads the examples of a file ('-' for stdin; None: the bundled samples).

  Args:
    path: the input file.
    prefix: a task prefix added to inputs that lack it ('' for none).
    input_format: 'auto' (JSONL iff every non-empty line is a JSON object with an "inputs"
      string), 'text' or 'jsonl'.
    errors: 'strict' (non-UTF-8 bytes are an error naming the line) or 'replace'.

  Returns:
    (examples, sha256 of the file's bytes): one dict per non-empty line, {"inputs": text
    (prefix added if missing), "input_line": its line number, and a JSONL line's other
    fields}.

  Raises:
    FileNotFoundError: no such file.
    ValueError: non-UTF-8 bytes, a bad JSONL line under 'jsonl', or no example at all.
  """
  if input_format not in INPUT_FORMATS:
    raise ValueError(f'--input-format must be one of {", ".join(INPUT_FORMATS)}, got '
                     f'{input_format!r}')
  if errors not in ERROR_MODES:
    raise ValueError(f'--errors must be one of {", ".join(ERROR_MODES)}, got {errors!r}')
  path = path or DEMO_SAMPLES
  data = _read_bytes(path)
  lines = _lines(data, path, errors)
  records = [_as_record(text) for _, text in lines]
  if input_format == 'jsonl':
    for (number, _), record in zip(lines, records):
      if record is None:
        raise ValueError(f'{path}:{number}: not a JSON object with a string "{FIELD}" field; '
                         'fix the line or pass --input-format text')
  jsonl = input_format == 'jsonl' or (input_format == 'auto' and lines and
                                      all(r is not None for r in records))
  examples = []
  for (number, text), record in zip(lines, records):
    record = dict(record) if jsonl else {FIELD: text}
    if prefix and not record[FIELD].startswith(prefix):
      record[FIELD] = prefix + record[FIELD]
    record[LINE] = number
    examples.append(record)
  if not examples:
    raise ValueError(f'input {path} has no examples; pass --input with one text per line')
  return examples, hashlib.sha256(data).hexdigest()
