"""GLUE texts -> fixed-length model inputs, as BERT and ELECTRA build them.

`[CLS] A [SEP]` or `[CLS] A [SEP] B [SEP]`, segment ids 0 then 1, zero
padding. A pair too long is cut one token at a time from the longer text,
so a short text keeps all of its (more informative) tokens.

A batch can then be cut to a shorter padded length (`trim_padding`): GLUE
sentences are mostly far shorter than 128 tokens.
"""

from typing import Protocol

import numpy as np

from electra_jax.data.tokenizers import Tokenizer

Features = dict[str, np.ndarray]


class Texts(Protocol):
  """What `encode` reads of a split (`tasks.Examples` is one): its first and
  second texts, the second None for single-sentence tasks."""

  text_a: list[str]
  text_b: list[str] | None


def _truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
  cut_a = cut_b = 0
  while len(a) - cut_a + len(b) - cut_b > budget:
    if len(a) - cut_a > len(b) - cut_b:
      cut_a += 1
    else:
      cut_b += 1
  return a[: len(a) - cut_a], b[: len(b) - cut_b]


def encode(
  examples: Texts, tokenizer: Tokenizer, max_seq_length: int, *, swap: bool = False
) -> Features:
  """int32 [N, max_seq_length] input_ids, attention_mask and token_type_ids.

  `swap` exchanges the two texts of each pair (the released code's
  double_unordered augmentation for symmetric tasks).
  """
  first, second = examples.text_a, examples.text_b
  if swap:
    first, second = second, first
  ids_a = tokenizer.encode(first)
  ids_b = tokenizer.encode(second) if second is not None else None
  n = len(ids_a)
  input_ids = np.full((n, max_seq_length), tokenizer.pad_id, np.int32)
  token_type_ids = np.zeros((n, max_seq_length), np.int32)
  attention_mask = np.zeros((n, max_seq_length), np.int32)
  for i in range(n):
    if ids_b is None:
      row = [tokenizer.cls_id, *ids_a[i][: max_seq_length - 2], tokenizer.sep_id]
      segment_b = 0
    else:
      a, b = _truncate_pair(ids_a[i], ids_b[i], max_seq_length - 3)
      row = [tokenizer.cls_id, *a, tokenizer.sep_id, *b, tokenizer.sep_id]
      segment_b = len(b) + 1
    input_ids[i, : len(row)] = row
    attention_mask[i, : len(row)] = 1
    token_type_ids[i, len(row) - segment_b : len(row)] = 1
  return {
    'input_ids': input_ids,
    'attention_mask': attention_mask,
    'token_type_ids': token_type_ids,
  }


# Padded lengths are `shortest` times 1, 2, 3, 4, 6, 8, 12, ...: two an octave, so that
# above the shortest a batch is at most 1.5 times as long as its longest row, not 2
# times as with powers of two (whose SST-2 batches of 32 ran 17% more tokens), for
# two more compiled programs up to 128 tokens.
_MULTIPLES = (1, *(m << j for j in range(16) for m in (2, 3)))


def trim_padding(batch: Features, shortest: int = 16) -> Features:
  """The batch's [N, L] arrays cut to the shortest of shortest x (1, 2, 3, 4, 6, 8,
  ...), or L, that holds its longest row.

  Attention ignores padded keys and every other op is per token, so a row's
  outputs do not change; a few lengths mean a few compiled programs.
  """
  longest = int(batch['attention_mask'].sum(axis=-1).max())
  full = batch['input_ids'].shape[1]
  length = min(next(shortest * m for m in _MULTIPLES if shortest * m >= longest), full)
  return {k: v[:, :length] if v.ndim == 2 and v.shape[1] == full else v for k, v in batch.items()}


def epoch_order(
  seed: int, epoch: int, lengths: np.ndarray, batch_size: int, group_batches: int = 0
) -> np.ndarray:
  """The training examples' order for one epoch of `seed`: a fresh permutation.

  With `group_batches` > 0, each run of group_batches x batch_size examples of it is
  sorted by length, and the order of the epoch's full batches is then shuffled: a
  batch holds examples of similar lengths, so trim_padding cuts it shorter, while
  which examples meet in a batch, and when, stays random. The last
  len(lengths) % batch_size examples still sit the epoch out.
  """
  rng = np.random.default_rng([seed, epoch])
  order = rng.permutation(len(lengths))
  if not group_batches:
    return order
  span = group_batches * batch_size
  order = np.concatenate(
    [
      group[np.argsort(lengths[group], kind='stable')]
      for group in np.split(order, range(span, len(order), span))
    ]
  )
  full = len(order) // batch_size * batch_size
  batches = order[:full].reshape(-1, batch_size)[rng.permutation(full // batch_size)]
  return np.concatenate([batches.reshape(-1), order[full:]])
