"""The GLUE tasks: where their files are, which columns hold what, how they are scored.

Files are read in the TSV layout GLUE ships (see ../shared/data/README.md):
one folder per task under --glue_dir, with train.tsv, dev.tsv (MNLI:
dev_matched.tsv and dev_mismatched.tsv) and test.tsv. Columns and label
sets follow google-research/electra's classification_tasks.py. Each error
names the file and line.
"""

import csv
import dataclasses
import os

import numpy as np

from electra_jax import errors, scores


class GlueDataError(errors.UserError):
  """A task file is missing or malformed; the message names file and line."""


@dataclasses.dataclass(frozen=True)
class Columns:
  """Where one split's fields are: column indices (negative counts from the end)."""

  text_a: int
  text_b: int | None
  label: int | None  # None for test files, which have no labels.
  header: bool  # Whether the first line is a header.


@dataclasses.dataclass(frozen=True)
class Task:
  name: str  # As --task takes it, lower case.
  folder: str  # The task's folder in GLUE's layout.
  labels: tuple[str, ...] | None  # Label strings in id order; None: regression.
  metrics: tuple[str, ...]  # The first is the task's main metric.
  labelled: Columns  # train and dev files.
  test: Columns
  dev_splits: tuple[str, ...] = ('dev',)
  # Test file name -> GLUE submission file name.
  test_splits: tuple[tuple[str, str], ...] = ()
  # The two texts are interchangeable (paraphrase, similarity): the released
  # code also trains on each pair swapped (config double_unordered).
  symmetric: bool = False
  score_range: tuple[float, float] = (0.0, 5.0)  # Regression targets (STS-B).

  @property
  def is_regression(self) -> bool:
    return self.labels is None

  @property
  def num_outputs(self) -> int:
    return 1 if self.labels is None else len(self.labels)


def _pair(a, b, label, test_a, test_b, header=True):
  return dict(labelled=Columns(a, b, label, header), test=Columns(test_a, test_b, None, True))


TASKS: dict[str, Task] = {
  task.name: task
  for task in (
    Task(
      'cola',
      'CoLA',
      ('0', '1'),
      ('mcc',),
      labelled=Columns(3, None, 1, header=False),
      test=Columns(1, None, None, header=True),
      test_splits=(('test', 'CoLA'),),
    ),
    Task(
      'sst-2',
      'SST-2',
      ('0', '1'),
      ('accuracy',),
      **_pair(0, None, 1, 1, None),
      test_splits=(('test', 'SST-2'),),
    ),
    Task(
      'mrpc',
      'MRPC',
      ('0', '1'),
      ('f1', 'accuracy'),
      **_pair(3, 4, 0, 3, 4),
      test_splits=(('test', 'MRPC'),),
      symmetric=True,
    ),
    Task(
      'sts-b',
      'STS-B',
      None,
      ('pearson', 'spearman'),
      **_pair(-3, -2, -1, -2, -1),
      test_splits=(('test', 'STS-B'),),
      symmetric=True,
    ),
    Task(
      'qqp',
      'QQP',
      ('0', '1'),
      ('f1', 'accuracy'),
      **_pair(3, 4, 5, 1, 2),
      test_splits=(('test', 'QQP'),),
    ),
    Task(
      'mnli',
      'MNLI',
      ('contradiction', 'entailment', 'neutral'),
      ('accuracy',),
      **_pair(8, 9, -1, 8, 9),
      dev_splits=('dev_matched', 'dev_mismatched'),
      test_splits=(('test_matched', 'MNLI-m'), ('test_mismatched', 'MNLI-mm')),
    ),
    Task(
      'qnli',
      'QNLI',
      ('entailment', 'not_entailment'),
      ('accuracy',),
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'QNLI'),),
    ),
    Task(
      'rte',
      'RTE',
      ('entailment', 'not_entailment'),
      ('accuracy',),
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'RTE'),),
    ),
    Task(
      'wnli',
      'WNLI',
      ('0', '1'),
      ('accuracy',),
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'WNLI'),),
    ),
  )
}
# Other spellings people use for the same tasks.
_ALIASES = {'sst2': 'sst-2', 'sst': 'sst-2', 'stsb': 'sts-b', 'sts': 'sts-b'}


def get_task(name: str) -> Task:
  key = name.lower()
  key = _ALIASES.get(key, key)
  if key not in TASKS:
    raise GlueDataError(f'--task={name}: not a GLUE task; choose one of {", ".join(TASKS)}')
  return TASKS[key]


