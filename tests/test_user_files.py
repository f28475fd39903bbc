"""--task=csv: the user's own TSV, CSV and JSON-lines files, on real data and by hand."""

import json

import numpy as np
import pytest

from electra_jax.finetune import glue, tasks, user_files
from tests.conftest import data_dir

_COLUMNS = user_files.Columns(text='text', text_pair=None, label='label', id='id')


def _write(path, text: str) -> str:
  path.write_text(text, encoding='utf-8')
  return str(path)


def test_sst2_read_by_column_names_is_glues_sst2():
  sst2 = data_dir() / 'glue' / 'SST-2'
  columns = user_files.Columns(text='sentence', text_pair=None, label='label', id='index')
  files = user_files.task_files(str(sst2), {}, columns)
  assert files.task.labels == ('0', '1') and files.task.metrics == ('accuracy', 'macro_f1')
  assert files.task.test_splits == (('test', 'predictions'),)
  for split in ('train', 'dev'):
    theirs = glue.task_files(glue.get_task('sst-2'), sst2.parent, {}).read(split)
    ours = files.read(split)
    assert ours.text_a == theirs.text_a and ours.text_b is None
    np.testing.assert_array_equal(ours.labels, theirs.labels)
  test = files.read('test')
  assert test.labels is None and test.ids[:3] == ['0', '1', '2'] and len(test) == 1821


def test_korean_reviews_keep_their_ids():
  nsmc = data_dir() / 'korean' / 'nsmc'
  columns = user_files.Columns(text='document', text_pair=None, label='label', id='id')
  files = user_files.task_files(
    None, {'train': str(nsmc / 'train.tsv'), 'dev': str(nsmc / 'test.tsv')}, columns
  )
  train = files.read('train')
  assert len(train) == 150_000 and files.task.labels == ('0', '1')
  assert train.ids[0] == '6404665' and train.text_a[0] == '아니 이게 뭐야!'
  # What awk counts: awk -F'\t' 'NR>1 && $3=="1"' train.tsv | wc -l.
  assert int(train.labels.sum()) == 74_827
  assert len(files.read('dev')) == 50_000


def test_formats_pairs_label_order_and_regression(tmp_path):
  rows = [('a "quoted" one', 'x', '10'), ('b, with a comma', 'y', '9'), ('c', 'z', '10')]
  tsv = _write(
    tmp_path / 'train.tsv',
    'premise\thypothesis\tlabel\n' + ''.join(f'{a}\t{b}\t{c}\n' for a, b, c in rows),
  )
  csv_file = _write(
    tmp_path / 'train.csv',
    'premise,hypothesis,label\n"a ""quoted"" one",x,10\n"b, with a comma",y,9\nc,z,10\n',
  )
  jsonl = _write(
    tmp_path / 'train.jsonl',
    ''.join(
      json.dumps({'premise': a, 'hypothesis': b, 'label': int(c)}) + '\n' for a, b, c in rows
    ),
  )
  columns = user_files.Columns(text='premise', text_pair='hypothesis', label='label', id='id')
  for path in (tsv, csv_file, jsonl):
    task = user_files.make_task(path, columns, has_test=False)
    assert task.labels == ('9', '10'), path  # Integers sort as numbers.
    examples = user_files.read_file(task, columns, path, labelled=True)
    assert examples.text_a == [a for a, _, _ in rows] and examples.text_b == ['x', 'y', 'z']
    assert examples.labels.tolist() == [1, 0, 1] and examples.ids == ['0', '1', '2']

  scores = _write(
    tmp_path / 'scores.jsonl', '{"text": "a", "label": 0.5}\n{"text": "b", "label": 3}\n'
  )
  task = user_files.make_task(scores, _COLUMNS, has_test=False)
  assert task.is_regression and task.score_range == (0.5, 3.0)
  assert task.metrics == ('pearson', 'spearman')
  assert user_files.read_file(task, _COLUMNS, scores, labelled=True).labels.tolist() == [0.5, 3.0]
  words = _write(tmp_path / 'words.tsv', 'text\tlabel\na\tneg\nb\tpos\nc\tneg\n')
  assert user_files.make_task(words, _COLUMNS, has_test=True).labels == ('neg', 'pos')


@pytest.mark.parametrize(
  'name, text, message',
  [
    ('t.tsv', 'text\tlabel\na\t1\nb\n', 't.tsv:3: fewer fields than the header has columns'),
    ('t.tsv', 'text\tlabel\na\tb\t1\n', 't.tsv:2: more fields than the header has columns'),
    ('t.jsonl', '{"text": "a", "class": 1}\n', r"t.jsonl:1: no column 'label'.*--label_column"),
    (
      't.tsv',
      'sentence\tlabel\na\t1\n',
      r"t.tsv:2: no column 'text' \(the row has \['label', 'sentence'\]\); name the right one with --text_column",
    ),
    ('t.jsonl', '{"text": "a", "label": 1}\n[1, 2]\n', r't.jsonl:2: not a JSON object, but a list'),
    ('t.jsonl', '{"text": "a", \n', r't.jsonl:1: not a JSON object \('),
    (
      't.tsv',
      'text\tlabel\na\t1\nb\t1\n',
      "every row has the label '1'; a classifier needs two or more",
    ),
    ('t.tsv', 'text\tlabel\n', 't.tsv: no examples; the file is empty'),
    ('t.parquet', 'x', r't.parquet: unknown file type; name it .tsv, .csv or .jsonl'),
  ],
)
def test_bad_files_name_file_line_and_flag(tmp_path, name, text, message):
  path = _write(tmp_path / name, text)
  with pytest.raises(tasks.TaskDataError, match=message):
    user_files.make_task(path, _COLUMNS, has_test=False)


def test_dev_labels_outside_train_and_missing_files(tmp_path):
  train = _write(tmp_path / 'train.tsv', 'text\tlabel\na\tneg\nb\tpos\n')
  dev = _write(tmp_path / 'dev.tsv', 'text\tlabel\na\tneg\nb\tneutral\n')
  files = user_files.task_files(str(tmp_path), {}, _COLUMNS)
  assert files.paths == {'train': train, 'dev': dev}  # No test.tsv: no test split.
  with pytest.raises(
    tasks.TaskDataError,
    match=r"dev.tsv:3: label 'neutral' is not among the training file's labels \['neg', 'pos'\]",
  ):
    files.read('dev')
  with pytest.raises(
    tasks.TaskDataError, match='--task=csv needs a dev file: name it with --dev_file'
  ):
    user_files.task_files(None, {'train': train}, _COLUMNS)
  with pytest.raises(tasks.TaskDataError, match='nowhere.tsv: no such file'):
    user_files.task_files(None, {'train': str(tmp_path / 'nowhere.tsv'), 'dev': dev}, _COLUMNS)
