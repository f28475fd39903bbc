"""Tokenizers: WordPiece parity with transformers' BertTokenizer on real text; special ids."""

import pytest

from electra_jax.data import sources, tokenizers
from tests.conftest import data_dir, require

# Edge cases on top of the real text: accents, CJK, ligatures, controls,
# Unicode separators, Greek capitals, over-long words, punctuation runs.
EDGE_CASES = [
  'Café naïve RÉSUMÉ Ångström — “quotes” 東京 ﬁ x\u2028y \x00z\ufffd',
  'ΟΔΟΣ. İstanbul Straße ØRSTED',
  'a' * 120 + ' ok',
  "don't ... !!?? (x) [y] {z} 3.14 $5 #hash @at",
  '\tTabs\r\nand  double  spaces\u00a0here',
]


def _wiki_lines(count: int) -> list[str]:
  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_03'))
  lines = [line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc]
  return lines[:count]


@pytest.mark.parametrize('lower_case', [True, False])
def test_wordpiece_matches_bert_tokenizer(lower_case):
  transformers = require('transformers')
  vocab = str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  ours = tokenizers.WordPieceTokenizer(vocab, lower_case=lower_case)
  reference = transformers.BertTokenizer(vocab, do_lower_case=lower_case)
  lines = _wiki_lines(1500) + EDGE_CASES
  expected = [reference.encode(line, add_special_tokens=False) for line in lines]
  got = ours.encode(lines)
  mismatched = [(line, g, e) for line, g, e in zip(lines, got, expected) if g != e]
  assert not mismatched, mismatched[:3]
  assert sum(map(len, got)) > 100_000
  assert (ours.pad_id, ours.unk_id, ours.cls_id, ours.sep_id, ours.mask_id) == (
    0,
    100,
    101,
    102,
    103,
  )
  assert ours.vocab_size == 30522


def test_accent_stripping_keeps_hangul_syllables_whole(tmp_path):
  transformers = require('transformers')
  vocab = tmp_path / 'vocab.txt'
  vocab.write_text(
    '\n'.join(
      ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', '한국어', '문장', '입니다', 'cafe', '.']
    )
  )
  ours = tokenizers.WordPieceTokenizer(str(vocab), lower_case=True)
  text = '한국어 문장 입니다. Café'
  assert ours.encode([text]) == [[5, 6, 7, 9, 8]]  # Accents still go: café -> cafe.
  # Where BERT's rule and ours part: BERT leaves each syllable as its jamo, which
  # a vocabulary built from Korean text does not hold.
  reference = transformers.BertTokenizer(str(vocab), do_lower_case=True)
  assert reference.encode(text, add_special_tokens=False) == [1, 1, 1, 9, 8]


def test_special_token_strings_stay_text():
  # As the original BERT/ELECTRA tokenizer: "[MASK]" in the corpus is text.
  vocab = str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  ours = tokenizers.WordPieceTokenizer(vocab)
  ids = ours.encode(['a [MASK] b [SEP]'])[0]
  assert not set(ids) & {ours.cls_id, ours.sep_id, ours.mask_id, ours.pad_id}


def test_vocab_without_special_tokens_is_refused(tmp_path):
  vocab = tmp_path / 'vocab.txt'
  vocab.write_text('[PAD]\n[UNK]\nhello\nworld\n')
  with pytest.raises(
    tokenizers.TokenizerError,
    match=r"vocab.txt: lacks the special tokens \['\[CLS\]', '\[SEP\]', "
    r"'\[MASK\]'\]",
  ):
    tokenizers.WordPieceTokenizer(str(vocab))


def test_sentencepiece_special_ids_and_reload(tiny_tokenizer, tmp_path):
  t = tiny_tokenizer
  assert (t.pad_id, t.unk_id, t.cls_id, t.sep_id, t.mask_id) == (0, 1, 2, 3, 4)
  assert t.special_ids == tokenizers.TRAINED_SPECIAL_IDS
  assert t.vocab_size == 2000
  ids = t.encode(['A literal [MASK] and [CLS] stay text.'])[0]
  assert not set(ids) & {t.pad_id, t.cls_id, t.sep_id, t.mask_id}
  copy = tokenizers.copy_tokenizer_file(t, str(tmp_path))
  assert copy.encode(['Some real words.']) == t.encode(['Some real words.'])
  with open(tmp_path / 'spm.model', 'ab') as f:
    f.write(b'\0')
  with pytest.raises(tokenizers.TokenizerError, match='changed since the data was prepared'):
    tokenizers.load_tokenizer(t.spec(), str(tmp_path))
