"""Minimal input: document reading, sentencepiece special tokens, packing, batches."""

import numpy as np
import pytest

from electra_jax.data import examples, pipeline, sources, tokenizers


def test_reads_wikiextractor_and_plain_text(tmp_path, wiki_glob):
  docs = list(sources.read_documents(sources.list_files(wiki_glob)[0]))
  assert len(docs) > 10
  assert not any(line.startswith('<doc') or line == '</doc>' for d in docs for line in d)
  plain = tmp_path / 'plain.txt'
  plain.write_text('first doc line one\nline two\n\n\nsecond doc\n')
  assert list(sources.read_documents(str(plain))) == [['first doc line one', 'line two'],
                                                       ['second doc']]


def test_missing_files_name_the_glob(tmp_path):
  with pytest.raises(FileNotFoundError, match='config.data.corpus: no files match'):
    sources.list_files(str(tmp_path / '*.txt'))


def test_tokenizer_special_ids(tiny_tokenizer):
  t = tiny_tokenizer
  assert (t.pad_id, t.unk_id, t.cls_id, t.sep_id, t.mask_id) == (0, 1, 2, 3, 4)
  assert t.special_ids == tokenizers.TRAINED_SPECIAL_IDS
  assert t.vocab_size == 2000
  ids = t.encode(['A literal [MASK] and [CLS] stay text.'])[0]
  assert not set(ids) & {t.pad_id, t.cls_id, t.sep_id, t.mask_id}


def test_packing_keeps_documents_apart(tiny_tokenizer):
  t = tiny_tokenizer
  line_ids = t.encode(['word ' * 150, 'short tail'])
  rows = list(examples.pack_document(line_ids, t, 64))
  total = sum(len(ids) for ids in line_ids)
  assert len(rows) == -(-total // 62)
  for row in rows:
    assert row.shape == (64,) and row[0] == t.cls_id
    body = row[1:]
    sep = np.flatnonzero(body == t.sep_id)
    assert len(sep) == 1 and (body[sep[0] + 1:] == t.pad_id).all()
    assert t.cls_id not in body
  tokens = np.concatenate([row[1:1 + np.flatnonzero(row[1:] == t.sep_id)[0]] for row in rows])
  np.testing.assert_array_equal(tokens, [i for ids in line_ids for i in ids])


def test_batches_split_between_processes(tiny_tokenizer, wiki_glob):
  from configs import tiny
  config = tiny.get_config()
  config.data.corpus = wiki_glob
  config.batch_size = 8
  config.data.shuffle_buffer = 50
  shares = []
  for index in range(2):
    batches = pipeline.train_batches(config, tiny_tokenizer, process_index=index,
                                     process_count=2)
    shares.append(np.concatenate([next(batches)['input_ids'] for _ in range(5)]))
  assert shares[0].shape == (20, 64)
  as_set = lambda rows: {r.tobytes() for r in rows}
  assert not as_set(shares[0]) & as_set(shares[1])
  again = pipeline.train_batches(config, tiny_tokenizer, process_index=0, process_count=2)
  np.testing.assert_array_equal(next(again)['input_ids'], shares[0][:4])
