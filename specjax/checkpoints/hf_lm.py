"""Conversion between Hugging Face decoder-only checkpoints (Llama family, GPT-2) and the
params of `specjax.models.lm.CausalLM`.

HF Llama stores `nn.Linear` weights [out, in]: q_proj [N*H, D] becomes query [D, N, H],
o_proj [D, N*H] becomes out [N, H, D]. GPT-2 stores `Conv1D` weights [in, out] with q, k
and v fused in c_attn [D, 3*D]: they are split. Every conversion is a pure relabelling
(transposes and reshapes), the same table read both ways (`params_from_hf`,
`params_to_hf`). Shape letters: V vocab, D model dim, N heads, M KV heads, H head dim, F mlp.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, Tuple

import jax
import numpy as np

from specjax.checkpoints.tree_paths import get_path, set_path
from specjax.models.lm import CausalLM
from specjax.models.lm_config import LMConfig

PyTree = Any
MODEL_TYPES = ('llama', 'gpt2')
# HF buffers that some checkpoints carry and HF itself ignores on load.
_IGNORED_SUFFIXES = ('rotary_emb.inv_freq', '.attn.bias', '.attn.masked_bias')
_ACTIVATIONS = {'silu': 'silu', 'swish': 'silu', 'gelu_new': 'gelu_new',
                'gelu_pytorch_tanh': 'gelu_new', 'gelu': 'gelu', 'relu': 'relu'}


def _first(ids):
  return ids[0] if isinstance(ids, (list, tuple)) else ids


def _pad(hf: Dict[str, Any], eos: int) -> int:
  """The pad id: config.json's pad_token_id, else the EOS (as `generate` pads)."""
  pad = _first(hf.get('pad_token_id'))
  return eos if pad is None else pad


def _activation(name: str) -> str:
  if name not in _ACTIVATIONS:
    raise ValueError(f'activation {name!r} is not supported; use one of '
                     f'{sorted(_ACTIVATIONS)}')
  return _ACTIVATIONS[name]


def _rope(hf: Dict[str, Any]) -> dict:
  scaling = hf.get('rope_scaling') or {}
  kind = scaling.get('rope_type', scaling.get('type', 'default'))
  if kind not in ('default', 'linear', 'llama3'):
    raise ValueError(f'rope_scaling {kind!r} is not supported; use a checkpoint with '
                     'rope_scaling null, "linear" or "llama3"')
  out = dict(rope_theta=float(hf.get('rope_theta', 10000.0)), rope_type=kind,
             rope_factor=float(scaling.get('factor', 1.0)))
  if kind == 'llama3':
    out.update(rope_low_freq_factor=float(scaling['low_freq_factor']),
               rope_high_freq_factor=float(scaling['high_freq_factor']),
               rope_original_max_len=int(scaling['original_max_position_embeddings']))
  return out


