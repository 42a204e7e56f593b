"""The bench frees its compiled programs only past half the process's memory-map limit."""
import jax
import pytest

from specjax.bench import compiled


@pytest.fixture
def clears(monkeypatch):
  """The calls of jax.clear_caches, counted instead of made."""
  calls = []
  monkeypatch.setattr(jax, 'clear_caches', lambda: calls.append(1))
  return calls


def _files(tmp_path, maps: int, limit: str):
  (tmp_path / 'maps').write_text('m\n' * maps)
  (tmp_path / 'limit').write_text(limit)
  return str(tmp_path / 'maps'), str(tmp_path / 'limit')


def test_reads_the_count_and_the_limit(tmp_path):
  maps, limit = _files(tmp_path, 7, '65530\n')
  assert compiled.map_count(maps) == 7 and compiled.map_limit(limit) == 65530
  assert compiled.map_count(str(tmp_path / 'none')) is None
  assert compiled.map_limit(str(tmp_path / 'none')) is None
  assert compiled.map_limit(_files(tmp_path, 1, 'many')[1]) is None


@pytest.mark.parametrize('maps, freed', [(10, False), (50, False), (51, True), (100, True)])
def test_frees_past_half_the_limit(tmp_path, clears, maps, freed):
  assert compiled.free_if_needed(*_files(tmp_path, maps, '100')) is freed
  assert len(clears) == int(freed)


def test_frees_nothing_where_the_system_does_not_say(tmp_path, clears):
  maps, limit = _files(tmp_path, 100, '100')
  assert compiled.free_if_needed(str(tmp_path / 'none'), limit) is False
  assert compiled.free_if_needed(maps, str(tmp_path / 'none')) is False
  assert not clears


def test_this_process_is_far_from_the_limit(clears):
  """The tests' own runs keep what they compiled (Linux, where /proc says)."""
  count, most = compiled.map_count(), compiled.map_limit()
  if count is None or most is None:
    pytest.skip('no /proc here')
  assert count < compiled.FREE_AT * most
  assert compiled.free_if_needed() is False and not clears
