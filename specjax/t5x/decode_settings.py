"""What a T5X model's own decoding is, read where the speculative include wraps the model.

Speculative decoding replaces T5X's `temperature_sample` and keeps its settings: the
temperature, top-k (T5X's default 1: the argmax), top-p and `max_decode_steps`, as the
model's `decode_fn` carries them (a gin binding of `decoding.temperature_sample.*`, or a
`functools.partial`), over `temperature_sample`'s own defaults. A model that decodes with
anything else (beam search, T5X's default) is refused in one line that names the fix, so
that beam search never silently becomes a greedy decode.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Tuple

# The settings of temperature_sample that speculative decoding reads; any other that is
# set away from its default (a logit callback, an initial index, ...) changes what T5X
# would decode and is refused.
READ = ('temperature', 'topk', 'topp', 'max_decode_steps')
IGNORED = ('decode_rng', 'num_decodes', 'rescale_log_probs', 'max_decode_steps_hard_limit')
SAMPLER = 'temperature_sample'
GREEDY_FIX = ('bind models.EncoderDecoderModel.decode_fn = @decoding.temperature_sample '
              '(with decoding.temperature_sample.temperature = 0.0 for greedy) before the '
              'speculative include, or leave the include out to keep T5X\'s own decoding')


def _bindings(fn: Callable) -> Dict[str, Any]:
  """The gin bindings of a function, {} when gin does not configure it."""
  try:
    import gin  # pylint: disable=import-outside-toplevel
    return dict(gin.get_bindings(fn))
  except (ImportError, ValueError, KeyError):
    return {}


def _unwrapped(decode_fn: Callable) -> Tuple[Callable, Dict[str, Any]]:
  """(the plain function under partials and gin's wrapper, the partials' keywords)."""
  fn, keywords = decode_fn, {}
  while isinstance(fn, functools.partial):
    keywords = {**fn.keywords, **keywords}
    fn = fn.func
  return inspect.unwrap(fn), keywords


def _defaults(fn: Callable) -> Dict[str, Any]:
  return {k: p.default for k, p in inspect.signature(fn).parameters.items()
          if p.default is not inspect.Parameter.empty}


def _same(a, b) -> bool:
  try:
    return a is b or bool(a == b)
  except (TypeError, ValueError):  # arrays, objects without a plain equality
    return False


def model_decoding(decode_fn: Callable) -> Tuple[str, Dict[str, Any]]:
  """(name, settings) of a T5X decode_fn: its function's name (e.g. 'temperature_sample',
  'beam_search') and every keyword setting it decodes with.

  Settings are the function's defaults, then its gin bindings, then the keywords of the
  `functools.partial` objects that wrap it (the outermost last).
  """
  raw, keywords = _unwrapped(decode_fn)
  return raw.__name__, {**_defaults(raw), **_bindings(raw), **keywords}


def sampling_settings(decode_fn: Callable) -> Dict[str, Any]:
  """The temperature, topk, topp and max_decode_steps that a model's temperature_sample
  decodes with (T5X's conventions).

  Raises:
    ValueError: the model decodes with something else than temperature_sample (beam
      search, T5X EncoderDecoderModel's default), or sets a temperature_sample option that
      speculative decoding cannot honour (one line naming the gin binding and the fix).
  """
  name, settings = model_decoding(decode_fn)
  if name != SAMPLER:
    raise ValueError(f'models.EncoderDecoderModel.decode_fn is {name} (T5X\'s default is '
                     f'beam_search); speculative decoding replaces temperature_sample, so it '
                     f'would change this model\'s decoding: {GREEDY_FIX}')
  defaults = _defaults(_unwrapped(decode_fn)[0])
  changed = sorted(k for k, v in settings.items()
                   if k not in READ + IGNORED and not _same(v, defaults.get(k)))
  if changed:
    raise ValueError(f'decoding.temperature_sample.{changed[0]} is set, which speculative '
                     f'decoding cannot honour (it reads {", ".join(READ)}); unbind it, or '
                     'leave the speculative include out')
  return {k: settings[k] for k in READ}
