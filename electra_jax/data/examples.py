"""Packs tokenized documents into fixed-length [CLS] ... [SEP] examples.

Minimal packing: the tokens of one document are concatenated and cut into
chunks of max_seq_length - 2; a document's last chunk is padded, so no example
mixes two documents.
"""

from collections.abc import Iterable, Iterator

import numpy as np

from electra_jax.data.tokenizers import SentencePieceTokenizer


def pack_document(line_ids: Iterable[list[int]], tokenizer: SentencePieceTokenizer,
                  max_seq_length: int) -> Iterator[np.ndarray]:
  """Yields int32 [max_seq_length] token rows for one document, padded with [PAD]."""
  tokens = [t for ids in line_ids for t in ids]
  body = max_seq_length - 2
  for start in range(0, len(tokens), body):
    row = np.full(max_seq_length, tokenizer.pad_id, np.int32)
    chunk = tokens[start:start + body]
    row[0] = tokenizer.cls_id
    row[1:1 + len(chunk)] = chunk
    row[1 + len(chunk)] = tokenizer.sep_id
    yield row
