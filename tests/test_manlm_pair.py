"""The bundled decoder-only pair (`manlm_target`, `manlm_draft`, specjax/assets/manlm): a
trained Llama-style pair that continues man pages. Its speculative decodes equal the
target's own greedy decodes for every kind of draft (the draft model, bigram, copy,
copy+model, layer-skip and the bundled EAGLE head and Medusa heads), from the API, the
command line and the paper table's task."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from specjax import checkpoints, decode
from specjax.bench import paper_table
from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, MANLM_ASSETS, bundled
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.demo import continuation
from specjax.job import drafts
from specjax.job.inputs import tokenize
from specjax.models.lm import CausalLM

MAX_LEN = 24


@pytest.fixture(scope='module')
def pair():
  target, tp = checkpoints.load_model('manlm_target', DEFAULT_CHECKPOINTS['manlm_target'])
  draft, dp = checkpoints.load_model('manlm_draft', DEFAULT_CHECKPOINTS['manlm_draft'])
  return target, tp, draft, dp


@pytest.fixture(scope='module')
def prompts(pair):
  """[8, W] ids of the first 8 test prompts, as the command line encodes them."""
  vocab = checkpoints.load_tokenizer(bundled('manlm_target').vocab, pair[0])
  with open(os.path.join(MANLM_ASSETS, 'test.jsonl'), encoding='utf-8') as f:
    rows = [json.loads(line)['inputs'] for line in f][:8]
  return jnp.asarray(tokenize(vocab, rows, 32, False)[0]), vocab


@pytest.fixture(scope='module')
def reference(pair, prompts):
  target, tp, _, _ = pair
  return np.asarray(api.autoregressive_decode(target, tp, prompts[0],
                                              max_decode_len=MAX_LEN).tokens)


def test_the_pair_is_decoder_only_small_and_shares_the_man_page_vocabulary(pair, prompts):
  target, _, draft, _ = pair
  assert isinstance(target, CausalLM) and isinstance(draft, CausalLM)
  assert (target.config.num_layers, draft.config.num_layers) == (4, 1)
  assert target.vocab_size == draft.vocab_size == 2048
  vocab = prompts[1]
  assert vocab.vocab_size == 2000 and vocab.eos_id == 1 and vocab.pad_id == 0
  # No EOS after a prompt: the model continues it.
  assert vocab.encode('Create and manage') == tokenize(vocab, ['Create and manage'], 8,
                                                       False)[0][0][:3].tolist()
  sizes = {}
  for name in ('target', 'draft'):
    root = os.path.join(MANLM_ASSETS, name)
    sizes[name] = sum(os.path.getsize(os.path.join(d, f))
                      for d, _, fs in os.walk(root) for f in fs)
  # bfloat16: at most 2 bytes per parameter (3.5 M and 0.46 M of them).
  assert sizes['target'] < 2 * 3.6e6 and sizes['draft'] < 2 * 0.5e6, sizes


def test_the_target_learned_man_pages(pair):
  """Perplexity on held-out test texts far below the vocabulary's 2000 (a random model's),
  and the distilled draft close behind."""
  import sentencepiece as spm  # pylint: disable=import-outside-toplevel
  target, tp, draft, dp = pair
  sp = spm.SentencePieceProcessor(model_file=bundled('manlm_target').vocab)
  with open(os.path.join(MANLM_ASSETS, 'test.jsonl'), encoding='utf-8') as f:
    texts = [' '.join(json.loads(line).values()) for line in f][:64]
  seqs, spans = continuation.token_sequences(sp.encode, texts)
  nxt = np.concatenate([seqs[:, 1:], np.zeros_like(seqs[:, :1])], axis=1)
  mask = np.arange(seqs.shape[1])[None] < spans[:, 1:] - 1

  def perplexity(model, params):
    logp = jax.nn.log_softmax(model.logits(params, jnp.asarray(seqs)), -1)
    nll = -np.take_along_axis(np.asarray(logp), nxt[..., None], -1)[..., 0]
    return float(np.exp(nll[mask].mean()))

  target_ppl, draft_ppl = perplexity(target, tp), perplexity(draft, dp)
  assert target_ppl < 45, target_ppl  # 207 after 100 of its 1200 training steps
  assert target_ppl < draft_ppl < 3 * target_ppl, (target_ppl, draft_ppl)


@pytest.mark.parametrize('spec', ['model', 'bigram', 'copy', 'copy+manlm_draft',
                                  'layerskip:2', 'eagle', 'medusa'])
def test_greedy_output_is_the_targets_for_every_draft(pair, prompts, reference, spec):
  target, tp, draft, dp = pair
  load = lambda name: (draft, dp)
  proposer, params = (draft, dp) if spec == 'model' else drafts.resolve_draft(
      spec, target, 'manlm_target', load, None)
  out = api.speculative_decode(target, tp, proposer, params, prompts[0], gamma=3,
                               max_decode_len=MAX_LEN)
  np.testing.assert_array_equal(np.asarray(out.tokens), reference)
  assert float(out.stats.tokens_per_call) > 1.0  # the draft's tokens were accepted


@pytest.mark.parametrize('spec', ['model', 'eagle'])
def test_greedy_output_is_the_targets_with_a_tree(pair, prompts, reference, spec):
  target, tp, draft, dp = pair
  proposer, params = (draft, dp) if spec == 'model' else drafts.resolve_draft(
      spec, target, 'manlm_target', None, None)
  out = api.speculative_decode(target, tp, proposer, params, prompts[0],
                               max_decode_len=MAX_LEN, tree=(2, 2, 1))
  np.testing.assert_array_equal(np.asarray(out.tokens), reference)


def test_the_draft_model_is_accepted_often(pair, prompts):
  """A trained pair: greedy alpha well above an untrained draft's."""
  target, tp, draft, dp = pair
  trained = api.speculative_decode(target, tp, draft, dp, prompts[0], gamma=4,
                                   max_decode_len=MAX_LEN).stats
  untrained = api.speculative_decode(target, tp, draft, draft.init(jax.random.PRNGKey(0)),
                                     prompts[0], gamma=4, max_decode_len=MAX_LEN).stats
  assert float(trained.alpha) > 0.5 and float(untrained.alpha) < 0.2, (
      float(trained.alpha), float(untrained.alpha))


