"""Ctrl-C under the command-line tools: one line on stderr and exit 130, at once.

Installed before a tool's imports (which take seconds), so that an interrupt at any
moment (the imports, the loading, the compilation, the run) ends the same way. No exception
is raised, so no library can swallow it (a KeyboardInterrupt inside a garbage collector
callback is only reported) or crash on it while it unwinds; the process ends with
`os._exit`, before any library's threads (orbax's event loops, XLA's compiler) can print.
Nothing is lost by ending at once: the tools write each file whole (a temporary file
renamed over it) and each decoded record in one synced write. A tool that ran to its end
leaves through `finish`, which ignores a Ctrl-C during Python's shutdown.

Imports only the standard library: it must cost nothing before the handler is in place.
"""
from __future__ import annotations

import os
import signal
import sys
from typing import Callable, NoReturn


def error_line(text: str) -> None:
  """Writes `text` and its newline to stderr in ONE write, flushed: a library's thread that
  prints at the same moment (orbax's, on a damaged checkpoint) cannot land inside the line."""
  sys.stderr.write(text + '\n')
  sys.stderr.flush()


def exit_at_once(where: Callable[[], str]) -> None:
  """Makes SIGINT print `interrupted: {where()}` and exit 130.

  Args:
    where: what the interrupted run leaves behind and how to go on, called when the signal
      arrives (so that it can read the run's state then).
  """
  def handle(signum, frame) -> None:
    del signum, frame
    sys.stderr.write(f'\ninterrupted: {where()}\n')
    sys.stderr.flush()
    os._exit(130)
  signal.signal(signal.SIGINT, handle)


def raise_from_here() -> None:
  """Makes SIGINT raise KeyboardInterrupt again (Python's own handler), for a tool's last
  step: a write that cleans up its temporary files as the exception unwinds it."""
  signal.signal(signal.SIGINT, signal.default_int_handler)


def finish(code: int) -> NoReturn:
  """Ends a tool that ran to its end with exit code `code`; a Ctrl-C from here on is
  ignored.

  Everything is written by then. Python's shutdown (most of a second once jax is loaded)
  puts a Python-level handler back to the signal's default action, so a Ctrl-C in it
  would kill the process: exit -2, no line. Ignored, the process ends by itself with
  `code`. A shutdown that hangs still ends on SIGQUIT (Ctrl-\\) or a kill.
  """
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  sys.exit(code)
