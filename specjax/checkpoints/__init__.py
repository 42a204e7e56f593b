"""Checkpoints of every format specjax reads (T5X msgpack + zarr, Hugging Face, orbax), the
vocabulary, and `load_model`, the one entry point that resolves a config and its params."""
from specjax.checkpoints.loader import (CONFIG_FILE, check_params, config_from_params,
                                        detect_format, load_model, load_params_orbax,
                                        resolve_config, save_params)
from specjax.checkpoints.vocab import Vocabulary, load_vocab

__all__ = ['CONFIG_FILE', 'Vocabulary', 'check_params', 'config_from_params', 'detect_format',
           'load_model', 'load_params_orbax', 'load_vocab', 'resolve_config', 'save_params']
