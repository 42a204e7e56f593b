"""The command line with decoder-only checkpoint directories: `python -m specjax.decode
--target DIR --draft DIR` with the target's tokenizer.json, no task prefix."""
import json

import numpy as np
import pytest

import hf_for_tests

hf_modules = hf_for_tests.required('transformers', 'tokenizers')

from specjax import checkpoints, decode  # noqa: E402
from specjax.job import inputs as inputs_lib  # noqa: E402
from lm_for_tests import (LLAMA_BOS, LLAMA_EOS, LLAMA_PAD, VOCAB, WORDS, hf_model,  # noqa: E402
                          write_tokenizer_json)


@pytest.fixture(scope='module')
def dirs(tmp_path_factory):
  root = tmp_path_factory.mktemp('lm_cli')
  target = hf_model('llama', seed=0)
  target.save_pretrained(root / 'target')
  draft = hf_model('llama', seed=1, num_hidden_layers=1)  # the target without its layer 1
  draft.load_state_dict({k: v for k, v in target.state_dict().items() if 'layers.1.' not in k})
  draft.save_pretrained(root / 'draft')
  write_tokenizer_json(root / 'target' / 'tokenizer.json')
  (root / 'prompts.txt').write_text('w3 w7 w9 w12\nw10 w11\nw40\nw5 w6 w7 w8 w9 w10 w11\n'
                                    'w20 w21 w22\n')
  return root


def test_tokenizer_encodes_prompts_without_eos(dirs):
  target, _ = checkpoints.load_model(str(dirs / 'target'))
  tok = checkpoints.load_tokenizer(str(dirs / 'target'), target)
  assert tok.encode('w3 w7') == [LLAMA_BOS, 3, 7]
  assert tok.decode([5, 6, LLAMA_PAD, 7, LLAMA_EOS, 9]) == 'w5 w6 w7'
  rows, truncated = inputs_lib.tokenize(tok, ['w3 w7', 'w9'], 6, False)
  np.testing.assert_array_equal(rows, [[1, 3, 7, 0, 0, 0], [1, 9, 0, 0, 0, 0]])
  assert not truncated.any()
  no_bos = type('NoBos', (), dict(appends_eos=False, eos_id=2, pad_id=0,
                                   encode=lambda self, text: [3] * len(text.split())))()
  with pytest.raises(ValueError, match='input line 2 encodes to no tokens'):
    inputs_lib.tokenize(no_bos, ['w3', ''], 6, False)
  tok.check_fits(VOCAB)
  with pytest.raises(ValueError, match='has 48 ids but the model has only 40 logits'):
    tok.check_fits(40)
  with pytest.raises(FileNotFoundError, match='no tokenizer at .*; pass --vocab FILE'):
    checkpoints.load_tokenizer(str(dirs / 'draft'), target)


def test_decode_cli_with_checkpoint_directories(dirs, capsys):
  out = dirs / 'out.jsonl'
  rc = decode.main(['--target', str(dirs / 'target'), '--draft', str(dirs / 'draft'),
                    '--input', str(dirs / 'prompts.txt'), '--output', str(out),
                    '--max-decode-len', '10', '--batch-size', '2', '--gamma', '3', '--json',
                    '--quiet'])
  assert rc == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert summary['identical_to_target'] is True and summary['num_examples'] == 5
  assert summary['target_calls'] < summary['generated_tokens']  # drafts were accepted
  records = [json.loads(line) for line in out.read_text().splitlines()]
  assert [r['inputs'] for r in records][:2] == ['w3 w7 w9 w12', 'w10 w11']  # no prefix
  for r in records:
    assert all(w in WORDS[3:] for w in r['prediction'].split())
    assert 1 <= r['num_tokens'] <= 10


def test_decode_cli_refuses_a_mixed_pair(dirs, capsys):
  rc = decode.main(['--target', str(dirs / 'target'), '--draft', 'demo_draft',
                    '--input', str(dirs / 'prompts.txt'), '--quiet'])
  assert rc == 2
  assert 'both be decoder-only or both be T5' in capsys.readouterr().err


def test_hf_peers_decode_the_same_weights_identically(dirs):
  """The bench's peers (HF greedy and assisted generation on the exported pair) give the
  target's greedy output, as specjax does."""
  import specjax
  from specjax.bench import peers
  target, tp = checkpoints.load_model(str(dirs / 'target'))
  draft, dp = checkpoints.load_model(str(dirs / 'draft'))
  tok = checkpoints.load_tokenizer(str(dirs / 'target'), target)
  inputs = inputs_lib.tokenize(tok, ['w3 w7 w9', 'w10 w11', 'w40 w41 w42 w43 w44'], 8,
                               False)[0]
  greedy = np.asarray(specjax.autoregressive_decode(target, tp, inputs, max_decode_len=8).tokens)
  result = peers.peer_summary(target, tp, draft, dp, inputs, 8, 3, greedy, seed=0)
  assert set(result['runs']) == {'specjax', 'hf_greedy', 'hf_assisted'}
  for name, run in result['runs'].items():
    assert run['identical'] is True, (name, run)


def test_a_t5_hugging_face_directory_is_a_target_path_too(tmp_path):
  """--target DIR with a T5 directory: the config from its config.json, the vocabulary from
  its spiece.model."""
  import shutil
  from specjax.checkpoints import hf_t5
  from specjax.checkpoints.registry import DEFAULT_CHECKPOINTS, DEMO_VOCAB
  from specjax.job import decode_job, pair
  from specjax.models.t5 import T5
  demo, params = checkpoints.load_model('demo_draft', DEFAULT_CHECKPOINTS['demo_draft'])
  hf_t5.save_hf_dir(str(tmp_path), demo.config, params)
  shutil.copy(DEMO_VOCAB, tmp_path / 'spiece.model')
  target, tp, draft, _, vocab = pair.load_pair(decode_job.DecodeJob(target=str(tmp_path),
                                                                    draft='demo_draft'))
  assert isinstance(target, T5) and target.config.vocab_size == draft.config.vocab_size
  assert vocab.path == str(tmp_path / 'spiece.model')
  np.testing.assert_allclose(tp['decoder']['decoder_norm']['scale'],
                             params['decoder']['decoder_norm']['scale'])