def config_from_hf(hf: Dict[str, Any], name: str = '') -> LMConfig:
  """LMConfig from a Hugging Face config.json dict (model_type 'llama' or 'gpt2').

  The pad id is the config's pad_token_id, else its EOS (as `generate` pads); with a list
  of EOS ids the first is the model's.

  Raises:
    ValueError: another model_type, or a feature the model does not implement (named).
  """
  kind = hf.get('model_type')
  try:
    if kind == 'llama':
      if float(hf.get('partial_rotary_factor', 1.0)) != 1.0:
        raise ValueError('partial_rotary_factor != 1 is not supported')
      heads, emb = hf['num_attention_heads'], hf['hidden_size']
      eos = _first(hf.get('eos_token_id'))
      eos = 2 if eos is None else eos
      return LMConfig(
          family='llama', vocab_size=hf['vocab_size'], emb_dim=emb, num_heads=heads,
          num_kv_heads=hf.get('num_key_value_heads') or heads,
          head_dim=hf.get('head_dim') or emb // heads, num_layers=hf['num_hidden_layers'],
          mlp_dim=hf['intermediate_size'], activation=_activation(hf.get('hidden_act', 'silu')),
          norm_eps=float(hf.get('rms_norm_eps', 1e-6)),
          tie_embeddings=bool(hf.get('tie_word_embeddings', False)),
          attention_bias=bool(hf.get('attention_bias', False)),
          mlp_bias=bool(hf.get('mlp_bias', False)),
          max_len=hf.get('max_position_embeddings', 2048), bos_id=hf.get('bos_token_id'),
          eos_id=eos, pad_id=_pad(hf, eos), name=name, **_rope(hf))
    if kind == 'gpt2':
      if hf.get('scale_attn_by_inverse_layer_idx') or hf.get('reorder_and_upcast_attn'):
        raise ValueError('scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn are '
                         'not supported')
      if not hf.get('scale_attn_weights', True):
        raise ValueError('scale_attn_weights false is not supported')
      emb, heads = hf['n_embd'], hf['n_head']
      eos = _first(hf.get('eos_token_id', 50256))
      return LMConfig(
          family='gpt2', vocab_size=hf['vocab_size'], emb_dim=emb, num_heads=heads,
          num_kv_heads=heads, head_dim=emb // heads, num_layers=hf['n_layer'],
          mlp_dim=hf.get('n_inner') or 4 * emb,
          activation=_activation(hf.get('activation_function', 'gelu_new')),
          norm_eps=float(hf.get('layer_norm_epsilon', 1e-5)),
          tie_embeddings=bool(hf.get('tie_word_embeddings', True)),
          max_len=hf.get('n_positions', 1024), bos_id=hf.get('bos_token_id'), eos_id=eos,
          pad_id=_pad(hf, eos), name=name)
  except KeyError as e:
    raise ValueError(f'config.json of a {kind} model has no {e.args[0]!r}; pass the '
                     'config.json save_pretrained wrote with the weights') from None
  raise ValueError(f'model_type {kind!r} is not supported here; use one of {MODEL_TYPES} '
                   '(or t5)')


Rule = Tuple[str, Tuple[str, ...], Callable, Callable]  # HF key, our path, to ours, to HF


def _rules(cfg: LMConfig) -> Iterator[Rule]:
  """(HF key, our path, HF -> ours, ours -> HF) for every param except GPT-2's c_attn."""
  d, n, m, h = cfg.emb_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  same = lambda a: a
  t = lambda a: np.ascontiguousarray(a.T)
  llama = cfg.family == 'llama'
  prefix = 'model.' if llama else ''
  yield (f'{prefix}embed_tokens.weight' if llama else 'wte.weight', ('embed', 'embedding'),
         same, same)
  if not llama:
    yield 'wpe.weight', ('position', 'embedding'), same, same
  final = 'model.norm' if llama else 'ln_f'
  yield f'{final}.weight', ('final_norm', 'scale'), same, same
  if not llama:
    yield f'{final}.bias', ('final_norm', 'bias'), same, same
  if not cfg.tie_embeddings:
    yield 'lm_head.weight', ('lm_head', 'kernel'), t, t
  for i in range(cfg.num_layers):
    ours = f'layers_{i}'
    if llama:
      hf = f'model.layers.{i}'
      yield f'{hf}.input_layernorm.weight', (ours, 'attn_norm', 'scale'), same, same
      yield f'{hf}.post_attention_layernorm.weight', (ours, 'mlp_norm', 'scale'), same, same
      for proj, name, count in (('q', 'query', n), ('k', 'key', m), ('v', 'value', m)):
        yield (f'{hf}.self_attn.{proj}_proj.weight', (ours, 'attention', name, 'kernel'),
               lambda a, c=count: np.ascontiguousarray(a.T).reshape(d, c, h),
               lambda a, c=count: np.ascontiguousarray(a.reshape(d, c * h).T))
        if cfg.attention_bias:
          yield (f'{hf}.self_attn.{proj}_proj.bias', (ours, 'attention', name, 'bias'),
                 lambda a, c=count: a.reshape(c, h), lambda a, c=count: a.reshape(c * h))
      yield (f'{hf}.self_attn.o_proj.weight', (ours, 'attention', 'out', 'kernel'),
             lambda a: np.ascontiguousarray(a.T).reshape(n, h, d),
             lambda a: np.ascontiguousarray(a.reshape(n * h, d).T))
      if cfg.attention_bias:
        yield f'{hf}.self_attn.o_proj.bias', (ours, 'attention', 'out', 'bias'), same, same
      for proj in ('gate', 'up', 'down'):
        yield f'{hf}.mlp.{proj}_proj.weight', (ours, 'mlp', proj, 'kernel'), t, t
        if cfg.mlp_bias:
          yield f'{hf}.mlp.{proj}_proj.bias', (ours, 'mlp', proj, 'bias'), same, same
    else:
      hf = f'h.{i}'
      for norm, name in (('ln_1', 'attn_norm'), ('ln_2', 'mlp_norm')):
        yield f'{hf}.{norm}.weight', (ours, name, 'scale'), same, same
        yield f'{hf}.{norm}.bias', (ours, name, 'bias'), same, same
      yield (f'{hf}.attn.c_proj.weight', (ours, 'attention', 'out', 'kernel'),
             lambda a: a.reshape(n, h, d), lambda a: a.reshape(n * h, d))
      yield f'{hf}.attn.c_proj.bias', (ours, 'attention', 'out', 'bias'), same, same
      for proj, name in (('c_fc', 'up'), ('c_proj', 'down')):
        yield f'{hf}.mlp.{proj}.weight', (ours, 'mlp', name, 'kernel'), same, same
        yield f'{hf}.mlp.{proj}.bias', (ours, 'mlp', name, 'bias'), same, same


