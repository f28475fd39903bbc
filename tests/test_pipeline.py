"""Training input over prepared shards: determinism, exact resume, process shares, checks."""

import collections
import json
import os
import subprocess
import sys

from absl import flags
import numpy as np
import pytest

from configs import tiny
from electra_jax import config_lib
from electra_jax.data import pipeline, shard_writer, shards
from tests.conftest import REPO, data_dir


@pytest.fixture(scope='module')
def prepared(tmp_path_factory) -> shards.PreparedData:
  """One real Wikipedia file as WordPiece examples of 64 tokens."""
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_00',
    max_seq_length=64,
    vocab=str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt'),
  )
  return shard_writer.prepare(
    options, str(tmp_path_factory.mktemp('prepared')), num_workers=1, progress=False
  )


def _config(batch_size: int = 8, seed: int = 0, worker_processes: int = 0):
  config = tiny.get_config()
  config.batch_size, config.seed = batch_size, seed
  config.data.worker_processes = worker_processes
  config.model.vocab_size = 30522
  return config


def _take(iterator, count: int) -> list[np.ndarray]:
  return [next(iterator)['input_ids'] for _ in range(count)]


def test_batches_are_deterministic_per_seed(prepared):
  first = pipeline.train_iterator(prepared, _config(), process_index=0, process_count=1)
  batch = next(first)
  assert {k: (v.shape, v.dtype) for k, v in batch.items()} == {
    k: ((8, 64), np.int32) for k in ('input_ids', 'attention_mask', 'token_type_ids')
  }
  assert (batch['input_ids'][:, 0] == prepared.special_ids.cls).all()
  again = pipeline.train_iterator(prepared, _config(), process_index=0, process_count=1)
  other = pipeline.train_iterator(prepared, _config(seed=1), process_index=0, process_count=1)
  np.testing.assert_array_equal(next(again)['input_ids'], batch['input_ids'])
  assert not np.array_equal(next(other)['input_ids'], batch['input_ids'])
  for it in (first, again, other):
    it.close()


_RESUME = """
import json, sys
from absl import flags
from tests import test_pipeline as t
from electra_jax.data import pipeline, shards
flags.FLAGS.mark_as_parsed()  # Grain's worker processes read absl flags.
data = shards.PreparedData.load(sys.argv[1])
it = pipeline.train_iterator(data, t._config(worker_processes=int(sys.argv[3])),
                             process_index=0, process_count=1)
it.set_state(json.loads(sys.argv[2]))
print(json.dumps([b.tolist() for b in t._take(it, 3)]))
it.close()
"""


@pytest.mark.parametrize('worker_processes', [0, 2])
def test_iterator_state_resumes_exactly_in_a_new_process(prepared, worker_processes):
  flags.FLAGS.mark_as_parsed()
  iterator = pipeline.train_iterator(
    prepared, _config(worker_processes=worker_processes), process_index=0, process_count=1
  )
  _take(iterator, 5)
  state = iterator.get_state()
  expected = _take(iterator, 3)
  iterator.close()
  # Threads or worker processes read the same batches in the same order.
  single = pipeline.train_iterator(prepared, _config(), process_index=0, process_count=1)
  np.testing.assert_array_equal(np.stack(_take(single, 8)[5:]), np.stack(expected))
  single.close()
  result = subprocess.run(
    [sys.executable, '-c', _RESUME, prepared.directory, json.dumps(state), str(worker_processes)],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr[-2000:]
  resumed = json.loads(result.stdout.strip().splitlines()[-1])
  np.testing.assert_array_equal(np.array(resumed), np.stack(expected))


def test_processes_read_disjoint_shares_that_make_the_same_global_batches(prepared):
  shares = []
  for index in range(2):
    iterator = pipeline.train_iterator(
      prepared, _config(batch_size=4), process_index=index, process_count=2, num_epochs=1
    )
    shares.append([batch['input_ids'] for batch in iterator])
    iterator.close()
  single = pipeline.train_iterator(
    prepared, _config(batch_size=4), process_index=0, process_count=1, num_epochs=1
  )
  global_batches = [batch['input_ids'] for batch in single]
  single.close()
  # Process 0's rows then process 1's are the one-process batch, row for row.
  assert len(shares[0]) == len(shares[1]) == len(global_batches) == prepared.num_examples // 4
  for first, second, whole in zip(*shares, global_batches):
    np.testing.assert_array_equal(np.concatenate([first, second]), whole)
  # Together the shares cover the epoch once, but for the last partial global batch.
  rows = [row.tobytes() for batches in shares for batch in batches for row in batch]
  everything = pipeline.train_iterator(
    prepared, _config(batch_size=1), process_index=0, process_count=1, num_epochs=1
  )
  all_rows = [batch['input_ids'][0].tobytes() for batch in everything]
  everything.close()
  assert len(all_rows) == prepared.num_examples
  assert collections.Counter(rows) == collections.Counter(all_rows[: len(rows)])
  assert len(rows) == prepared.num_examples // 4 * 4


def test_each_epoch_is_reshuffled(prepared):
  iterator = pipeline.train_iterator(
    prepared, _config(batch_size=1), process_index=0, process_count=1, num_epochs=2
  )
  rows = [batch['input_ids'][0].tobytes() for batch in iterator]
  n = prepared.num_examples
  assert len(rows) == 2 * n and sorted(rows[:n]) == sorted(rows[n:]) and rows[:n] != rows[n:]


def test_mismatched_model_or_directory_is_refused(prepared, tmp_path):
  config = _config()
  config.model.vocab_size = 2000
  with pytest.raises(
    config_lib.ConfigError, match=r'model.vocab_size: 2000, but .* tokenized with 30522 ids'
  ):
    pipeline.check_compatible(prepared, config)
  config = _config()
  config.max_seq_length = 128
  with pytest.raises(config_lib.ConfigError, match='holds 64-token examples'):
    pipeline.check_compatible(prepared, config)

  with pytest.raises(shards.DataDirError, match='no metadata.json'):
    shards.PreparedData.load(str(tmp_path))
  with open(os.path.join(prepared.directory, 'metadata.json')) as f:
    metadata = json.load(f)
  metadata['format_version'] = 0
  (tmp_path / 'metadata.json').write_text(json.dumps(metadata))
  with pytest.raises(shards.DataDirError, match='version 0, but this electra_jax reads'):
    shards.PreparedData.load(str(tmp_path))
