"""specjax: exact, jitted speculative decoding in JAX (Leviathan et al., ICML 2023)."""
from specjax import theory
from specjax.checkpoints import load_model, load_vocab, save_params
from specjax.decoding import DecodeOutput, autoregressive_decode, speculative_decode
from specjax.loop_state import DecodeStats
from specjax.sampling import SamplingConfig

__all__ = [
    'DecodeOutput', 'DecodeStats', 'SamplingConfig', 'autoregressive_decode', 'load_model',
    'load_vocab', 'save_params', 'speculative_decode', 'theory',
]
__version__ = '0.1.0'
