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


def _add_argument_calls(tree):
  """The lines of a module that call `.add_argument(...)`."""
  return [node.lineno for node in ast.walk(tree)
          if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
          and node.func.attr == 'add_argument']


def _tool_parsers(monkeypatch):
  """{tool: (its ArgumentParser, the config classes its flags come from)}."""
  # pylint: disable=import-outside-toplevel
  import argparse

  from specjax import decode, evaluate, plan_config, train_draft
  from specjax.bench import cli as bench_cli
  from specjax.bench.config import BenchConfig
  from specjax.drafting.config import TrainDraftConfig
  from specjax.job.config import DecodeConfig
  from specjax.speed import measure
  from specjax.speed.config import MeasureConfig
  from specjax.t5x import export
  # Each tool's parse_args hands back its parser; specjax.plan itself (which sets up
  # simulated devices on import) builds its parser with plan_config.parser.
  monkeypatch.setattr(argparse.ArgumentParser, 'parse_args', lambda self, *a, **k: self)
  return {
      'decode': (decode.parse_args([]), [DecodeConfig], []),
      'evaluate': (evaluate.parse_args([]), [DecodeConfig], ['--task', 't']),
      'bench': (bench_cli.parse_args([]), [DecodeConfig, BenchConfig], []),
      'plan': (plan_config.parser(''), [DecodeConfig, plan_config.PlanConfig], []),
      'speed': (measure.parse_args([]), [MeasureConfig], []),
      'export': (export.parse_args([]), [export.ExportConfig], ['--output', 'o']),
      'train_draft': (train_draft.parse_args([]), [TrainDraftConfig],
                      ['--input', 'i', '--workdir', 'w']),
  }


def test_every_cli_flag_is_a_config_field(monkeypatch):
  import re  # pylint: disable=import-outside-toplevel

  from specjax import flags  # pylint: disable=import-outside-toplevel
  # Only the flags module makes flags; every tool derives its parser from config fields.
  by_hand = {name: lines for name, tree in MODULES.items()
             if name != 'specjax.flags' and (lines := _add_argument_calls(tree))}
  assert not by_hand
  snippet = 'import argparse\np = argparse.ArgumentParser()\np.add_argument("--x", type=int)\n'
  assert _add_argument_calls(ast.parse(snippet)) == [3]  # the scan sees a hand-made flag
  assert _add_argument_calls(ast.parse('flags.add_flags(p, Config)\n')) == []
  for tool, (parser, classes, argv) in _tool_parsers(monkeypatch).items():
    fields = [f for cls in classes for f in flags.cli_fields(cls)]
    names = {flags.flag_name(f) for f in fields}
    dests = {('no_' if f.metadata['negated'] else '') + f.name for f in fields}
    options = set(re.findall(r'(?<![\w-])--[a-z][\w-]*', parser.format_usage())) - {'--help'}
    assert options and options <= names, (tool, options - names)
    args, rest = parser.parse_known_args(argv)
    assert not rest and set(vars(args)) <= dests, (tool, set(vars(args)) - dests)
    assert len(vars(args)) == len(options), tool  # one namespace attribute per flag
