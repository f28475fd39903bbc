"""The prepared-data directory: ArrayRecord shards of examples plus metadata.

Layout of a directory written by `electra_jax.prepare_data`:

  plan.json           options and work units, written first; a rerun with other
                      options is refused instead of mixing two datasets
  tokenizer/FILE      the sentencepiece model or WordPiece vocab, copied in
  shards/NNNNN.array_record, shards/NNNNN.json
                      one shard per work unit and its counts, each renamed into
                      place only when complete, so an interrupted run resumes
  metadata.json       written last: its presence means the directory is complete

Records are `packing.encode_record` arrays stored as `record_dtype` bytes.
"""

import dataclasses
import os
from typing import Any

from etils import epath
import numpy as np

from electra_jax import errors, storage
from electra_jax.data import tokenizers
from electra_jax.data.tokenizers import SpecialIds

FORMAT = 'electra_jax.pretraining_examples'
FORMAT_VERSION = 1


class DataDirError(errors.UserError):
  """A prepared-data directory is missing, incomplete or incompatible."""


def shard_file(index: int) -> str:
  """Shard `index`'s path inside a prepared-data directory."""
  return f'shards/{index:05d}.array_record'


def shard_path(directory: str, index: int) -> str:
  return os.path.join(directory, shard_file(index))


def shard_stats_path(directory: str, index: int) -> str:
  return os.path.join(directory, 'shards', f'{index:05d}.json')


def record_dtype(vocab_size: int, max_seq_length: int) -> str:
  return 'uint16' if max(vocab_size, max_seq_length) <= np.iinfo(np.uint16).max else 'int32'


@dataclasses.dataclass(frozen=True)
class PreparedData:
  """A complete prepared-data directory, as its metadata describes it."""

  directory: str
  metadata: dict[str, Any]

  @classmethod
  def load(cls, directory: str) -> 'PreparedData':
    path = os.path.join(directory, 'metadata.json')
    if not epath.Path(path).exists():
      hint = (
        'preparation has not finished; rerun the same prepare_data command to resume'
        if epath.Path(directory, 'plan.json').exists()
        else 'prepare it with python -m electra_jax.prepare_data --output_dir=' + directory
      )
      raise DataDirError(f'{directory}: no metadata.json, so not a prepared data directory; {hint}')
    metadata = storage.read_json(path)
    if metadata.get('format') != FORMAT or metadata.get('format_version') != FORMAT_VERSION:
      raise DataDirError(
        f'{directory}: written as {metadata.get("format")} version '
        f'{metadata.get("format_version")}, but this electra_jax reads {FORMAT} version '
        f'{FORMAT_VERSION}; prepare the data again with this version'
      )
    return cls(directory, metadata)

  @property
  def max_seq_length(self) -> int:
    return self.metadata['max_seq_length']

  @property
  def vocab_size(self) -> int:
    return self.metadata['tokenizer']['vocab_size']

  @property
  def special_ids(self) -> SpecialIds:
    return SpecialIds(**self.metadata['special_ids'])

  @property
  def num_examples(self) -> int:
    return self.metadata['counts']['examples']

  @property
  def dtype(self) -> np.dtype:
    return np.dtype(self.metadata['record_dtype'])

  def shard_paths(self) -> list[str]:
    return [
      os.path.join(self.directory, s['file']) for s in self.metadata['shards'] if s['examples']
    ]

  def copy_to(self, directory: str) -> 'PreparedData':
    """This directory's shards, tokenizer file and metadata copied into `directory`
    (local), which keeps a complete copy of the same data from an earlier run.
    Each file is renamed into place whole and the metadata comes last, so
    several processes of one host may copy at once, and a killed copy starts
    again."""
    target = os.path.join(directory, 'metadata.json')
    if epath.Path(target).exists() and storage.read_json(target) == self.metadata:
      return PreparedData.load(directory)
    names = [
      f'tokenizer/{self.metadata["tokenizer"]["file"]}',
      *(s['file'] for s in self.metadata['shards']),
    ]
    for name in names:
      epath.Path(directory, name).parent.mkdir(parents=True, exist_ok=True)
      with storage.staged(os.path.join(directory, name)) as local:
        storage.copy(os.path.join(self.directory, name), local)
    storage.write_json(target, self.metadata)
    return PreparedData.load(directory)

  def tokenizer(self) -> tokenizers.Tokenizer:
    return tokenizers.load_tokenizer(
      self.metadata['tokenizer'], os.path.join(self.directory, 'tokenizer')
    )
