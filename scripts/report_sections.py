"""Writing one section of a generated report: the scripts that measure a part of a report
put their "## ..." section in place (or at the end), leaving the rest as it is."""
from __future__ import annotations

import pathlib


def write_section(path: str, title: str, text: str) -> None:
  """Puts `text` in place of the file's section `title` ('## ...'), where it stands, or
  at the file's end."""
  p = pathlib.Path(path)
  old = p.read_text() if p.exists() else ''
  text = text.rstrip('\n') + '\n'
  at = old.find('\n' + title + '\n')
  if at < 0:
    p.write_text(old.rstrip('\n') + '\n\n' + text)
    return
  end = old.find('\n## ', at + 1)
  after = '\n' + old[end + 1:] if end >= 0 else ''
  p.write_text(old[:at + 1] + text + after)
