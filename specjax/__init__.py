"""specjax: exact, jitted speculative decoding in JAX (Leviathan et al., ICML 2023)."""
from specjax.checkpoints import load_model, load_vocab, save_params
from specjax.core import theory
from specjax.core.api import autoregressive_decode, speculative_decode
from specjax.core.sampling import SamplingConfig, SamplingParams
from specjax.core.state import DecodeOutput, DecodeStats

__all__ = [
    'DecodeOutput', 'DecodeStats', 'SamplingConfig', 'SamplingParams',
    'autoregressive_decode', 'load_model', 'load_vocab', 'save_params', 'speculative_decode',
    'theory',
]
__version__ = '0.1.0'