def test_sampled_decodes_accept_draft_tokens(pair, prompts):
  target, tp, draft, dp = pair
  out = api.speculative_decode(target, tp, draft, dp, prompts[0], gamma=4,
                               max_decode_len=MAX_LEN, sampling=SamplingConfig(temperature=1.0),
                               rng=jax.random.PRNGKey(3))
  tokens = np.asarray(out.tokens)
  assert 0 <= tokens.min() and tokens.max() < target.vocab_size
  assert float(out.stats.tokens_per_call) > 1.0


def test_the_command_line_continues_the_bundled_samples(tmp_path, pair, capsys):
  """`python -m specjax.decode --target manlm_target --draft manlm_draft` reads the bundled
  samples, encodes them with the man-page vocabulary (no EOS) and writes the target's own
  greedy continuations."""
  out = tmp_path / 'out.jsonl'
  rc = decode.main(['--target', 'manlm_target', '--draft', 'manlm_draft', '--gamma', '3',
                    '--max-decode-len', str(MAX_LEN), '--output', str(out)])
  assert rc == 0
  rows = [json.loads(line) for line in out.read_text().splitlines()]
  with open(bundled('manlm_target').samples, encoding='utf-8') as f:
    samples = [json.loads(line)['inputs'] for line in f]
  assert [r['inputs'] for r in rows] == samples
  target, tp, _, _ = pair
  vocab = checkpoints.load_tokenizer(bundled('manlm_target').vocab, target)
  ids = jnp.asarray(tokenize(vocab, samples, 32, False)[0])
  ref = np.asarray(api.autoregressive_decode(target, tp, ids, max_decode_len=MAX_LEN).tokens)
  assert [r['prediction'] for r in rows] == [vocab.decode(t) for t in ref]
  assert sum(r['accepted'] for r in rows) > 0
  assert 'identical to the target\'s own greedy output: True' in capsys.readouterr().out


def test_the_paper_table_task_decodes_prompts_without_eos(pair):
  run = paper_table.bundled_run('manlm', ['model', 'bigram'], 4, 32)
  assert isinstance(run.target, CausalLM) and run.paper_task is None
  assert list(run.drafts) == ['manlm_draft', 'bigram']
  assert run.source == 'specjax/assets/manlm/test.jsonl'
  first = run.inputs[0][run.inputs[0] != 0]
  assert first[-1] != 1  # not EOS-terminated
  batches = [jnp.asarray(run.inputs)]
  out = paper_table.cell(run, 'manlm_draft', SamplingConfig(), [2], batches, MAX_LEN, 0,
                         rounds=1, repeats=1, block=False)
  assert out['identical_to_target'] is True and out['tokens_per_call'] > 1.0
