"""Minimal training input: tokenizer set-up and a stream of host batches.

Each process tokenizes the corpus on the fly, packs examples, shuffles them
through a seeded buffer, keeps its own share, and yields numpy batches of
batch_size / process_count rows. A background thread keeps a few batches ready.
This loader is deliberately small; prepared, random-access shards with a
resumable iterator replace it (see the data pipeline issue).
"""

from collections.abc import Iterator
import os
import queue
import threading

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from electra_jax.data import examples, sources, tokenizers

Batch = dict[str, np.ndarray]


def _corpus_lines(files: list[str], seed: int) -> Iterator[str]:
  order = np.random.default_rng(seed).permutation(len(files))
  for doc in sources.iter_documents([files[i] for i in order]):
    yield from doc


def get_tokenizer(config: ml_collections.ConfigDict,
                  workdir: str) -> tokenizers.SentencePieceTokenizer:
  """Loads the workdir's sentencepiece model, training it on the corpus first if absent."""
  prefix = os.path.join(workdir, 'tokenizer', 'spm')
  if not os.path.exists(prefix + '.model') and jax.process_index() == 0:
    files = sources.list_files(config.data.corpus)
    logging.info('Training a sentencepiece tokenizer on %s (%d files)', config.data.corpus,
                 len(files))
    tokenizers.train_sentencepiece(
        _corpus_lines(files, config.seed), prefix, vocab_size=config.model.vocab_size,
        model_type=config.data.tokenizer_model_type,
        max_sentences=config.data.tokenizer_sample_sentences)
  multihost_utils.sync_global_devices('electra_jax:tokenizer')
  tokenizer = tokenizers.SentencePieceTokenizer(prefix + '.model')
  if tokenizer.vocab_size != config.model.vocab_size:
    raise ValueError(
        f'{prefix}.model has {tokenizer.vocab_size} pieces but config.model.vocab_size is '
        f'{config.model.vocab_size}; use a fresh workdir or set model.vocab_size to match')
  return tokenizer


def _examples(files: list[str], tokenizer: tokenizers.SentencePieceTokenizer,
              max_seq_length: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
  """One epoch of packed rows, files in a fresh random order."""
  for i in rng.permutation(len(files)):
    for doc in sources.read_documents(files[i]):
      yield from examples.pack_document(tokenizer.encode(doc), tokenizer, max_seq_length)


def _shuffled_rows(config: ml_collections.ConfigDict,
                   tokenizer: tokenizers.SentencePieceTokenizer) -> Iterator[np.ndarray]:
  """Repeats the corpus forever through a seeded shuffle buffer."""
  files = sources.list_files(config.data.corpus)
  rng = np.random.default_rng(config.seed)
  buffer: list[np.ndarray] = []
  epoch = 0
  while True:
    produced = 0
    for row in _examples(files, tokenizer, config.max_seq_length, rng):
      produced += 1
      if len(buffer) < config.data.shuffle_buffer:
        buffer.append(row)
        continue
      slot = rng.integers(len(buffer))
      yield buffer[slot]
      buffer[slot] = row
    if not produced:
      raise ValueError(f'config.data.corpus: {config.data.corpus!r} holds no text '
                       f'({len(files)} files, all empty)')
    epoch += 1
    logging.info('Input: finished epoch %d over %d files', epoch, len(files))


def _batches(config: ml_collections.ConfigDict, tokenizer: tokenizers.SentencePieceTokenizer,
             process_index: int, process_count: int) -> Iterator[Batch]:
  local_batch = config.batch_size // process_count
  rows: list[np.ndarray] = []
  for i, row in enumerate(_shuffled_rows(config, tokenizer)):
    if i % process_count != process_index:
      continue  # Every process sees the same shuffled stream and keeps its share.
    rows.append(row)
    if len(rows) == local_batch:
      input_ids = np.stack(rows)
      rows = []
      yield {
          'input_ids': input_ids,
          'attention_mask': (input_ids != tokenizer.pad_id).astype(np.int32),
          'token_type_ids': np.zeros_like(input_ids),
      }


def _prefetch(iterator: Iterator[Batch], size: int) -> Iterator[Batch]:
  """Runs `iterator` in a daemon thread, `size` batches ahead; re-raises its errors."""
  ready: queue.Queue = queue.Queue(maxsize=size)

  def work():
    try:
      for item in iterator:
        ready.put(item)
    except BaseException as e:  # Surface the worker's error in the train loop.
      ready.put(e)

  threading.Thread(target=work, daemon=True, name='input-prefetch').start()
  while True:
    item = ready.get()
    if isinstance(item, BaseException):
      raise item
    yield item


def train_batches(config: ml_collections.ConfigDict, tokenizer: tokenizers.SentencePieceTokenizer,
                  *, process_index: int, process_count: int,
                  prefetch: int = 4) -> Iterator[Batch]:
  """This process's share of each global batch, as numpy arrays."""
  if config.batch_size % process_count:
    raise ValueError(f'config.batch_size={config.batch_size} is not divisible by the '
                     f'{process_count} processes')
  return _prefetch(_batches(config, tokenizer, process_index, process_count), prefetch)
