"""specjax: exact, jitted speculative decoding in JAX (Leviathan et al., ICML 2023).

The names below are imported when first used, so that `python -m specjax.decode` (which
imports this package first) starts at once and can take Ctrl-C from its first moment.
"""
import importlib

_EXPORTS = {
    'load_model': 'specjax.checkpoints', 'load_vocab': 'specjax.checkpoints',
    'save_params': 'specjax.checkpoints', 'theory': 'specjax.core.theory',
    'autoregressive_decode': 'specjax.core.api', 'speculative_decode': 'specjax.core.api',
    'SamplingConfig': 'specjax.core.sampling', 'SamplingParams': 'specjax.core.sampling',
    'DecodeOutput': 'specjax.core.state', 'DecodeStats': 'specjax.core.state',
}

__all__ = [
    'DecodeOutput', 'DecodeStats', 'SamplingConfig', 'SamplingParams',
    'autoregressive_decode', 'load_model', 'load_vocab', 'save_params', 'speculative_decode',
    'theory',
]
__version__ = '0.1.0'


def __getattr__(name: str):
  if name not in _EXPORTS:
    raise AttributeError(f'module specjax has no attribute {name!r}')
  module = importlib.import_module(_EXPORTS[name])
  value = module if module.__name__.endswith('.' + name) else getattr(module, name)
  globals()[name] = value
  return value


def __dir__():
  return sorted(list(globals()) + __all__)
