"""specjax: exact, jitted speculative decoding in JAX (Leviathan et al., ICML 2023)."""
from specjax.decoding import DecodeOutput, autoregressive_decode, speculative_decode
from specjax.loop_state import DecodeStats
from specjax.sampling import SamplingConfig
from specjax import theory

__all__ = [
    'DecodeOutput', 'DecodeStats', 'SamplingConfig', 'autoregressive_decode',
    'speculative_decode', 'theory',
]
__version__ = '0.1.0'
