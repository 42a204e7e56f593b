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
