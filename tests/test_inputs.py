"""Padding batches to buckets: the widths, and decodes that do not change with them."""
import numpy as np
import pytest

from specjax.bench import decodes
from specjax.core import api
from specjax.core.sampling import SamplingConfig
from specjax.job import inputs, decode_job
from specjax.models.t5 import T5
from specjax.models.t5_config import demo_draft, demo_target


def _rows(*lengths, width=64):
  rows = np.zeros((len(lengths), width), np.int32)
  for i, n in enumerate(lengths):
    rows[i, :n] = 5
  return rows


def test_bucket_is_the_smallest_power_of_two_that_holds_the_longest_row():
  assert [inputs.bucket_width(_rows(n)) for n in (1, 8, 9, 16, 17, 33, 64)] == [
      8, 8, 16, 16, 32, 64, 64]
  assert inputs.bucket_width(_rows(3, 20)) == 32  # the batch's longest row decides
  assert inputs.bucket_width(_rows(20, width=24)) == 24  # never wider than S
  assert inputs.bucket_width(_rows(0, 0)) == 8  # all padding
  # only padding columns are cut; 'max' keeps S
  rows = _rows(3, 11)
  cut = inputs.pad_to_bucket(rows)
  assert cut.shape == (2, 16) and np.array_equal(cut, rows[:, :16]) and not rows[:, 16:].any()
  assert inputs.pad_to_bucket(rows, 'max').shape == (2, 64)
  with pytest.raises(ValueError, match='--pad-inputs'):
    inputs.pad_to_bucket(rows, 'longest')


def test_one_batch_per_shape_in_order():
  batches = [_rows(3)[:, :8], _rows(12)[:, :16], _rows(5)[:, :8], _rows(30)[:, :32]]
  firsts = decodes.one_per_shape(batches)
  assert [x.shape[1] for x in firsts] == [8, 16, 32]
  assert all(a is b for a, b in zip(firsts, (batches[0], batches[1], batches[3])))


def test_bucketed_decode_matches_fixed_width_and_compiles_once_per_width(tmp_path):
  """Short and long inputs at batch 1: two widths, each compiled once, same outputs."""
  src = tmp_path / 'in.txt'
  src.write_text('Print the page\nOpen the file\n' + 'Unable to open the file because the '
                 'folder it is stored in could not be found on this computer\n')

  def decode(pad):  # fixed batches of one: each input its own width
    records = []
    summary = decode_job.run(decode_job.DecodeJob(input=str(src), gamma=3, batch_size=1, max_decode_len=32,
                                    pad_inputs=pad, refill=False, progress=False),
                      records.append)
    return summary, [r['prediction'] for r in records]

  decoder = api.decoder_of(T5(demo_target), T5(demo_draft), gamma=3, max_decode_len=32,
                           sampling=SamplingConfig(), rows=1)
  traces = decoder.traces
  bucket, bucket_out = decode('bucket')
  assert 1 <= decoder.traces - traces <= 2  # per width, not per batch (3 batches)
  fixed, fixed_out = decode('max')
  # with the demo's task prefix the short lines take 9-16 tokens, the long one 17-32
  assert bucket['input_widths'] == [16, 32] and fixed['input_widths'] == [64]
  assert bucket['identical_to_target'] is True and fixed['identical_to_target'] is True
  assert bucket_out == fixed_out
