"""The package's shape: public names between modules, no import cycle, small files."""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'specjax'


def _modules():
  """{dotted module name: parsed AST} of every module of the package."""
  out = {}
  for path in sorted(PACKAGE.rglob('*.py')):
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    name = '.'.join(parts[:-1] if parts[-1] == '__init__' else parts)
    out[name] = ast.parse(path.read_text(), str(path))
  return out


MODULES = _modules()


def _imports(name, tree):
  """(imported module, names imported from it) of every import, lazy ones included."""
  package = name if (PACKAGE / pathlib.Path(*name.split('.')[1:]) / '__init__.py').exists() \
      else name.rpartition('.')[0]
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for alias in node.names:
        yield alias.name, [], alias.asname or alias.name.split('.')[0]
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ''
      if node.level:
        base = '.'.join(package.split('.')[:len(package.split('.')) - node.level + 1] +
                        ([base] if base else []))
      for alias in node.names:
        full = f'{base}.{alias.name}'
        if full in MODULES:  # `from specjax.core import steps` imports a module
          yield full, [], alias.asname or alias.name
        else:
          yield base, [alias.name], alias.asname or alias.name


def test_no_private_name_crosses_a_module():
  problems = []
  for name, tree in MODULES.items():
    module_aliases = {}
    for module, names, alias in _imports(name, tree):
      if not module.startswith('specjax'):
        continue
      problems += [f'{name} imports {module}.{n}' for n in names if n.startswith('_')]
      if not names:
        module_aliases[alias] = module
    for node in ast.walk(tree):  # steps._private(...) through an imported module
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in module_aliases and node.attr.startswith('_')
          and not node.attr.startswith('__')):
        problems.append(f'{name} uses {module_aliases[node.value.id]}.{node.attr}')
  assert not problems
  text = '\n'.join(p.read_text() for p in PACKAGE.rglob('*.py'))
  assert 'protected-access' not in text


def test_no_import_cycle():
  graph = {}
  for name, tree in MODULES.items():
    deps = set()
    for module, _, _ in _imports(name, tree):
      while module and module not in MODULES:  # `from specjax.core.api import x`
        module = module.rpartition('.')[0]
      if module.startswith('specjax') and module != name and not name.startswith(module + '.'):
        deps.add(module)
    graph[name] = deps
  state, stack = {}, []

  def visit(node):
    state[node] = 'open'
    stack.append(node)
    for dep in sorted(graph[node]):
      if state.get(dep) == 'open':
        pytest.fail('import cycle: ' + ' -> '.join(stack[stack.index(dep):] + [dep]))
      if dep not in state:
        visit(dep)
    stack.pop()
    state[node] = 'done'

  for node in sorted(graph):
    if node not in state:
      visit(node)
  assert 'specjax.core.loop' in graph and 'specjax.core.steps' in graph['specjax.core.loop']


def test_every_part_has_its_folder_and_files_stay_small():
  for part in ('core', 'models', 'checkpoints', 'parallel', 'bench', 'demo', 'job'):
    assert (PACKAGE / part / '__init__.py').exists(), part
  long = {str(p.relative_to(PACKAGE)): n for p in PACKAGE.rglob('*.py')
          if (n := len(p.read_text().splitlines())) > 400}
  assert not long
