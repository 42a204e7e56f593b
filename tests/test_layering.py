"""The package's layers: a part imports only the parts of the layers below its own.

Low to high (docs/design.md says what each part holds):

  0. models, parallel, flags, the networks behind the model contract; meshes, sharding rules;
     reports, interrupt     command-line flags derived from a config's fields; where
                            generated documents are written, and how; Ctrl-C's one line
  1. core, checkpoints       the decode (a mesh's rules from parallel); weights into models
  2. demo, speed,            bundled pairs' data; costs and plans; the drafts that are not
     proposers              models (copy, bigram, copy + model, heads on the target)
  3. tasks, drafting,        seqio tasks over the bundled corpora; drafts trained from the
     datastore              target (Medusa and EAGLE heads: data, training, checkpoints);
                            retrieval datastores of text (suffix arrays, the bundled ones
                            built from the bundled corpora)
  4. job, t5x                what `python -m specjax.decode` runs; the decode inside T5X
                            (any draft kind, trained heads included)
  5. bench                   `python -m specjax.bench`, which runs the job's decodes
  6. the entry points        decode, evaluate, plan (with plan_sections), train_draft, the
                            package's API

Parts of one layer are peers and import nothing of each other; a module imports freely
within its own part. Every import counts, those inside functions too.
"""
import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / 'specjax'

LAYERS = (
    ('models', 'parallel', 'flags', 'reports', 'interrupt'),
    ('core', 'checkpoints'),
    ('demo', 'speed', 'proposers'),
    ('tasks', 'drafting', 'datastore'),
    ('job', 't5x'),
    ('bench',),
    ('decode', 'evaluate', 'plan', 'train_draft', '__init__'),
)
# Top-level modules that belong to another part.
PART_OF = {'plan_sections': 'plan', 'plan_config': 'plan', 'compile_cache': 'job'}
LAYER = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def part(module: str) -> str:
  """The part a dotted specjax module belongs to: 'specjax.core.loop' -> 'core'."""
  name = module.split('.')[1] if '.' in module else '__init__'
  return PART_OF.get(name, name)


def module_imports() -> dict:
  """{module: the specjax modules it imports}, read from the source, lazy imports too."""
  modules = {}
  for path in sorted(PACKAGE.rglob('*.py')):
    parts = path.relative_to(PACKAGE.parent).with_suffix('').parts
    modules['.'.join(parts[:-1] if parts[-1] == '__init__' else parts)] = path
  out = {}
  for module, path in modules.items():
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
      if isinstance(node, ast.Import):
        found.update(alias.name for alias in node.names)
      elif isinstance(node, ast.ImportFrom) and node.module:
        assert not node.level, f'{module}: relative import'
        for alias in node.names:  # `from specjax.core import steps` imports a module
          full = f'{node.module}.{alias.name}'
          found.add(full if full in modules else node.module)
    out[module] = {m for m in found if m == 'specjax' or m.startswith('specjax.')}
  return out


def violations(imports: dict) -> list:
  """'importer -> imported (why)' for each import the layer order forbids.

  Args:
    imports: {module: the specjax modules it imports}.

  Returns:
    One line per forbidden import: a lower layer importing a higher one, a peer
    importing a peer, or a part missing from LAYERS.
  """
  problems = []
  for module, deps in sorted(imports.items()):
    here = part(module)
    for dep in sorted(deps):
      there = part(dep)
      if there == here:
        continue
      if here not in LAYER or there not in LAYER:
        problems.append(f'{module} -> {dep} (a part missing from LAYERS)')
      elif LAYER[there] > LAYER[here]:
        problems.append(f'{module} -> {dep} (layer {LAYER[here]} imports layer '
                        f'{LAYER[there]})')
      elif LAYER[there] == LAYER[here]:
        problems.append(f'{module} -> {dep} (peers {here} and {there})')
  return problems


def test_every_part_has_a_layer():
  parts = {part(m) for m in module_imports()}
  assert parts == set(LAYER), (parts ^ set(LAYER))


def test_the_package_follows_the_layer_order():
  assert not violations(module_imports())


def test_the_order_flags_lower_to_higher_and_peer_imports():
  # The three imports that once ran against the order, on a small synthetic graph.
  old = {
      'specjax.parallel.memory_plan': {'specjax.core.decoder', 'specjax.parallel.mesh'},
      'specjax.job.calibrate': {'specjax.bench.timing', 'specjax.core.api'},
      'specjax.models.markov': {'specjax.core.sampling', 'specjax.models.base'},
  }
  assert violations(old) == [
      'specjax.job.calibrate -> specjax.bench.timing (layer 4 imports layer 5)',
      'specjax.models.markov -> specjax.core.sampling (layer 0 imports layer 1)',
      'specjax.parallel.memory_plan -> specjax.core.decoder (layer 0 imports layer 1)',
  ]
  # A peer importing a peer, and the same imports where they now live.
  assert violations({'specjax.models.t5': {'specjax.parallel.rules'}}) == [
      'specjax.models.t5 -> specjax.parallel.rules (peers models and parallel)']
  assert not violations({'specjax.speed.memory_plan': {'specjax.core.decoder'},
                         'specjax.job.calibrate': {'specjax.speed.timing'},
                         'specjax.plan': {'specjax.plan_sections', 'specjax.speed'}})
