"""Input files of `python -m specjax.decode`: plain lines or JSONL, read strictly.

A file whose first non-empty line parses as a JSON object is JSONL (or `--input-format
jsonl` says so): then every line must be a JSON object with a string input field, and one
that is not is an error naming it, never a silent fall back to text. Otherwise every line
is a text, whatever it starts with ("{0} not found" is a text; `--input-format text`
forces it). A record's other fields are carried to its output record; a field the output
writes itself (`RESERVED`) is refused rather than overwritten. Bytes that are not UTF-8
(and JSON escapes of lone surrogates) stop the run with the line's number, unless
`--errors replace`. A byte order mark is dropped; lines end at \n, \r\n or a lone \r.
Empty lines are skipped; each example keeps the number of the line it came from
(`input_line`), so every output record can be traced back to its input.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from typing import List, Optional, Tuple

from specjax.checkpoints.registry import DEMO_SAMPLES

INPUT_FORMATS = ('auto', 'text', 'jsonl')
ERROR_MODES = ('strict', 'replace')
FIELD = 'inputs'
LINE = 'input_line'
# The fields an output record writes itself (specjax.job.decode_job): an input's own field
# of one of these names would be lost.
RESERVED = (LINE, 'prediction', 'num_tokens', 'target_calls', 'accepted', 'drafted',
            'truncated', 'target_prediction')
BOM = b'\xef\xbb\xbf'


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
  data = data[len(BOM):] if data.startswith(BOM) else data
  for number, raw in enumerate(re.split(rb'\r\n|\r|\n', data), 1):
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


def _json_object(text: str) -> Optional[dict]:
  """The JSON object of a line, or None when the line is not one."""
  try:
    record = json.loads(text)
  except ValueError:
    return None
  return record if isinstance(record, dict) else None


def _checked(record: Optional[dict], path: str, number: int, errors: str) -> dict:
  """A JSONL line's record, or a one-line error naming the line."""
  if record is None or not isinstance(record.get(FIELD), str):
    raise ValueError(f'{path}:{number}: not a JSON object with a string "{FIELD}" field; '
                     'fix the line or pass --input-format text')
  clash = [k for k in RESERVED if k in record]
  if clash:
    raise ValueError(f'{path}:{number}: field "{clash[0]}" is one the output writes itself; '
                     'rename it in the input')
  try:
    json.dumps(record, ensure_ascii=False).encode('utf-8')
  except UnicodeEncodeError:
    if errors != 'replace':
      raise ValueError(f'{path}:{number}: a JSON escape encodes no character (a lone '
                       'surrogate such as \\ud800); fix the line or pass --errors '
                       'replace') from None
    record = json.loads(json.dumps(record).encode('utf-8').decode('utf-8'),
                        object_hook=_replace_surrogates)
  return record


def _replace_surrogates(record: dict) -> dict:
  fix = lambda v: (v.encode('utf-8', 'replace').decode('utf-8')
                   if isinstance(v, str) else v)
  return {fix(k): fix(v) for k, v in record.items()}


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
  records = [_json_object(text) for _, text in lines]
  jsonl = input_format == 'jsonl' or (input_format == 'auto' and lines and
                                      records[0] is not None)
  if jsonl:
    records = [_checked(r, path, number, errors) for (number, _), r in zip(lines, records)]
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
