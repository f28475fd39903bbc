"""Pretraining examples as the original ELECTRA data builder makes them.

Sentences of one document are gathered until they reach a target length,
then split into two segments and written as `[CLS] A [SEP] B [SEP]`
(segment ids 0 for `[CLS] A [SEP]`, 1 for `B [SEP]`). As in
google-research/electra's `build_pretraining_dataset.py`:
  * 10% of examples are single-segment (everything goes to A);
  * after each example, 5% of the time the next target length is a random
    length in [5, max_seq_length], so the model also sees short inputs;
  * a document's last sentences form an example of their own: no example,
    and so no segment, holds text of two documents;
  * the overflowing end of the last sentence is cut; `truncated_tokens`
    counts what is lost.

On disk an example is one record: `len([CLS] A [SEP])` followed by the
unpadded token ids, in the dtype that the metadata names.
"""

from collections.abc import Iterator
import dataclasses
import re

import numpy as np

from electra_jax.data.tokenizers import SpecialIds

# A sentence ends at . ! or ? (and any closing quotes or brackets) followed by
# whitespace and a letter or digit that is not lower case: an upper-case letter
# (English), or a letter of a script without case (Korean). Or it ends at a
# full-width 。！？ (and closers), with or without a space after it (Chinese,
# Japanese). Simple on purpose: it only has to keep segment boundaries near
# sentence boundaries.
_SENTENCE_END = re.compile(
  r'[.!?]["\')\]]*(?P<space>\s+)(?=["\'(\[]?(?P<next>\w))'
  r'|[。！？][」』）〕】"\')\]]*(?P<cjk_space>\s*)(?=\S)'
)


def split_sentences(line: str) -> list[str]:
  sentences, start = [], 0
  for end in _SENTENCE_END.finditer(line):
    if end.group('space') is None:
      space = end.span('cjk_space')
    elif not end.group('next').islower():  # "e.g. this" goes on.
      space = end.span('space')
    else:
      continue
    sentences.append(line[start : space[0]])
    start = space[1]
  sentences.append(line[start:])
  return [s for s in sentences if s]


@dataclasses.dataclass
class PackingStats:
  examples: int = 0
  single_segment: int = 0
  tokens: int = 0  # Tokens written, [CLS]/[SEP] excluded.
  truncated_tokens: int = 0


class ExampleBuilder:
  """Turns tokenized documents into two-segment examples; seeded, so reproducible."""

  def __init__(
    self,
    max_seq_length: int,
    special: SpecialIds,
    rng: np.random.Generator,
    *,
    single_segment_prob: float = 0.1,
    short_seq_prob: float = 0.05,
  ):
    self._max_length = max_seq_length
    self._special = special
    self._rng = rng
    self._single_segment_prob = single_segment_prob
    self._short_seq_prob = short_seq_prob
    self._target_length = max_seq_length
    self.stats = PackingStats()

  def add_document(self, sentences: list[list[int]]) -> Iterator[np.ndarray]:
    """Yields the int32 records (see module doc) of one document's sentences."""
    current: list[list[int]] = []
    length = 0
    for sentence in sentences:
      if not sentence:
        continue
      current.append(sentence)
      length += len(sentence)
      if length >= self._target_length:
        yield self._make_example(current)
        current, length = [], 0
    if current:
      yield self._make_example(current)

  def _make_example(self, sentences: list[list[int]]) -> np.ndarray:
    single = self._rng.random() < self._single_segment_prob
    # -3 leaves room for [CLS] and the two [SEP].
    first_target = 1 << 30 if single else (self._target_length - 3) // 2
    first: list[int] = []
    second: list[int] = []
    for sentence in sentences:
      # A sentence joins the first segment while it fits, always when that
      # segment is empty, and half the time when it would overflow a first
      # segment that is still short and has no second segment after it.
      if (
        not first
        or len(first) + len(sentence) < first_target
        or (not second and len(first) < first_target and self._rng.random() < 0.5)
      ):
        first += sentence
      else:
        second += sentence
    total = len(first) + len(second)
    first = first[: self._max_length - 2]
    second = second[: max(0, self._max_length - len(first) - 3)]

    self.stats.examples += 1
    self.stats.single_segment += not second
    self.stats.tokens += len(first) + len(second)
    self.stats.truncated_tokens += total - len(first) - len(second)
    if self._rng.random() < self._short_seq_prob:
      self._target_length = int(self._rng.integers(5, self._max_length + 1))
    else:
      self._target_length = self._max_length
    return encode_record(first, second, self._special)


def encode_record(first: list[int], second: list[int], special: SpecialIds) -> np.ndarray:
  """`[len([CLS] A [SEP]), CLS, *A, SEP, *B, (SEP if B)]` as int32."""
  ids = [special.cls, *first, special.sep]
  segment_a = len(ids)
  if second:
    ids += [*second, special.sep]
  return np.asarray([segment_a, *ids], np.int32)


def decode_records(
  records: list[np.ndarray], max_seq_length: int, pad_id: int
) -> dict[str, np.ndarray]:
  """input_ids, attention_mask and token_type_ids of a batch, each int32 [n, max_seq_length].

  Vectorised over the batch: one concatenation and one masked assignment
  instead of a Python loop over examples.
  """
  segment_a = np.array([r[0] for r in records], np.int32)[:, None]
  lengths = np.array([len(r) - 1 for r in records], np.int32)[:, None]
  positions = np.arange(max_seq_length, dtype=np.int32)[None, :]
  valid = positions < lengths
  input_ids = np.full((len(records), max_seq_length), pad_id, np.int32)
  input_ids[valid] = np.concatenate([r[1:] for r in records])
  return {
    'input_ids': input_ids,
    'attention_mask': valid.astype(np.int32),
    'token_type_ids': (valid & (positions >= segment_a)).astype(np.int32),
  }
