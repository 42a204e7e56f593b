"""Models that many test files decode with, built once per test process.

Each fixture hands out params a test may change (as the tiny pair's EOS bias does) without
changing them for the next: the trees are copied, their arrays (immutable) shared.
"""
import os

# The tests' models are tiny: XLA spends longer compiling their programs than running them.
# JAX's jax_disable_most_optimizations (LLVM's lowest optimisation level) cuts the compile
# time by a third and changes no result a test checks (every comparison is between programs
# compiled alike, or within a tolerance). Tests marked `compute` run programs big enough
# to want the optimiser, and get it back (`full_optimisation_when_marked`). Set before JAX
# is imported; subprocesses of the tests inherit it.
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')
# The source location of each operation in a compiled program: its own line only, not the
# whole Python stack that called it. XLA carries every location through its passes; with
# the innermost frame alone a decode compiled about a tenth faster (backend compile 4.67 s
# against 5.19 s for three sampled demo-pair decodes, mean of four runs each).
os.environ.setdefault('JAX_INCLUDE_FULL_TRACEBACKS_IN_LOCATIONS', '0')
# XLA's CPU fusion emitters (the default) take a third longer to compile a decode than its
# older elemental emitters, which compute the same fused operations. XLA:CPU also splits
# each program's LLVM module to compile the parts on several threads; the two test workers
# already keep both cores busy, and one part compiles a decode a sixth faster.
for _flag in ('--xla_cpu_use_fusion_emitters=false', '--xla_cpu_parallel_codegen_split_count=1'):
  if _flag.split('=')[0] not in os.environ.get('XLA_FLAGS', ''):
    os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' ' + _flag).strip()

import gc  # pylint: disable=wrong-import-position
import tempfile  # pylint: disable=wrong-import-position

import jax  # pylint: disable=wrong-import-position
import pytest  # pylint: disable=wrong-import-position

# `--gamma auto`'s cache of sampled runs' choices: never the user's, and each test its own
# (`own_gamma_cache`), so that no test reuses another's calibration.
os.environ['SPECJAX_CACHE_DIR'] = tempfile.mkdtemp(prefix='specjax-test-cache-')


@pytest.fixture(autouse=True)
def own_gamma_cache(tmp_path, monkeypatch):
  monkeypatch.setenv('SPECJAX_CACHE_DIR', str(tmp_path / 'specjax-cache'))


def _memory_maps() -> int:
  """How many memory regions this process has mapped (Linux; 0 elsewhere)."""
  try:
    with open('/proc/self/maps', encoding='ascii', errors='replace') as f:
      return sum(1 for _ in f)
  except OSError:
    return 0


def _map_limit() -> int:
  """The kernel's limit on a process's memory regions (vm.max_map_count)."""
  try:
    with open('/proc/sys/vm/max_map_count', encoding='ascii') as f:
      return int(f.read())
  except (OSError, ValueError):
    return 65530


@pytest.fixture(autouse=True)
def compiled_programs_within_the_map_limit():
  """Drops the compiled programs once this process maps half the kernel's limit.

  XLA:CPU maps about 500 memory regions per compiled decode and keeps them while the
  program is cached. A worker that compiles a few hundred programs reaches
  vm.max_map_count (65530 by default), and its next compile or executable serialization
  dies with SIGSEGV. Past half the limit, after a test, the caches go (jax's and the
  decoders specjax keeps), and the tests after it compile what they run again.
  """
  yield
  if _memory_maps() > _map_limit() // 2:
    from specjax.core import decoder  # pylint: disable=import-outside-toplevel
    decoder.drop_programs()


@pytest.fixture(autouse=True)
def full_optimisation_when_marked(request):
  if request.node.get_closest_marker('compute') is None:
    yield
    return
  before = jax.config.read('jax_disable_most_optimizations')
  jax.config.update('jax_disable_most_optimizations', False)
  try:
    yield
  finally:
    jax.config.update('jax_disable_most_optimizations', before)


@pytest.fixture
def fresh_programs(monkeypatch):
  """This test's decodes build their programs anew, so that a patch of the core is traced
  into them; the programs every other test compiled stay cached (no jax.clear_caches,
  which would make the tests after this one compile theirs again)."""
  from specjax.core import decoder  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(decoder, 'build', decoder.build.__wrapped__)


def _fresh(params):
  return jax.tree.map(lambda x: x, params)


def _bundled(target_name: str, draft_name: str):
  from specjax import checkpoints  # pylint: disable=import-outside-toplevel
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS  # pylint: disable=import-outside-toplevel
  target, tp = checkpoints.load_model(target_name, DEFAULT_CHECKPOINTS[target_name])
  draft, dp = checkpoints.load_model(draft_name, DEFAULT_CHECKPOINTS[draft_name])
  return target, tp, draft, dp


@pytest.fixture(scope='session')
def _demo_pair():
  return _bundled('demo_target', 'demo_draft')


@pytest.fixture(scope='session')
def _manpages_pair():
  return _bundled('manpages_target', 'manpages_draft')


@pytest.fixture
def demo_pair(_demo_pair):
  """(target, params, draft, params): the bundled translation pair."""
  target, tp, draft, dp = _demo_pair
  return target, _fresh(tp), draft, _fresh(dp)


@pytest.fixture
def manpages_pair(_manpages_pair):
  """(target, params, draft, params): the bundled man-page summarisation pair."""
  target, tp, draft, dp = _manpages_pair
  return target, _fresh(tp), draft, _fresh(dp)


@pytest.fixture(scope='session')
def _tiny_t5_params():
  from specjax.models.t5 import T5  # pylint: disable=import-outside-toplevel
  from specjax.models.t5_config import t5_tiny, t5_tiny_draft  # pylint: disable=import-outside-toplevel
  target, draft = T5(t5_tiny), T5(t5_tiny_draft)
  return target, target.init(jax.random.PRNGKey(0)), draft, draft.init(jax.random.PRNGKey(1))


@pytest.fixture
def tiny_t5_pair(_tiny_t5_params):
  """pair(eos_bias) -> (target, params, draft, params): random t5_tiny (key 0) and
  t5_tiny_draft (key 1), EOS made likelier by eos_bias so that rows stop at different
  steps."""
  def pair(eos_bias: float = 0.0):
    target, tp, draft, dp = _tiny_t5_params
    tp = _fresh(tp)
    kernel = tp['decoder']['logits_dense']['kernel']
    tp['decoder']['logits_dense']['kernel'] = kernel.at[:, 1].add(eos_bias)
    return target, tp, draft, _fresh(dp)
  return pair


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish():
  """Keeps Python's garbage collector off what the imports made.

  Tracing a decode allocates a few hundred thousand objects, and each full collection
  also walked the millions that jax, torch and transformers left at import: about a
  third of the tracing time, a sixth of a test that mostly compiles. Once every test
  module is imported, what exists is frozen out of the collector's sight (`gc.freeze`),
  and collections come less often.
  """
  gc.freeze()
  gc.set_threshold(50_000, 20, 100)
