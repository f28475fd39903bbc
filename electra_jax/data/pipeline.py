"""Training input: prepared ArrayRecord shards -> Grain -> this process's batches.

The examples of all shards form one random-access dataset. Grain shuffles it
globally with the config's seed (a new order every epoch), repeats it, gives
process p of P its contiguous rows of each global batch, batches and decodes
them, and prefetches batches in a background thread, or in worker processes
when config.data.worker_processes > 0. Masking is not done here: it happens on
device, inside the train step, fresh at every step.

The iterator is deterministic and checkpointable: `get_state()` after k
batches, `set_state()` in a new process, and the next batches are the same.
Its state counts batches, one per step on every process, and a global batch
does not depend on the process count, so a run may resume on another number
of hosts and see the same data.
"""

import functools
import os
import time

from absl import logging
import grain
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from electra_jax import config_lib, storage
from electra_jax.data import packing, shard_writer, shards

Batch = dict[str, np.ndarray]


def prepared_data(config: ml_collections.ConfigDict, workdir: str) -> shards.PreparedData:
  """The prepared data the config names; prepares WORKDIR/data from data.corpus if needed."""
  if config.data.prepared_dir:
    data = shards.PreparedData.load(config.data.prepared_dir)
  else:
    directory = os.path.join(workdir, 'data')
    if jax.process_index() == 0:
      logging.info('Preparing %s into %s', config.data.corpus, directory)
      data = shard_writer.prepare(
        shard_writer.PrepareOptions.from_config(config),
        directory,
        num_workers=config.data.prepare_workers,
        max_position_embeddings=config.model.max_position_embeddings,
        progress=False,
      )
      logging.info('%s', shard_writer.summary(data))
    multihost_utils.sync_global_devices('electra_jax:prepare_data')
    data = shards.PreparedData.load(directory)
  if storage.is_url(data.directory) and config.data.local_copy_dir:
    data = _local_copy(data, config.data.local_copy_dir)
  check_compatible(data, config)
  return data


def _local_copy(data: shards.PreparedData, local_copy_dir: str) -> shards.PreparedData:
  """`data` copied under local_copy_dir, in a folder named by its URL."""
  name = data.directory.rstrip('/').split('://', 1)[1].replace('/', '_')
  directory = os.path.join(os.path.expanduser(local_copy_dir), name)
  start = time.perf_counter()
  copied = data.copy_to(directory)
  size = sum(os.path.getsize(p) for p in copied.shard_paths())
  logging.info(
    'Reading %s from its local copy %s (%.1f MB, %.1f s to make or check)',
    data.directory,
    directory,
    size / 1e6,
    time.perf_counter() - start,
  )
  return copied


def check_compatible(data: shards.PreparedData, config: ml_collections.ConfigDict) -> None:
  """Refuses data whose vocabulary or sequence length differ from the model's."""
  if data.vocab_size != config.model.vocab_size:
    raise config_lib.ConfigError(
      f'config.model.vocab_size: {config.model.vocab_size}, but the data in {data.directory} was '
      f'tokenized with {data.vocab_size} ids ({data.metadata["tokenizer"]["file"]}); set '
      f'--config.model.vocab_size={data.vocab_size} or prepare the data with a matching '
      'tokenizer'
    )
  if data.max_seq_length != config.max_seq_length:
    raise config_lib.ConfigError(
      f'config.max_seq_length: {config.max_seq_length}, but {data.directory} holds '
      f'{data.max_seq_length}-token examples; set --config.max_seq_length='
      f'{data.max_seq_length} or prepare the data at this length'
    )


def _decode_batch(raws: list[bytes], *, dtype: np.dtype, max_seq_length: int, pad_id: int) -> Batch:
  return packing.decode_records([np.frombuffer(raw, dtype) for raw in raws], max_seq_length, pad_id)


class ProcessShare(grain.MapDataset):
  """Process p's rows of every global batch: rows [p * local, (p + 1) * local) of
  each run of `process_count * local` elements.

  The global batch that make_array_from_process_local_data assembles (process
  0's rows, then process 1's, ...) is then the same, row for row, whatever
  the process count, so results and resumes do not depend on the host count.
  """

  def __init__(self, parent: grain.MapDataset, process_index: int, process_count: int, local: int):
    super().__init__(parent)
    self._index, self._count, self._local = process_index, process_count, local
    self._length = len(parent) // (process_count * local) * local

  def __len__(self) -> int:
    return self._length

  def _parent_index(self, index: int) -> int:
    batch, row = divmod(index, self._local)
    return (batch * self._count + self._index) * self._local + row

  def __getitem__(self, index):
    if isinstance(index, slice):
      return self.slice(index)
    return self._parent[self._parent_index(index)]

  def _getitems(self, indices):
    return self._parent._getitems([self._parent_index(i) for i in indices])  # pylint: disable=protected-access

  def __str__(self) -> str:
    return f'ProcessShare({self._index} of {self._count}, {self._local} rows per batch)'


def train_iterator(
  data: shards.PreparedData,
  config: ml_collections.ConfigDict,
  *,
  process_index: int,
  process_count: int,
  num_epochs: int | None = None,
  batch_size: int | None = None,
) -> grain.DatasetIterator:
  """An iterator of this process's share of each global batch (numpy arrays).

  num_epochs=None repeats forever; a number stops after that many passes.
  batch_size (global) defaults to config.batch_size.
  """
  batch_size = batch_size or config.batch_size
  if batch_size % process_count:
    raise config_lib.ConfigError(
      f'config.batch_size: {batch_size} does not split over the '
      f'{process_count} processes; use a multiple of it'
    )
  decode = functools.partial(
    _decode_batch, dtype=data.dtype, max_seq_length=data.max_seq_length, pad_id=data.special_ids.pad
  )
  dataset = (
    grain.MapDataset.source(grain.sources.ArrayRecordDataSource(data.shard_paths()))
    .shuffle(seed=config.seed)
    .repeat(num_epochs)
  )
  local = batch_size // process_count
  # Records are decoded a whole batch at a time, which is several times
  # faster than decoding and stacking them one by one.
  dataset = ProcessShare(dataset, process_index, process_count, local).batch(
    local, drop_remainder=True, batch_fn=decode
  )
  reading = dataset.to_iter_dataset(
    grain.ReadOptions(
      num_threads=config.data.read_threads, prefetch_buffer_size=config.data.prefetch_batches
    )
  )
  if config.data.worker_processes:
    # Worker processes escape the GIL; each prepares whole batches.
    return iter(
      reading.mp_prefetch(
        grain.MultiprocessingOptions(
          num_workers=config.data.worker_processes,
          per_worker_buffer_size=config.data.prefetch_batches,
        )
      )
    )
  return iter(
    grain.experimental.ThreadPrefetchIterDataset(
      reading, prefetch_buffer_size=config.data.prefetch_batches
    )
  )
