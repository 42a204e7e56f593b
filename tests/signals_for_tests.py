"""Signals sent to the command-line tools that the tests start."""
import signal
import subprocess
import time


def catches(pid: int, sig: int) -> bool:
  """Whether process `pid` has a handler for `sig` (its SigCgt mask in /proc; True where
  there is no /proc to read, or the process is gone)."""
  try:
    with open(f'/proc/{pid}/status', encoding='ascii') as f:
      caught = next(line for line in f if line.startswith('SigCgt:'))
  except (OSError, StopIteration):
    return True
  return bool(int(caught.split()[1], 16) >> (sig - 1) & 1)


def wait_until_python_runs(proc: subprocess.Popen, timeout: float = 60.0) -> None:
  """Returns once `proc` handles SIGINT (or it ended, or `timeout` passed).

  Before that moment a Ctrl-C takes the signal's inherited disposition: the kernel's
  default action ends the process with no Python code run (exit -2, nothing on stderr),
  or, where the test runs as a background job of a non-interactive shell, the signal is
  ignored and the run goes on to its end. On a loaded machine a new interpreter can take
  longer than a test's delay to get past that moment. Python installs its own handler
  before it imports `site` (where SIGINT is not ignored), a specjax tool its handler
  before its imports: a delay counted from here still falls during the tool's imports.
  """
  end = time.monotonic() + timeout
  while (proc.poll() is None and not catches(proc.pid, signal.SIGINT)
         and time.monotonic() < end):
    time.sleep(0.005)
