"""Sharded decode on 8 simulated CPU devices: equal to unsharded, sharded as the rules say,
refill on a mesh, per-input randomness, the command line on meshes."""
import json
import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8')

import jax  # pylint: disable=wrong-import-position
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import specjax
from specjax import checkpoints, decode
from specjax.core import api
from specjax.job import calibrate, decode_job, pair
from specjax.models.t5 import T5
from specjax.models.t5_config import t5_tiny, t5_tiny_draft
from specjax.parallel import mesh as mesh_lib
from specjax.parallel import rules as axis_rules

MESHES = [(1, 8), (2, 4), (8, 1)]
GAMMA, MAX_LEN = 3, 12
RNG = jax.random.PRNGKey(5)
SAMPLED = specjax.SamplingConfig(temperature=1.0)


@pytest.fixture(scope='module')
def references(pair_and_inputs):
  """Each input decoded unsharded in one fixed batch of 8, greedy and sampled."""
  target, tp, draft, dp, inputs = pair_and_inputs
  return {t: specjax.speculative_decode(target, tp, draft, dp, inputs[:8], gamma=GAMMA,
                                        max_decode_len=MAX_LEN, rng=RNG,
                                        sampling=specjax.SamplingConfig(temperature=t))
          for t in (0.0, 1.0)}


@pytest.mark.parametrize('shape', MESHES)
@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_sharded_speculative_equals_unsharded(pair_and_inputs, references, shape, temperature):
  target, tp, draft, dp, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=shape)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs[:8], gamma=GAMMA,
                                   max_decode_len=MAX_LEN, rng=RNG, mesh=mesh,
                                   sampling=specjax.SamplingConfig(temperature=temperature))
  ref = references[temperature]
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.stats.accepted, ref.stats.accepted)
  np.testing.assert_allclose(out.stats.beta_sum, ref.stats.beta_sum, rtol=1e-5)
  assert out.tokens.sharding.is_fully_replicated  # readable on every host
  assert len(set(np.asarray(ref.lengths).tolist())) > 1


@pytest.mark.parametrize('shape', MESHES)
@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_refill_on_a_mesh_equals_each_inputs_unsharded_fixed_batch_decode(
    pair_and_inputs, references, shape, temperature):
  """16 inputs through 8 slots sharded over 'data': the first 8 equal their fixed-batch
  decode; the last 8 equal theirs (a fixed batch of inputs 8..15, same run indices)."""
  target, tp, draft, dp, inputs = pair_and_inputs
  sampling = specjax.SamplingConfig(temperature=temperature)
  kw = dict(gamma=GAMMA, max_decode_len=MAX_LEN, rng=RNG, sampling=sampling)
  second = specjax.speculative_decode(target, tp, draft, dp, inputs[8:], row_ids=np.arange(
      8, 16), **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=8,
                                   mesh=mesh_lib.make_mesh(shape=shape), **kw)
  expected = np.concatenate([references[temperature].tokens, second.tokens])
  np.testing.assert_array_equal(out.tokens, expected)
  np.testing.assert_array_equal(out.stats.target_calls, np.concatenate(
      [references[temperature].stats.target_calls, second.stats.target_calls]))
  # the slots refilled: fewer iterations than two fixed batches one after the other
  assert int(out.iterations) < int(references[temperature].iterations) + int(second.iterations)


def test_sampled_output_of_an_input_does_not_depend_on_batch_refill_or_mesh(pair_and_inputs):
  """With a fixed seed each input's sampled output is the same at batch 1, at batch 4 with
  refill, and on a 2x4 mesh: its randomness is its own (seed, input index)."""
  target, tp, draft, dp, inputs = pair_and_inputs
  kw = dict(gamma=GAMMA, max_decode_len=MAX_LEN, rng=RNG, sampling=SAMPLED)
  alone = np.concatenate([specjax.speculative_decode(
      target, tp, draft, dp, inputs[i:i + 1], row_ids=np.array([i]), **kw).tokens
                          for i in range(len(inputs))])
  refilled = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=4, **kw)
  meshed = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=4,
                                      mesh=mesh_lib.make_mesh(shape=(2, 4)), **kw)
  np.testing.assert_array_equal(refilled.tokens, alone)
  np.testing.assert_array_equal(meshed.tokens, alone)
  assert len({tuple(row) for row in alone.tolist()}) > 8  # the samples really differ


