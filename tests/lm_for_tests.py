"""Tiny random Hugging Face decoder-only models (Llama with GQA and rope scaling, GPT-2)
saved by save_pretrained, and their specjax twins."""
import numpy as np

VOCAB = 48
LLAMA_PAD, LLAMA_BOS, LLAMA_EOS = 0, 1, 2
GPT2_EOS = VOCAB - 1  # GPT-2 pads with its EOS (= BOS), as generate does
WORDS = ['<pad>', '<s>', '</s>'] + [f'w{i}' for i in range(3, VOCAB)]


def hf_config(kind: str, **overrides):
  """A tiny HF config: 'llama' (GQA 4/2 heads, llama3 rope scaling), 'llama_linear'
  (linear rope scaling, tied embeddings, biases) or 'gpt2'."""
  import transformers  # pylint: disable=import-outside-toplevel
  if kind.startswith('llama'):
    rope = ({'rope_type': 'llama3', 'factor': 8.0, 'low_freq_factor': 1.0,
             'high_freq_factor': 4.0, 'original_max_position_embeddings': 64}
            if kind == 'llama' else {'rope_type': 'linear', 'factor': 2.0})
    kw = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
              rope_theta=10000.0, rope_scaling=rope, rms_norm_eps=1e-5,
              pad_token_id=LLAMA_PAD, bos_token_id=LLAMA_BOS, eos_token_id=LLAMA_EOS,
              tie_word_embeddings=kind != 'llama', attention_bias=kind != 'llama')
    return transformers.LlamaConfig(**dict(kw, **overrides))
  kw = dict(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=4, n_positions=64,
            bos_token_id=GPT2_EOS, eos_token_id=GPT2_EOS)
  return transformers.GPT2Config(**dict(kw, **overrides))


def hf_model(kind: str, seed: int = 0, **overrides):
  """A random tiny HF causal LM with every weight drawn non-trivially (HF's own init gives
  near-uniform logits) and an EOS logit bias so that greedy rows stop at different steps."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel
  torch.manual_seed(seed)
  model = transformers.AutoModelForCausalLM.from_config(hf_config(kind, **overrides))
  model = model.float().eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if 'norm' in name or 'ln_' in name:
        p.copy_((1 + 0.2 * torch.randn_like(p)) if name.endswith('weight')
                else 0.1 * torch.randn_like(p))
      elif name.endswith('bias'):
        p.normal_(0, 0.1)
      elif p.ndim == 2 and ('embed' in name or 'wte' in name or 'wpe' in name):
        p.normal_(0, 1.0 if 'wpe' not in name else 0.3)
      else:
        fan_in = p.shape[0] if 'c_' in name else p.shape[1]  # Conv1D is [in, out]
        p.normal_(0, fan_in ** -0.5)
  return model


def prompts(kind: str, seed: int = 0, lengths=(7, 4, 2), width: int = 8,
            left: bool = False) -> np.ndarray:
  """Prompts [len(lengths), width] of those lengths, padded with the model's pad id."""
  pad = GPT2_EOS if kind == 'gpt2' else LLAMA_PAD
  rng = np.random.default_rng(seed)
  out = np.full((len(lengths), width), pad, np.int32)
  for i, n in enumerate(lengths):
    row = rng.integers(3, VOCAB - 1, n)
    if left:
      out[i, width - n:] = row
    else:
      out[i, :n] = row
  return out


def write_tokenizer_json(path) -> None:
  """A word-level tokenizer.json of the Llama models' ids (`WORDS`) whose post-processor
  adds BOS, as Llama's does."""
  # pylint: disable-next=import-outside-toplevel
  from tokenizers import Tokenizer, models, pre_tokenizers, processors
  tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token='<pad>'))
  tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
  tok.add_special_tokens(WORDS[:3])
  tok.post_processor = processors.TemplateProcessing(single='<s> $A',
                                                     special_tokens=[('<s>', LLAMA_BOS)])
  tok.save(str(path))
