"""Token tagging: CoNLL reading, conlleval's entity scores by hand, word windows."""

import numpy as np
import pytest

from electra_jax.data import tokenizers
from electra_jax.finetune import tagging, tasks
from tests.conftest import data_dir


def _conll() -> str:
  return str(data_dir() / 'conll2003')


@pytest.mark.parametrize(
  'name, sentences, tokens',
  [('train', 14_041, 203_621), ('valid', 3_250, 51_362), ('test', 3_453, 46_435)],
)
def test_conll2003_counts(name, sentences, tokens):
  # The counts of ../shared/data/README.md.
  read = tagging.read_conll(f'{_conll()}/{name}.txt')
  assert len(read) == sentences and sum(map(len, read.words)) == tokens
  assert read.words[0][:3] == (
    ['EU', 'rejects', 'German'] if name == 'train' else read.words[0][:3]
  )


def test_task_files_find_the_files_and_tags():
  files = tagging.task_files('conll2003', _conll(), {}, -1)
  assert files.paths == {'train': f'{_conll()}/train.txt', 'dev': f'{_conll()}/valid.txt'}
  assert files.task.labels == (
    'B-LOC',
    'B-MISC',
    'B-ORG',
    'B-PER',
    'I-LOC',
    'I-MISC',
    'I-ORG',
    'I-PER',
    'O',
  )
  assert files.task.metrics[0] == 'f1'
  assert files.read('dev').tags[0][:2] == ['O', 'O']


def test_chunking_scores_the_dev_tags_that_train_lacks_as_errors(caplog):
  # Column 2 holds the chunk tags: the same files serve chunking. valid.txt has
  # two I-PRT, which train.txt never uses.
  chunks = tagging.task_files('tagging', _conll(), {}, 2)
  assert 'B-NP' in chunks.task.labels and 'I-PRT' not in chunks.task.labels
  dev = chunks.read('dev')
  assert 'valid.txt: 2 of its 51362 words carry tags the training file lacks (I-PRT: 2)' in (
    caplog.text
  )
  tokenizer = tokenizers.WordPieceTokenizer(str(data_dir() / 'vocab/bert-base-uncased-vocab.txt'))
  feats = tagging.encode(dev, tokenizer, chunks.task.labels, 64)
  starts = feats['word_starts'].astype(bool)
  gold = [tag for tags in dev.tags for tag in tags]
  assert starts.sum() == len(gold)  # Every word is still tagged once.
  unknown = np.array([tag == 'I-PRT' for tag in gold])
  assert (feats['targets'][starts][unknown] == -1).all()
  assert (feats['targets'][starts][~unknown] >= 0).all()
  # The gold tags themselves are scored: a perfect guess at the others misses those two.
  guess = [[tag if tag != 'I-PRT' else 'O' for tag in tags] for tags in dev.tags]
  scores = tagging.score(dev.tags, guess)
  assert scores['accuracy'] == (len(gold) - 2) / len(gold) and 0.999 < scores['f1'] < 1


def test_entities_and_scores_by_hand():
  # IOB2: B starts an entity, I continues one of its type.
  assert tagging.entities(['B-PER', 'I-PER', 'O', 'B-LOC', 'B-LOC', 'I-ORG']) == {
    ('PER', 0, 1),
    ('LOC', 3, 3),
    ('LOC', 4, 4),
    ('ORG', 5, 5),  # conlleval: an I after another type starts an entity.
  }
  # IOB1: I starts an entity after O; B only separates two of one type.
  assert tagging.entities(['I-PER', 'I-PER', 'B-PER', 'O', 'I-LOC']) == {
    ('PER', 0, 1),
    ('PER', 2, 2),
    ('LOC', 4, 4),
  }
  # IOBES: E closes, S stands alone.
  assert tagging.entities(['B-ORG', 'I-ORG', 'E-ORG', 'S-PER', 'S-PER', 'O']) == {
    ('ORG', 0, 2),
    ('PER', 3, 3),
    ('PER', 4, 4),
  }
  gold = [['B-PER', 'I-PER', 'O', 'B-LOC'], ['B-ORG', 'O']]
  predicted = [['B-PER', 'O', 'O', 'B-LOC'], ['B-ORG', 'B-MISC']]
  # Gold entities: PER(0-1), LOC, ORG. Predicted: PER(0-0) wrong boundary, LOC,
  # ORG right, MISC spurious: precision 2/4, recall 2/3, and 4 of 6 tags right.
  got = tagging.score(gold, predicted)
  assert got['precision'] == 0.5 and got['recall'] == pytest.approx(2 / 3)
  assert got['f1'] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
  assert got['accuracy'] == pytest.approx(4 / 6)
  assert tagging.score([['O', 'O']], [['O', 'O']]) == {
    'f1': 0.0,
    'precision': 0.0,
    'recall': 0.0,
    'accuracy': 1.0,
  }


def test_long_sentences_become_windows_that_tag_each_word_once():
  tokenizer = tokenizers.WordPieceTokenizer(
    str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  )
  words = ['Johanson', 'visited', 'Tórshavn', 'in', '1996', '.'] * 5  # Several pieces each.
  tags = ['B-PER', 'O', 'B-LOC', 'O', 'O', 'O'] * 5
  labels = ('B-LOC', 'B-PER', 'O')
  sentences = tagging.Sentences([words, ['Short', '.']], [tags, ['O', 'O']])
  feats = tagging.encode(sentences, tokenizer, labels, max_seq_length=16)
  pieces = {w: len(tokenizer.encode([w])[0]) for w in set(words)}
  assert pieces['Johanson'] > 1 and pieces['Tórshavn'] > 1
  rows = feats['input_ids'].shape[0]
  assert rows > 2 and feats['input_ids'].shape[1] == 16
  # Every word is tagged once, at its first piece, in order, windows never split a word.
  starts = feats['word_starts'].astype(bool)
  assert starts.sum() == len(words) + 2
  np.testing.assert_array_equal(
    feats['targets'][starts], [labels.index(t) for t in tags + ['O', 'O']]
  )
  assert (feats['targets'][~starts] == -1).all()
  for row in range(rows):
    length = feats['attention_mask'][row].sum()
    assert feats['input_ids'][row, 0] == tokenizer.cls_id
    assert feats['input_ids'][row, length - 1] == tokenizer.sep_id
    assert feats['word_starts'][row, 1] == 1  # Each window starts with a word.


def test_bad_files_name_file_and_line(tmp_path):
  bad = tmp_path / 'train.txt'
  bad.write_text('EU NNP B-ORG\nrejects\n')
  with pytest.raises(
    tasks.TaskDataError, match=r'train.txt:2: 1 column\(s\), but the tag is read from column -1'
  ):
    tagging.read_conll(str(bad))
  (tmp_path / 'train.txt').write_text('EU B-ORG\n\nParis B-LOC\n')
  (tmp_path / 'dev.txt').write_text('Bonn NNP B-GPE\n')
  files = tagging.task_files('tagging', str(tmp_path), {}, 1)
  with pytest.raises(
    tasks.TaskDataError,
    match=r"dev.txt: none of its tags \['NNP'\] is among the training file's \['B-LOC', "
    r"'B-ORG'\]; read the same column of both \(--label_column\)",
  ):
    files.read('dev')
  with pytest.raises(
    tasks.TaskDataError,
    match='needs a dev file: name it with --dev_file, or give --data_dir holding dev.txt or valid.txt or test.txt',
  ):
    tagging.task_files('tagging', None, {'train': str(tmp_path / 'train.txt')}, -1)