def _normalize_keys(state_dict: Dict[str, Any], cfg: LMConfig) -> Dict[str, Any]:
  """Drops HF's ignored buffers and GPT-2's optional 'transformer.' prefix."""
  out = {}
  for key, value in state_dict.items():
    if key.endswith(_IGNORED_SUFFIXES):
      continue
    if cfg.family == 'gpt2' and key.startswith('transformer.'):
      key = key[len('transformer.'):]
    out[key] = value
  return out


def params_from_hf(state_dict: Dict[str, Any], cfg: LMConfig) -> PyTree:
  """Our params from an HF state dict (numpy arrays, any float dtype; kept as stored).

  Args:
    state_dict: HF key -> array, as `model.state_dict()` or safetensors name them.
    cfg: the matching LMConfig (`config_from_hf`).

  Returns:
    The nested dict of numpy arrays `CausalLM(cfg).init` describes.

  Raises:
    ValueError: a missing, unexpected or mis-shaped key (named, with the fix).
  """
  state = _normalize_keys(state_dict, cfg)
  expected = jax.eval_shape(CausalLM(cfg).init, jax.random.PRNGKey(0))
  params: dict = {}
  used = set()
  if cfg.tie_embeddings:
    used.add('lm_head.weight')  # a tied copy of the embedding, if saved

  def take(key):
    if key not in state:
      raise ValueError(f'{key} is missing from the checkpoint; check that config.json '
                       '(layers, tie_word_embeddings, attention_bias) matches the weights')
    used.add(key)
    return np.asarray(state[key])

  def put(key, path, value):
    want = get_path(expected, path).shape
    if value.shape != want:
      raise ValueError(f'{key} has shape {value.shape} but config.json implies {want}; '
                       'pass the config.json saved with these weights')
    set_path(params, path, value)

  for key, path, to_ours, _ in _rules(cfg):
    put(key, path, to_ours(take(key)))
  if cfg.family == 'gpt2':
    n, h = cfg.num_heads, cfg.head_dim
    for i in range(cfg.num_layers):
      w, b = take(f'h.{i}.attn.c_attn.weight'), take(f'h.{i}.attn.c_attn.bias')
      if w.shape != (cfg.emb_dim, 3 * n * h):
        raise ValueError(f'h.{i}.attn.c_attn.weight has shape {w.shape}, not '
                         f'{(cfg.emb_dim, 3 * n * h)}; pass the matching config.json')
      for j, name in enumerate(('query', 'key', 'value')):
        att = ('layers_' + str(i), 'attention', name)
        put('c_attn', att + ('kernel',), w[:, j * n * h:(j + 1) * n * h].reshape(-1, n, h))
        put('c_attn', att + ('bias',), b[j * n * h:(j + 1) * n * h].reshape(n, h))
  unexpected = sorted(set(state) - used)
  if unexpected:
    raise ValueError(f'unexpected keys {unexpected[:3]} in the checkpoint; check that '
                     'config.json (layers, biases) matches the weights')
  return params


