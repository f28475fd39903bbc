"""Example packing: the original builder's invariants and proportions."""

import collections

import numpy as np

from electra_jax.data import packing, sources
from electra_jax.data.tokenizers import SpecialIds
from tests.conftest import data_dir

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4)


def _check_record(record: np.ndarray, max_len: int) -> tuple[list[int], list[int]]:
  """Checks one record's layout; returns its segments A and B."""
  decoded = packing.decode_records([record], max_len, SPECIAL.pad)
  ids, types, mask = (decoded[k][0] for k in ('input_ids', 'token_type_ids', 'attention_mask'))
  n = int(mask.sum())
  assert 3 <= n <= max_len and ids[0] == SPECIAL.cls
  assert (ids[n:] == SPECIAL.pad).all() and (mask[:n] == 1).all()
  seps = np.flatnonzero(ids[:n] == SPECIAL.sep)
  assert seps[-1] == n - 1 and len(seps) in (1, 2)
  a_end = seps[0]
  assert (types[: a_end + 1] == 0).all() and (types[a_end + 1 : n] == 1).all()
  assert (types[n:] == 0).all()
  assert SPECIAL.cls not in ids[1:n]
  return list(ids[1:a_end]), list(ids[a_end + 1 : n - 1])


def test_real_text_packing_respects_length_layout_and_documents(tiny_tokenizer):
  builder = packing.ExampleBuilder(64, SPECIAL, np.random.default_rng(0))
  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_04'))
  count = 0
  for doc in sources.read_documents(unit, sources.ReadOptions()):
    sentences = tiny_tokenizer.encode([s for line in doc for s in packing.split_sentences(line)])
    stream = collections.Counter(t for s in sentences for t in s)
    truncated_before = builder.stats.truncated_tokens
    packed: collections.Counter = collections.Counter()
    for record in builder.add_document(sentences):
      first, second = _check_record(record, 64)
      packed.update(first + second)
      count += 1
    # Every packed token comes from this document, and what was not packed
    # is exactly what the builder reports as truncated.
    assert not packed - stream
    assert (stream - packed).total() == builder.stats.truncated_tokens - truncated_before
  assert count > 500
  assert builder.stats.examples == count


def test_single_segment_and_short_example_proportions():
  # Documents of 1000 ten-token sentences: with no document ends, every
  # example is long unless the builder chose a short target length.
  rng = np.random.default_rng(1)
  builder = packing.ExampleBuilder(128, SPECIAL, np.random.default_rng(2))
  records = []
  for _ in range(20):
    sentences = [list(rng.integers(10, 1000, 10)) for _ in range(1000)]
    records.extend(builder.add_document(sentences))
  lengths = np.array([len(r) - 1 for r in records])
  single = np.mean([len(_check_record(r, 128)[1]) == 0 for r in records])
  assert len(records) > 1500
  assert 0.07 < single < 0.14, single
  # A random target in [5, 128] is under 100 about 3/4 of the time.
  assert 0.02 < np.mean(lengths < 100) < 0.07
  assert lengths.max() <= 128


def test_sentence_splitting():
  assert packing.split_sentences('He left. "Why?" she asked! 3 went. e.g. this') == [
    'He left.',
    '"Why?" she asked!',
    '3 went. e.g. this',
  ]
  # Closing quotes and brackets stay with their sentence; no text is lost.
  assert packing.split_sentences('He said "Go." Then (he left.) Really?! Yes... Élan.') == [
    'He said "Go."',
    'Then (he left.)',
    'Really?!',
    'Yes...',
    'Élan.',
  ]
  # Scripts without case, and full-width stops with no space after them.
  assert packing.split_sentences('한국어 문장 입니다. 두 번째 문장이에요! 세 번째?') == [
    '한국어 문장 입니다.',
    '두 번째 문장이에요!',
    '세 번째?',
  ]
  assert packing.split_sentences('今天天气很好。我们去公园吧！「好的。」他说。') == [
    '今天天气很好。',
    '我们去公园吧！',
    '「好的。」',
    '他说。',
  ]
  assert packing.split_sentences('日本語の文です。 次の文？') == ['日本語の文です。', '次の文？']
