"""The command-line tools' persistent compile cache (specjax.compile_cache): a rerun loads
what the first run compiled, --no-compile-cache keeps nothing, and an unusable directory or
a damaged entry is one warning line while the outputs stay the same."""
import json
import os
import subprocess
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from specjax import compile_cache, decode

# The smallest decode of the main job: two inputs, a fixed gamma, no target-alone decode.
ARGS = ['--max-examples', '2', '--gamma', '2', '--max-decode-len', '8', '--no-compare',
        '--quiet']
# `python -m specjax.decode ARGS` that prints, last on stderr, how many programs it asked
# XLA for and how many of them the persistent cache held.
COUNTING = '''
import atexit, json, sys
import jax
counts = {'programs': 0, 'hits': 0}
def on_event(event, **kwargs):
  if event == '/jax/compilation_cache/cache_hits':
    counts['hits'] += 1
def on_duration(event, duration, **kwargs):
  if event == '/jax/core/compile/backend_compile_duration':
    counts['programs'] += 1
jax.monitoring.register_event_listener(on_event)
jax.monitoring.register_event_duration_secs_listener(on_duration)
atexit.register(lambda: print('counts ' + json.dumps(counts), file=sys.stderr))
from specjax import decode
sys.argv[0] = 'specjax.decode'
decode.run_main()
'''
JAX_OPTIONS = ('jax_compilation_cache_dir', 'jax_enable_compilation_cache',
               'jax_persistent_cache_min_compile_time_secs')


def _env(specjax_cache):
  """This process's environment without the test runner's compile cache settings (which
  every test process shares), with its own specjax cache."""
  env = {k: v for k, v in os.environ.items()
         if k not in ('JAX_COMPILATION_CACHE_DIR', 'JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS')}
  env['SPECJAX_CACHE_DIR'] = str(specjax_cache)
  return env