def params_to_hf(cfg: LMConfig, params: PyTree) -> Dict[str, np.ndarray]:
  """The HF state dict (float32 numpy) of our params: `params_from_hf` read backwards."""
  f32 = lambda path: np.asarray(get_path(params, path), np.float32)
  state = {key: to_hf(f32(path)) for key, path, _, to_hf in _rules(cfg)}
  if cfg.family == 'gpt2':
    state = {k if k == 'lm_head.weight' else f'transformer.{k}': v for k, v in state.items()}
    n, h = cfg.num_heads, cfg.head_dim
    for i in range(cfg.num_layers):
      att = ('layers_' + str(i), 'attention')
      names = ('query', 'key', 'value')
      state[f'transformer.h.{i}.attn.c_attn.weight'] = np.concatenate(
          [f32(att + (x, 'kernel')).reshape(-1, n * h) for x in names], axis=1)
      state[f'transformer.h.{i}.attn.c_attn.bias'] = np.concatenate(
          [f32(att + (x, 'bias')).reshape(n * h) for x in names])
  if cfg.tie_embeddings:
    state['lm_head.weight'] = state['transformer.wte.weight' if cfg.family == 'gpt2'
                                    else 'model.embed_tokens.weight']
  return state


def config_to_hf(cfg: LMConfig) -> Dict[str, Any]:
  """The config.json dict HF builds the same model from."""
  common = dict(vocab_size=cfg.vocab_size, tie_word_embeddings=cfg.tie_embeddings,
                bos_token_id=cfg.bos_id, eos_token_id=cfg.eos_id, pad_token_id=cfg.pad_id)
  if cfg.family == 'gpt2':
    return dict(common, model_type='gpt2', architectures=['GPT2LMHeadModel'],
                n_embd=cfg.emb_dim, n_head=cfg.num_heads, n_layer=cfg.num_layers,
                n_inner=cfg.mlp_dim, n_positions=cfg.max_len,
                activation_function=cfg.activation, layer_norm_epsilon=cfg.norm_eps)
  rope = None
  if cfg.rope_type != 'default':
    rope = {'rope_type': cfg.rope_type, 'factor': cfg.rope_factor}
    if cfg.rope_type == 'llama3':
      rope.update(low_freq_factor=cfg.rope_low_freq_factor,
                  high_freq_factor=cfg.rope_high_freq_factor,
                  original_max_position_embeddings=cfg.rope_original_max_len)
  return dict(common, model_type='llama', architectures=['LlamaForCausalLM'],
              hidden_size=cfg.emb_dim, num_attention_heads=cfg.num_heads,
              num_key_value_heads=cfg.num_kv_heads, head_dim=cfg.head_dim,
              num_hidden_layers=cfg.num_layers, intermediate_size=cfg.mlp_dim,
              hidden_act=cfg.activation, rms_norm_eps=cfg.norm_eps,
              attention_bias=cfg.attention_bias, mlp_bias=cfg.mlp_bias,
              max_position_embeddings=cfg.max_len, rope_theta=cfg.rope_theta,
              rope_scaling=rope)