@dataclasses.dataclass
class Examples:
  """One split of a task: texts, labels (ids, or floats for regression) and row ids."""

  text_a: list[str]
  text_b: list[str] | None
  labels: np.ndarray | None  # int32 label ids or float32 scores; None for test.
  ids: list[str]  # The test files' index column, used in submissions.

  def __len__(self) -> int:
    return len(self.text_a)


def _read_rows(path: str) -> list[list[str]]:
  if not os.path.exists(path):
    raise GlueDataError(
      f'{path}: no such file; --glue_dir must hold the task folders as GLUE '
      'ships them (e.g. glue_data/CoLA/train.tsv)'
    )
  try:
    with open(path, encoding='utf-8-sig', newline='') as f:  # MRPC starts with a BOM.
      # GLUE's files are not quoted: a '"' is part of the text.
      return list(csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE))
  except UnicodeDecodeError as e:
    raise GlueDataError(f'{path}: not UTF-8 ({e}); GLUE files are UTF-8 text') from None


def read_split(task: Task, glue_dir: str, split: str) -> Examples:
  """Reads `split` (train, dev, dev_matched, test, ...) of `task` from glue_dir."""
  path = os.path.join(glue_dir, task.folder, f'{split}.tsv')
  columns = task.test if split.startswith('test') else task.labelled
  rows = _read_rows(path)
  first = 1 if columns.header else 0
  needed = max(
    abs(c) + (c >= 0) for c in (columns.text_a, columns.text_b, columns.label) if c is not None
  )
  text_a, text_b, labels, ids = [], [], [], []
  for line, row in enumerate(rows[first:], start=first + 1):
    if not row:
      continue  # A trailing empty line.
    if len(row) < needed:
      raise GlueDataError(
        f'{path}:{line}: {len(row)} tab-separated fields, but {task.name} '
        f'needs at least {needed}; the row is malformed (a tab inside a '
        'text, or a truncated line)'
      )
    text_a.append(row[columns.text_a])
    if columns.text_b is not None:
      text_b.append(row[columns.text_b])
    ids.append(row[0] if split.startswith('test') else str(len(ids)))
    if columns.label is not None:
      labels.append(_label(task, row[columns.label], path, line))
  if not text_a:
    raise GlueDataError(f'{path}: no examples; the file is empty')
  dtype = np.float32 if task.is_regression else np.int32
  return Examples(
    text_a,
    text_b if columns.text_b is not None else None,
    np.asarray(labels, dtype) if columns.label is not None else None,
    ids,
  )


def _label(task: Task, value: str, path: str, line: int) -> float | int:
  if task.is_regression:
    low, high = task.score_range
    try:
      number = float(value)
    except ValueError:
      number = float('nan')
    if not low <= number <= high:
      raise GlueDataError(f'{path}:{line}: score {value!r} is not a number in [{low}, {high}]')
    return number
  if value not in task.labels:
    raise GlueDataError(
      f"{path}:{line}: label {value!r} is not one of {task.name}'s labels {list(task.labels)}"
    )
  return task.labels.index(value)


def score(task: Task, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
  """The task's metrics; predictions are label ids, or scores for regression."""
  functions = {
    'accuracy': scores.accuracy,
    'f1': scores.f1,
    'mcc': scores.matthews_corrcoef,
    'pearson': scores.pearson,
    'spearman': scores.spearman,
  }
  return {name: functions[name](labels, predictions) for name in task.metrics}


def constant_answer(task: Task, train_labels: np.ndarray) -> int | float:
  """The answer a model that ignores its input would give: the most frequent training
  label id (the smallest on a tie), or for regression the mean training score."""
  if task.is_regression:
    return float(np.mean(train_labels))
  return int(np.argmax(np.bincount(train_labels, minlength=task.num_outputs)))


def answer_name(task: Task, answer: int | float) -> str:
  """How GLUE spells a prediction: the label string, or the score to 3 decimals."""
  return f'{float(answer):.3f}' if task.is_regression else task.labels[int(answer)]


def write_submission(task: Task, path: str, ids: list[str], predictions: np.ndarray) -> None:
  """A GLUE leaderboard file: `index<TAB>prediction`, labels as GLUE spells them."""
  with open(path, 'w', encoding='utf-8') as f:
    f.write('index\tprediction\n')
    for row_id, prediction in zip(ids, predictions, strict=True):
      f.write(f'{row_id}\t{answer_name(task, prediction)}\n')