def _decode(tmp_path, name, specjax_cache, *args):
  """A decode in a new process: (its records, its stderr lines but the counts, counts)."""
  out = tmp_path / f'{name}.jsonl'
  proc = subprocess.run([sys.executable, '-c', COUNTING] + ARGS + ['--output', str(out)]
                        + list(args), capture_output=True, text=True, timeout=600,
                        env=_env(specjax_cache), cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  lines = proc.stderr.splitlines()
  assert lines[-1].startswith('counts '), proc.stderr
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert len(records) == 2
  return records, [line for line in lines[:-1] if line.strip()], json.loads(lines[-1][7:])


def _entries(directory):
  return sorted(directory.glob('*-cache')) if directory.is_dir() else []


def _jax_options():
  return {name: getattr(jax.config, name) for name in JAX_OPTIONS}


def test_a_rerun_loads_what_the_first_run_kept_and_damaged_entries_are_one_line(tmp_path):
  users = tmp_path / 'users-cache'
  first, err, counts = _decode(tmp_path, 'first', users)
  kept = _entries(users / 'xla')  # the default directory: <specjax cache>/xla
  assert kept and not err
  assert counts['hits'] == 0 and counts['programs'] >= len(kept)
  # A new process, the directory named: the programs come from the cache.
  again, err, rerun = _decode(tmp_path, 'again', tmp_path / 'other', '--compile-cache',
                              str(users / 'xla'))
  assert again == first and not err
  assert rerun['hits'] == len(kept)  # every program kept is loaded, none compiled again
  assert rerun['programs'] - rerun['hits'] < counts['programs'] - counts['hits']
  assert not (tmp_path / 'other' / 'xla').exists()  # the flag's directory, not the default
  # Every entry damaged: each program is compiled afresh, one line per program name.
  for entry in _entries(users / 'xla'):
    entry.write_bytes(b'not a compiled program' * 8)
  damaged, err, counts = _decode(tmp_path, 'damaged', users)
  assert damaged == first
  assert err and counts['hits'] == 0
  for line in err:
    assert line.startswith("warning: compile cache entry for '"), err
    assert line.endswith('; compiled afresh'), err
  assert not any(word in '\n'.join(err) for word in ('Traceback', 'UserWarning', 'warn('))


def test_no_compile_cache_keeps_nothing(tmp_path):
  users = tmp_path / 'users-cache'
  records, err, counts = _decode(tmp_path, 'off', users, '--no-compile-cache')
  assert len(records) == 2 and not err
  assert counts['hits'] == 0 and counts['programs'] > 0
  # The same run with the cache on keeps its programs there (the other test's first run).
  assert not _entries(users / 'xla')


def test_a_file_as_the_directory_is_one_warning_line(tmp_path, capsys, monkeypatch):
  """In this process, as the other decode tests run main: it warns, decodes, and leaves
  JAX's options and the warning display as they were."""
  monkeypatch.delenv('JAX_COMPILATION_CACHE_DIR', raising=False)
  not_a_folder = tmp_path / 'cache-file'
  not_a_folder.write_text('a file\n')
  before, show = _jax_options(), warnings.showwarning
  out = tmp_path / 'out.jsonl'
  assert decode.main(ARGS + ['--output', str(out), '--compile-cache', str(not_a_folder)]) == 0
  err = capsys.readouterr().err
  assert err == (f'warning: compile cache {not_a_folder}: not a directory; compiling without '
                 'a cache\n')
  assert len(out.read_text().splitlines()) == 2
  assert not_a_folder.read_text() == 'a file\n'
  assert _jax_options() == before and warnings.showwarning is show


def test_the_directory_rules(tmp_path, monkeypatch):
  monkeypatch.setenv('SPECJAX_CACHE_DIR', str(tmp_path / 'specjax'))
  monkeypatch.delenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', raising=False)
  assert compile_cache.default_directory() == str(tmp_path / 'specjax' / 'xla')
  before = _jax_options()
  users = str(tmp_path / 'users-jax-cache')
  jax.config.update('jax_compilation_cache_dir', users)
  try:
    with compile_cache.for_command(None) as used:  # the user's own setting wins
      assert used == users and jax.config.jax_compilation_cache_dir == users
    mine = str(tmp_path / 'mine')
    with compile_cache.for_command(mine) as used:  # the flag wins over it
      assert used == mine and os.path.isdir(mine)
      assert jax.config.jax_persistent_cache_min_compile_time_secs == 0
    with compile_cache.for_command(mine, on=False) as used:  # --no-compile-cache
      assert used is None and not jax.config.jax_enable_compilation_cache
    assert jax.config.jax_compilation_cache_dir == users
    assert jax.config.jax_enable_compilation_cache
  finally:
    jax.config.update('jax_compilation_cache_dir', before['jax_compilation_cache_dir'])
    compile_cache.jax_cache.reset_cache()
  jax.config.update('jax_compilation_cache_dir', None)
  try:
    with compile_cache.for_command(None) as used:
      assert used == str(tmp_path / 'specjax' / 'xla') and os.path.isdir(used)
  finally:
    jax.config.update('jax_compilation_cache_dir', before['jax_compilation_cache_dir'])
    compile_cache.jax_cache.reset_cache()
  assert _jax_options() == before
  # What cannot hold a cache: a file, a folder under a file.
  (tmp_path / 'f').write_text('')
  assert compile_cache.unusable(str(tmp_path / 'f')) == 'not a directory'
  assert compile_cache.unusable(str(tmp_path / 'f' / 'sub'))
  assert compile_cache.unusable(str(tmp_path / 'new' / 'sub')) is None


def _damage(directory):
  """Every entry overwritten with the same bytes, so that every read fails with the same
  error (random bytes pass zlib's header check one time in 31 and fail with another)."""
  entries = _entries(directory)
  assert entries
  for entry in entries:
    entry.write_bytes(b'not a compiled program' * 3)


def test_jax_own_warning_for_a_damaged_entry_becomes_one_line(tmp_path, capsys, monkeypatch):
  """JAX's real warning (not a copy of its text), with and without the shortening."""
  monkeypatch.delenv('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', raising=False)
  x = jnp.arange(5.0)
  with warnings.catch_warnings():
    warnings.simplefilter('always')
    with compile_cache.for_command(str(tmp_path / 'xla')):
      np.testing.assert_allclose(jax.jit(lambda v: v * 3.0 + 1.0)(x), np.arange(5.0) * 3 + 1)
      _damage(tmp_path / 'xla')
      # Negative control: JAX's warning as Python shows it when nothing shortens it.
      with warnings.catch_warnings(record=True) as raw:
        warnings.simplefilter('always')
        np.testing.assert_allclose(jax.jit(lambda v: v * 3.0 + 1.0)(x), np.arange(5.0) * 3 + 1)
      (caught,) = [w for w in raw if 'persistent compilation cache' in str(w.message)]
      shown = warnings.formatwarning(caught.message, caught.category, caught.filename,
                                     caught.lineno)
      assert caught.category is UserWarning and 'UserWarning: Error reading' in shown
      assert shown.count('\n') >= 2  # the message and the source line
      assert capsys.readouterr().err == ''
      _damage(tmp_path / 'xla')  # the recompile above wrote a good entry
      np.testing.assert_allclose(jax.jit(lambda v: v * 3.0 + 1.0)(x), np.arange(5.0) * 3 + 1)
  err = capsys.readouterr().err
  assert err.startswith("warning: compile cache entry for 'jit__lambda' could not be read (")
  assert err.endswith('); compiled afresh\n') and err.count('\n') == 1
  assert compile_cache.short_warning(str(caught.message)) == err[:-1]


def test_other_warnings_pass_through():
  seen = []
  show = compile_cache.shortening(lambda *a: seen.append(a))
  show(UserWarning('something else'), UserWarning, 'f.py', 3)
  assert len(seen) == 1 and str(seen[0][0]) == 'something else'
  assert compile_cache.short_warning(
      "Error writing persistent compilation cache entry for 'jit_run': OSError: [Errno 28] "
      'No space left on device') == (
          "warning: compile cache entry for 'jit_run' could not be written (OSError: [Errno "
          "28] No space left on device); not kept")
  assert compile_cache.short_warning('Error reading something else') is None
