"""A persistent XLA compilation cache for the command-line tools.

Compiling is most of the time to a command's first output: `python -m specjax.decode`
compiles the speculative and the target-alone decode programs (and, with `--gamma auto`,
calibration's). JAX can keep each compiled program on disk and load it in the next process
instead of compiling it again (its persistent compilation cache); `for_command` turns that
on for one command:

- the directory is `--compile-cache DIR`; without the flag, the user's own JAX setting when
  there is one (JAX_COMPILATION_CACHE_DIR, or jax_compilation_cache_dir set in the process),
  left as the user configured it; else `default_directory()`, the `xla` folder of the
  specjax cache ($SPECJAX_CACHE_DIR, else $XDG_CACHE_HOME/specjax or ~/.cache/specjax);
  `--no-compile-cache` reads and writes no cache;
- every program is kept, however fast it compiled (MIN_COMPILE_SECONDS; JAX by default
  keeps only those that took a second or more, and most of a small model's take less);
- a directory that cannot be used (a file, not writable, not creatable) is one warning line
  on stderr, and the command compiles everything without a cache;
- an entry that cannot be read (damaged, or written by another JAX or XLA) is one warning
  line on stderr (one per program name: Python shows a warning of the same text once), and
  the program is compiled afresh; JAX's own warning is a multi-line Python warning
  (`short_warning`, installed by `for_command` only, never on import).

The cache is trusted like the code: whoever can write to its directory can make the
programs it holds run in a later command.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import warnings
from typing import Callable, Iterator, Optional

import jax
from jax.experimental.compilation_cache import compilation_cache as jax_cache
from tqdm import tqdm

from specjax.job import gamma_choice

FOLDER = 'xla'  # under the specjax cache (`gamma_choice.cache_dir`)
# The shortest compile whose program is kept. JAX's default, 1 s, keeps 2 of the 37
# programs of `python -m specjax.decode` (the demo pair, 2-core CPU), so a rerun compiles
# the rest again; 0 keeps every one (1.6 MB): its rerun's first output line came after
# 3.0 s against 3.9 s, and 4.3 s without the cache, median of 5 rounds, with no cost to
# the first run measured (scripts/first_output.py, docs/first_output.json).
MIN_COMPILE_SECONDS = 0.0
# The JAX options set here when specjax picks the directory, unless the user's environment
# sets them (JAX reads JAX_<OPTION> at import).
OPTIONS = {'jax_persistent_cache_min_compile_time_secs': MIN_COMPILE_SECONDS}
_STATE = ('jax_compilation_cache_dir', 'jax_enable_compilation_cache',
          *OPTIONS)
# JAX's warnings (jax/_src/compiler.py) for an entry it could not read or write.
_JAX_WARNING = re.compile(r"Error (reading|writing) persistent compilation cache entry for "
                          r"'([^']*)': (\w+)(?:: (.*))?", re.DOTALL)
DETAIL = 60  # characters of the error's text a shortened warning keeps


def default_directory() -> str:
  """`<the specjax cache>/xla`: $SPECJAX_CACHE_DIR/xla, else under $XDG_CACHE_HOME/specjax
  or ~/.cache/specjax."""
  return os.path.join(gamma_choice.cache_dir(), FOLDER)


def user_directory() -> Optional[str]:
  """The directory the user gave JAX (JAX_COMPILATION_CACHE_DIR, or the process's
  jax_compilation_cache_dir), or None."""
  return jax.config.jax_compilation_cache_dir or None


def unusable(directory: str) -> Optional[str]:
  """Why `directory` cannot hold the cache (it is a file, or cannot be made or written
  to), or None when it can; a missing directory is made. A remote path (`gs://...`) is
  left to JAX."""
  if '://' in directory:
    return None
  if os.path.exists(directory) and not os.path.isdir(directory):
    return 'not a directory'
  try:
    os.makedirs(directory, exist_ok=True)
    handle, probe = tempfile.mkstemp(dir=directory, prefix='.probe-')
    os.close(handle)
    os.unlink(probe)
  except OSError as e:
    reason = e.strerror or type(e).__name__
    return reason[:1].lower() + reason[1:]
  return None


def enable(directory: Optional[str] = None) -> Optional[str]:
  """Turns the persistent compilation cache on for this process; call it before anything
  compiles.

  Args:
    directory: where the cache lives; None: the user's JAX setting if there is one (used
      as it is, with the user's other cache options), else `default_directory()`.

  Returns:
    The directory used, or None: no cache (the user turned JAX's off, or the directory
    cannot be used; then one `warning: ...` line went to stderr).
  """
  if directory is None and user_directory():
    if not jax.config.jax_enable_compilation_cache:
      return None
    directory = user_directory()
  else:
    directory = os.path.abspath(os.path.expanduser(directory or default_directory()))
    for option, value in OPTIONS.items():
      if option.upper() not in os.environ:
        jax.config.update(option, value)
  problem = unusable(directory)
  if problem:
    disable()
    tqdm.write(f'warning: compile cache {directory}: {problem}; compiling without a cache',
               file=sys.stderr)
    return None
  if (directory != jax.config.jax_compilation_cache_dir
      or not jax.config.jax_enable_compilation_cache):
    jax.config.update('jax_compilation_cache_dir', directory)
    jax.config.update('jax_enable_compilation_cache', True)
    jax_cache.reset_cache()  # the next compile opens this directory
  return directory


def disable() -> None:
  """Turns the persistent compilation cache off for this process (the user's too)."""
  if jax.config.jax_enable_compilation_cache:
    jax.config.update('jax_enable_compilation_cache', False)
    jax_cache.reset_cache()


def short_warning(message: str) -> Optional[str]:
  """The one stderr line of JAX's warning about a cache entry it could not read (it then
  compiles the program afresh) or write, e.g. "warning: compile cache entry for 'jit_run'
  could not be read (error: Error -3 while decompressing data: incorrect header check);
  compiled afresh" (the error's text on one line, at most DETAIL characters); None for any
  other warning."""
  match = _JAX_WARNING.match(message)
  if match is None:
    return None
  verb, program, error, detail = match.groups()
  detail = ' '.join((detail or '').split())
  if detail:
    error += ': ' + (detail if len(detail) <= DETAIL else detail[:DETAIL - 3] + '...')
  if verb == 'reading':
    return (f"warning: compile cache entry for '{program}' could not be read ({error}); "
            'compiled afresh')
  return (f"warning: compile cache entry for '{program}' could not be written ({error}); "
          'not kept')


def shortening(show: Callable) -> Callable:
  """A `warnings.showwarning` that prints JAX's cache-entry warnings as their one line
  (`short_warning`) and hands every other warning to `show`."""

  def showwarning(message, category, filename, lineno, file=None, line=None):
    text = short_warning(str(message))
    if text is None:
      return show(message, category, filename, lineno, file, line)
    tqdm.write(text, file=sys.stderr)  # above a progress bar, if one is drawn
    return None

  return showwarning


@contextlib.contextmanager
def for_command(directory: Optional[str], on: bool = True) -> Iterator[Optional[str]]:
  """The compile cache of one command (`--compile-cache`, `--no-compile-cache`): on (or
  off) while the block runs, JAX's cache-entry warnings shortened to one line each; the
  process's JAX options and warning display as before afterwards.

  Args:
    directory: `--compile-cache` (None: see `enable`).
    on: False for `--no-compile-cache`.

  Yields:
    The cache directory, or None: none is used.
  """
  before = {name: getattr(jax.config, name) for name in _STATE}
  show = warnings.showwarning
  warnings.showwarning = shortening(show)
  try:
    if on:
      yield enable(directory)
    else:
      disable()
      yield None
  finally:
    warnings.showwarning = show
    changed = [name for name in _STATE if getattr(jax.config, name) != before[name]]
    for name in changed:
      jax.config.update(name, before[name])
    if changed:
      jax_cache.reset_cache()
