"""The repository's scripts/ (not a package) imported as modules, for their tests."""
import importlib.util
import os
import types

SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'scripts')


def load_script(name: str) -> types.ModuleType:
  """scripts/NAME.py executed as a fresh module named NAME."""
  spec = importlib.util.spec_from_file_location(name, os.path.join(SCRIPTS, f'{name}.py'))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
