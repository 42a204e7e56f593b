"""Checkpoints of every format specjax reads (T5X msgpack + zarr, Hugging Face, orbax), the
vocabulary and tokenizers, and `load_model`, the one entry point that resolves a config and
its params."""
from specjax.checkpoints.loader import (CONFIG_FILE, build_model, check_params,
                                        config_from_params, detect_format, is_checkpoint_path,
                                        load_model, load_params_orbax, resolve_config,
                                        save_params)
from specjax.checkpoints.tokenizer import Tokenizer, load_tokenizer, prompt_vocabulary
from specjax.checkpoints.vocab import Vocabulary, load_vocab

__all__ = ['CONFIG_FILE', 'Tokenizer', 'Vocabulary', 'build_model', 'check_params',
           'config_from_params', 'detect_format', 'is_checkpoint_path', 'load_model',
           'load_params_orbax', 'load_tokenizer', 'load_vocab', 'prompt_vocabulary',
           'resolve_config', 'save_params']
