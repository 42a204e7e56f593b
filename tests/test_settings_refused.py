"""Settings that would decode something else than asked, or crash deep inside, are refused
in one line before any model loads (the target named here does not exist, so a load would
fail with another message)."""
import pytest

from specjax import decode
from specjax.core.sampling import SamplingConfig

BEFORE_LOAD = ['--target', 'no_such_model', '--quiet']


@pytest.mark.parametrize('flags, message', [
    (['--seed', '4294967296'], '--seed must be in [0, 2**32)'),
    (['--seed', '-1'], '--seed must be in [0, 2**32)'),
    (['--seed', str(2 ** 63)], '--seed must be in [0, 2**32)'),
    (['--temperature', 'inf'], 'temperature must be finite and >= 0'),
    (['--temperature', 'nan'], 'temperature must be finite and >= 0'),
    (['--gamma', '100000'], '--gamma 100000 is more than --max-decode-len 64'),
    (['--gamma', '1000000000', '--max-decode-len', '8'], 'is more than --max-decode-len 8'),
], ids=['seed 2**32', 'seed -1', 'seed 2**63', 'temperature inf', 'temperature nan',
        'gamma 1e5', 'gamma 1e9'])
def test_refused_in_one_line_before_any_load(capsys, flags, message):
  assert decode.main(BEFORE_LOAD + flags) == 2
  err = capsys.readouterr().err.strip()
  assert err.startswith('error: ') and message in err and '\n' not in err


def test_seeds_at_the_edges_of_the_range_are_taken(capsys):
  """The largest seed passes the check (the load then fails on the missing model)."""
  assert decode.main(BEFORE_LOAD + ['--seed', str(2 ** 32 - 1)]) == 2
  assert 'no_such_model' in capsys.readouterr().err


@pytest.mark.parametrize('config, message', [
    (SamplingConfig(float('inf')), 'temperature must be finite'),
    (SamplingConfig(1.0, top_k=2.5), 'top_k must be an integer'),
    (SamplingConfig(1.0, top_k=True), 'top_k must be an integer')])
def test_the_api_refuses_them_too(config, message):
  with pytest.raises(ValueError, match=message):
    config.validate(vocab_size=100)
