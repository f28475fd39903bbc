"""The user's own classification or regression data: `--task=csv`.

Rows come from TSV, CSV or JSON-lines files (chosen by the file's extension:
.tsv/.txt, .csv, .jsonl/.json) with named columns: `--text_column`, an optional
`--text_pair_column`, `--label_column`, and `--id_column` for the ids that test
predictions keep (the row number where a file has no such column). TSV files are
read as GLUE's are, without quoting, so a '"' is part of the text; CSV files
follow Python's csv dialect (RFC 4180 quoting).

The label set is the training file's, in sorted order (numerically when every
label is an integer). A label column of numbers that are not all integers
("0.5", "3.0") makes a regression task, scored by Pearson and Spearman
correlation; classification is scored by accuracy and macro-averaged F1.
"""

import csv
import dataclasses
import json
import os

from etils import epath
import numpy as np

from electra_jax import storage
from electra_jax.finetune import tasks

TaskDataError = tasks.TaskDataError
# Files looked for in --data_dir when --train_file, --dev_file or --test_file is not given.
DEFAULT_FILES = {'train': 'train.tsv', 'dev': 'dev.tsv', 'test': 'test.tsv'}


@dataclasses.dataclass(frozen=True)
class Columns:
  """Column names, as in a file's header or a JSON object's keys."""

  text: str
  text_pair: str | None
  label: str
  id: str


_FORMATS = {'.tsv': 'tsv', '.txt': 'tsv', '.csv': 'csv', '.jsonl': 'jsonl', '.json': 'jsonl'}


def _records(path: str) -> list[tuple[int, dict[str, str]]]:
  """(line number, row) for each row; values are strings (JSON numbers as written)."""
  kind = _FORMATS.get(os.path.splitext(path)[1].lower())
  if kind is None:
    raise TaskDataError(
      f'{path}: unknown file type; name it .tsv, .csv or .jsonl for tab-separated, '
      'comma-separated or JSON-lines rows'
    )
  if not epath.Path(path).exists():
    raise TaskDataError(f'{path}: no such file')
  try:
    with storage.open_text(path, encoding='utf-8-sig', newline='') as f:
      if kind == 'jsonl':
        return [
          (line, _json_row(path, line, text)) for line, text in enumerate(f, 1) if text.strip()
        ]
      reader = (
        csv.DictReader(f, delimiter='\t', quoting=csv.QUOTE_NONE)
        if kind == 'tsv'
        else csv.DictReader(f)
      )
      # Line numbers count the header as line 1; rows that hold a quoted line
      # break are numbered by where they end.
      return [(reader.line_num, row) for row in reader if any(row.values())]
  except UnicodeDecodeError as e:
    raise TaskDataError(f'{path}: not UTF-8 ({e}); save the file as UTF-8 text') from None


def _json_row(path: str, line: int, text: str) -> dict[str, str]:
  try:
    row = json.loads(text)
  except json.JSONDecodeError as e:
    raise TaskDataError(f'{path}:{line}: not a JSON object ({e.msg})') from None
  if not isinstance(row, dict):
    raise TaskDataError(f'{path}:{line}: not a JSON object, but a {type(row).__name__}')
  return {k: v if isinstance(v, str) else json.dumps(v) for k, v in row.items()}


def _field(path: str, line: int, row: dict[str, str], column: str, flag: str) -> str:
  if None in row or (column in row and row[column] is None):
    raise TaskDataError(
      f'{path}:{line}: {"more" if None in row else "fewer"} fields than the header has '
      'columns; the row is malformed (a separator inside a text, or a truncated line)'
    )
  if column not in row:
    raise TaskDataError(
      f'{path}:{line}: no column {column!r} (the row has {sorted(row)}); '
      f'name the right one with --{flag}'
    )
  return row[column]


def _is_integer(value: str) -> bool:
  return value.strip().lstrip('+-').isdigit()


def _is_number(value: str) -> bool:
  try:
    return np.isfinite(float(value))
  except ValueError:
    return False


def task_files(data_dir: str | None, files: dict[str, str], columns: Columns) -> tasks.TaskFiles:
  """The `csv` task of the user's files: `files` ('train', 'dev', 'test') name them,
  else they are DEFAULT_FILES in data_dir; the test file is optional."""
  paths = {}
  for split, default in DEFAULT_FILES.items():
    if split in files:
      paths[split] = files[split]
    elif data_dir is not None and (
      split != 'test' or epath.Path(os.path.join(data_dir, default)).exists()
    ):
      paths[split] = os.path.join(data_dir, default)
    elif split != 'test':
      raise TaskDataError(
        f'--task=csv needs a {split} file: name it with --{split}_file, or give --data_dir '
        f'holding {default}'
      )
  task = make_task(paths['train'], columns, has_test='test' in paths)
  return tasks.TaskFiles(
    task, paths, lambda split, path: read_file(task, columns, path, labelled=split != 'test')
  )


def make_task(train_path: str, columns: Columns, *, has_test: bool) -> tasks.Task:
  """The task the training file defines: its label set, or regression."""
  values = []
  for line, row in _records(train_path):
    # Every column is checked now, before a model is loaded.
    _field(train_path, line, row, columns.text, 'text_column')
    if columns.text_pair:
      _field(train_path, line, row, columns.text_pair, 'text_pair_column')
    values.append(_field(train_path, line, row, columns.label, 'label_column'))
  if not values:
    raise TaskDataError(f'{train_path}: no examples; the file is empty')
  test_splits = (('test', 'predictions'),) if has_test else ()
  if all(_is_number(v) for v in values) and not all(_is_integer(v) for v in values):
    numbers = [float(v) for v in values]
    return tasks.Task(
      'csv',
      None,
      ('pearson', 'spearman'),
      test_splits=test_splits,
      score_range=(min(numbers), max(numbers)),
    )
  key = (lambda v: int(v)) if all(_is_integer(v) for v in values) else None
  labels = tuple(sorted(set(values), key=key))
  if len(labels) < 2:
    raise TaskDataError(
      f'{train_path}: every row has the label {labels[0]!r}; a classifier needs two or more'
    )
  return tasks.Task('csv', labels, ('accuracy', 'macro_f1'), test_splits=test_splits)


def read_file(task: tasks.Task, columns: Columns, path: str, *, labelled: bool) -> tasks.Examples:
  """One split's rows; `labelled` False (test files) reads no label."""
  text_a, text_b, labels, ids = [], [], [], []
  for line, row in _records(path):
    text_a.append(_field(path, line, row, columns.text, 'text_column'))
    if columns.text_pair:
      text_b.append(_field(path, line, row, columns.text_pair, 'text_pair_column'))
    ids.append(row.get(columns.id) or str(len(ids)))
    if labelled:
      labels.append(
        _label(task, _field(path, line, row, columns.label, 'label_column'), path, line)
      )
  if not text_a:
    raise TaskDataError(f'{path}: no examples; the file is empty')
  dtype = np.float32 if task.is_regression else np.int32
  return tasks.Examples(
    text_a,
    text_b if columns.text_pair else None,
    np.asarray(labels, dtype) if labelled else None,
    ids,
  )


def _label(task: tasks.Task, value: str, path: str, line: int) -> float | int:
  if task.is_regression:
    if not _is_number(value):
      raise TaskDataError(
        f'{path}:{line}: label {value!r} is not a number, as the training labels are'
      )
    return float(value)
  if value not in task.labels:
    raise TaskDataError(
      f"{path}:{line}: label {value!r} is not among the training file's labels {list(task.labels)}"
    )
  return task.labels.index(value)
