"""The Hugging Face packages (torch, transformers, tokenizers) some tests compare against.

Where one is not installed those tests skip, unless SPECJAX_REQUIRE_HF is set (as CI's
first stage sets it, `.ci/run`): then a missing package fails them, so that a broken
install cannot pass as a run with fewer tests.
"""
import importlib
import os

import pytest

REQUIRE_ENV = 'SPECJAX_REQUIRE_HF'


def require(module: str):
  """The module, imported; skips the caller without it, or fails where it is required.

  Args:
    module: a dotted module name ('torch', 'transformers.generation.logits_process').

  Returns:
    The imported module.
  """
  if os.environ.get(REQUIRE_ENV):
    return importlib.import_module(module)
  return pytest.importorskip(module)


class Lazy:
  """A module that `require` imports when a test first reads one of its attributes.

  torch and transformers take seconds to import; a test file that holds one of these
  instead of the module costs nothing to collect, so a pytest worker that runs none of
  its tests never imports them.
  """

  def __init__(self, module: str):
    self._name = module
    self._module = None

  def __getattr__(self, attr: str):
    if self._module is None:
      self._module = require(self._name)
    return getattr(self._module, attr)


def required(*modules: str):
  """An autouse fixture for a test file: before its first test (and before the file's other
  fixtures) the modules are `require`d: the file's tests skip without them, or fail where
  they are required, as with a module-level `require`, but when they run rather than when
  the file is collected.

  Args:
    *modules: dotted module names.

  Returns:
    The fixture; assign it to a name in the test file.
  """
  @pytest.fixture(autouse=True, scope='module')
  def hf_modules():
    for module in modules:
      require(module)
  return hf_modules