@pytest.mark.parametrize('temperature', [0.0, 1.0])
def test_dynamic_gamma_on_a_mesh_equals_unsharded(pair_and_inputs, temperature):
  """Rows stopping at their own counts, the verify scoring as far as the longest: the same
  on a 2x4 mesh with refill as unsharded in one batch."""
  target, tp, draft, dp, inputs = pair_and_inputs
  kw = dict(gamma=4, max_decode_len=MAX_LEN, rng=RNG, draft_threshold=0.1,
            sampling=specjax.SamplingConfig(temperature=temperature))
  ref = specjax.speculative_decode(target, tp, draft, dp, inputs, **kw)
  out = specjax.speculative_decode(target, tp, draft, dp, inputs, slots=8,
                                   mesh=mesh_lib.make_mesh(shape=(2, 4)), **kw)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.stats.drafted, ref.stats.drafted)
  calls = int(ref.stats.target_calls.sum())
  assert calls < int(ref.stats.drafted.sum()) < 4 * calls  # rows stop at their own counts


def test_sharded_autoregressive_equals_unsharded_and_traces_once(pair_and_inputs):
  target, tp, _, _, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  kwargs = dict(max_decode_len=MAX_LEN, rng=RNG)
  ref = specjax.autoregressive_decode(target, tp, inputs[:8], **kwargs)
  decoder = api.decoder_of(target, None, gamma=0, max_decode_len=MAX_LEN, rows=8,
                           sampling=specjax.SamplingConfig(), mesh=mesh)
  before = decoder.traces
  out = specjax.autoregressive_decode(target, tp, inputs[:8], mesh=mesh, **kwargs)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  other = specjax.autoregressive_decode(target, tp, inputs[:8][::-1].copy(), mesh=mesh,
                                        **kwargs)
  np.testing.assert_array_equal(other.tokens, np.asarray(ref.tokens)[::-1])
  assert decoder.traces == before + 1


def test_params_are_sharded_as_the_rules_say(tmp_path):
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  shardings = axis_rules.param_shardings(T5(t5_tiny), mesh)
  _, tp = checkpoints.load_model('t5_tiny', shardings=shardings)  # random init path
  enc = tp['encoder']['layers_0']
  assert tp['token_embedder']['embedding'].sharding.spec == P('model', None)  # [V, D]
  assert enc['attention']['query']['kernel'].sharding.spec == P(None, 'model')  # 4 heads / 4
  assert enc['attention']['out']['kernel'].sharding.spec == P('model', None)
  assert enc['mlp']['wi_0']['kernel'].sharding.spec == P(None, 'model')
  assert tp['decoder']['relpos_bias']['rel_embedding'].sharding.spec == P('model', None)
  assert tp['decoder']['decoder_norm']['scale'].sharding.spec == P(None)
  query = enc['attention']['query']['kernel']
  assert {s.data.shape for s in query.addressable_shards} == {(8, 3)}  # one head each
  # The draft's 2 heads do not divide model=4: its attention is replicated, the rest not.
  path = checkpoints.save_params(tmp_path / 'draft', T5(t5_tiny_draft).init(
      jax.random.PRNGKey(2)), t5_tiny_draft)
  _, dp = checkpoints.load_model('t5_tiny_draft', path, shardings=axis_rules.param_shardings(
      T5(t5_tiny_draft), mesh))
  layer = dp['decoder']['layers_0']
  assert layer['self_attention']['query']['kernel'].sharding.spec == P(None, None)
  assert dp['decoder']['relpos_bias']['rel_embedding'].sharding.spec == P(None, None)
  assert layer['mlp']['wi_0']['kernel'].sharding.spec == P(None, 'model')
  # 2-D params: embed over data as well.
  specs = axis_rules.param_specs(T5(t5_tiny), mesh, axis_rules.PARAMS_2D_RULES)
  assert specs['token_embedder']['embedding'] == P('model', 'data')
  # model=8 divides neither model's heads: both attentions replicated.
  specs = axis_rules.param_specs(T5(t5_tiny), mesh_lib.make_mesh(shape=(1, 8)))
  assert specs['encoder']['layers_0']['attention']['query']['kernel'] == P(None, None)
  assert specs['token_embedder']['embedding'] == P('model', None)  # V=32 over 8


@pytest.mark.parametrize('slots', [None, 4])
def test_caches_and_cross_kv_are_sharded_by_the_declared_axes(pair_and_inputs, slots):
  target, tp, draft, dp, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  decoder = api.decoder_of(target, draft, gamma=GAMMA, max_decode_len=MAX_LEN, rows=8,
                           sampling=specjax.SamplingConfig(), mesh=mesh, slots=slots)
  sampling = specjax.SamplingParams.of(specjax.SamplingConfig(), 8)
  programs, args = decoder.placed(tp, dp, inputs[:8], 8, np.arange(8), RNG, sampling)
  carry = programs.start(*args)
  state, rows = carry.state, 4 if slots else 8
  k = state.target_cache['layers_0']['k']  # [B, N=4, H, T]
  assert k.sharding.spec == P('data', 'model', None, None)
  assert {s.data.shape[:2] for s in k.addressable_shards} == {(rows // 2, 1)}
  assert carry.target_enc['cross']['layers_1']['v'].sharding.spec == P('data', 'model', None,
                                                                       None)
  assert carry.target_enc['mask'].sharding.spec == P('data', None)
  # The draft has 2 heads: its caches shard the batch only.
  assert state.draft_cache['layers_0']['k'].sharding.spec == P('data', None, None, None)
  assert carry.draft_enc['cross']['layers_0']['k'].sharding.spec == P('data', None, None, None)
  assert state.seq.sharding.spec == P('data', None)
  assert state.keys.sharding.spec == P('data', None)  # one key per row
  assert state.step.sharding.is_fully_replicated
  if slots:  # the queued inputs and their encodings shard over data too
    assert carry.queue.target_enc['cross']['layers_0']['k'].sharding.spec == P(
        'data', 'model', None, None)
    assert carry.queue.tokens.sharding.spec == P('data', None)
  out, final = programs.loop(args[0], args[1], carry)
  assert k.is_deleted()  # the carry was donated
  assert final.state.target_cache['layers_0']['k'].sharding.spec == P('data', 'model', None,
                                                                      None)
  assert out.tokens.shape == (8, MAX_LEN)


def test_batch_not_divisible_by_data_is_refused(pair_and_inputs):
  target, tp, draft, dp, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=(4, 2))
  with pytest.raises(ValueError, match=r'batch 6 .* data axis \(4\); pass --batch-size a '
                     r'multiple of 4') as err:
    specjax.speculative_decode(target, tp, draft, dp, inputs[:6], gamma=GAMMA,
                               max_decode_len=MAX_LEN, mesh=mesh)
  assert '\n' not in str(err.value)
  with pytest.raises(ValueError, match=r'batch 6 .* data axis \(4\)'):  # slots too
    specjax.speculative_decode(target, tp, draft, dp, inputs, gamma=GAMMA, slots=6,
                               max_decode_len=MAX_LEN, mesh=mesh)
  # The CLI job refuses before loading anything.
  with pytest.raises(ValueError, match='--batch-size a multiple of 4'):
    decode_job.run(decode_job.DecodeJob(target='t5_xxl', draft='t5_small', batch_size=6,
                                        mesh='data=4,model=2'))
  with pytest.raises(ValueError, match='--num-partitions 3 does not divide the 8 devices'):
    pair.job_mesh(decode_job.DecodeJob(num_partitions=3))
  assert mesh_lib.mesh_shape(pair.job_mesh(decode_job.DecodeJob(num_partitions=2))) == (4, 2)


def test_mesh_from_spec_uses_a_prefix_of_the_devices():
  mesh = mesh_lib.mesh_from_spec('data=2,model=2')
  assert mesh_lib.mesh_shape(mesh) == (2, 2) and mesh.devices.size == 4
  assert all(t == jax.sharding.AxisType.Auto for t in mesh.axis_types)
  with pytest.raises(ValueError, match='needs 16 devices but 8 are available'):
    mesh_lib.mesh_from_spec('data=2,model=8')


def test_gamma_auto_calibrates_on_the_mesh_it_decodes_on(pair_and_inputs):
  target, tp, draft, dp, inputs = pair_and_inputs
  mesh = mesh_lib.make_mesh(shape=(2, 4))
  kw = dict(max_decode_len=MAX_LEN, max_gamma=3)
  gamma, reason, costs = calibrate.choose_gamma(target, tp, draft, dp, inputs[:8],
                                                specjax.SamplingConfig(), mesh=mesh, **kw)
  assert costs['devices'] == 8 and 'mesh data=2,model=4' in reason
  best = costs['predicted_best']
  assert 1 <= best <= 3 and f'gamma {best} maximises' in reason
  assert gamma == (best if costs['measured_speedup'] >= 1 else 0)
  _, reason, costs = calibrate.choose_gamma(target, tp, draft, dp, inputs[:8],
                                            specjax.SamplingConfig(), **kw)
  assert costs['devices'] == 1 and 'on 1 device' in reason


SENTENCES = ['Unable to open the file', 'Save changes before closing?', 'Print the page',
             'Close the window', 'Delete the selected messages', 'Undo']


@pytest.fixture(scope='module')
def single_device_outputs(tmp_path_factory):
  """The CLI's output files on one device, greedy and sampled, fixed batches."""
  tmp = tmp_path_factory.mktemp('cli')
  src = tmp / 'in.txt'
  src.write_text('\n'.join(SENTENCES) + '\n')
  outs = {}
  for temperature in ('0', '1'):
    out = tmp / f'single_{temperature}.jsonl'
    assert decode.main(['--input', str(src), '--output', str(out), '--batch-size', '2',
                        '--gamma', '3', '--max-decode-len', '24', '--temperature',
                        temperature, '--no-refill', '--quiet', '--json']) == 0
    outs[temperature] = out.read_text()
  return src, outs


@pytest.mark.parametrize('flags, refill, temperature', [
    (['--num-partitions', '2'], True, '0'), (['--num-partitions', '2'], False, '0'),
    (['--mesh', 'data=2,model=4'], True, '0'), (['--mesh', 'data=2,model=4'], False, '0'),
    (['--mesh', 'data=2,model=4'], True, '1'),
], ids=['partitions2-refill', 'partitions2-fixed', 'mesh2x4-refill', 'mesh2x4-fixed',
        'mesh2x4-refill-sampled'])
def test_cli_on_a_mesh_writes_the_single_device_output_file(single_device_outputs, tmp_path,
                                                            capsys, flags, refill, temperature):
  """Batch 4 on the mesh against batch 2 on one device: the same file, byte for byte."""
  src, expected = single_device_outputs
  out = tmp_path / 'out.jsonl'
  assert decode.main(['--input', str(src), '--output', str(out), '--batch-size', '4',
                      '--gamma', '3', '--max-decode-len', '24', '--temperature', temperature,
                      '--no-compare', '--quiet', '--json'] + flags
                     + ([] if refill else ['--no-refill'])) == 0
  summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
  assert summary['mesh'] == ({'data': 4, 'model': 2} if flags[0] == '--num-partitions'
                             else {'data': 2, 'model': 4})
  assert out.read_text() == expected[temperature]
