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

from etils import epath
import numpy as np

from electra_jax import storage
from electra_jax.finetune import tasks


@dataclasses.dataclass(frozen=True)
class Columns:
  """Where one split's fields are: column indices (negative counts from the end)."""

  text_a: int
  text_b: int | None
  label: int | None  # None for test files, which have no labels.
  header: bool  # Whether the first line is a header.


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlueTask(tasks.Task):
  """A GLUE task and where its fields are in the files GLUE ships."""

  folder: str  # The task's folder in GLUE's layout.
  labelled: Columns  # train and dev files.
  test: Columns


def _pair(a, b, label, test_a, test_b, header=True):
  return dict(labelled=Columns(a, b, label, header), test=Columns(test_a, test_b, None, True))


TASKS: dict[str, GlueTask] = {
  task.name: task
  for task in (
    GlueTask(
      'cola',
      ('0', '1'),
      ('mcc',),
      folder='CoLA',
      labelled=Columns(3, None, 1, header=False),
      test=Columns(1, None, None, header=True),
      test_splits=(('test', 'CoLA'),),
    ),
    GlueTask(
      'sst-2',
      ('0', '1'),
      ('accuracy',),
      folder='SST-2',
      **_pair(0, None, 1, 1, None),
      test_splits=(('test', 'SST-2'),),
    ),
    GlueTask(
      'mrpc',
      ('0', '1'),
      ('f1', 'accuracy'),
      folder='MRPC',
      **_pair(3, 4, 0, 3, 4),
      test_splits=(('test', 'MRPC'),),
      symmetric=True,
    ),
    GlueTask(
      'sts-b',
      None,
      ('pearson', 'spearman'),
      folder='STS-B',
      **_pair(-3, -2, -1, -2, -1),
      test_splits=(('test', 'STS-B'),),
      symmetric=True,
    ),
    GlueTask(
      'qqp',
      ('0', '1'),
      ('f1', 'accuracy'),
      folder='QQP',
      **_pair(3, 4, 5, 1, 2),
      test_splits=(('test', 'QQP'),),
    ),
    GlueTask(
      'mnli',
      ('contradiction', 'entailment', 'neutral'),
      ('accuracy',),
      folder='MNLI',
      **_pair(8, 9, -1, 8, 9),
      dev_splits=('dev_matched', 'dev_mismatched'),
      test_splits=(('test_matched', 'MNLI-m'), ('test_mismatched', 'MNLI-mm')),
    ),
    GlueTask(
      'qnli',
      ('entailment', 'not_entailment'),
      ('accuracy',),
      folder='QNLI',
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'QNLI'),),
    ),
    GlueTask(
      'rte',
      ('entailment', 'not_entailment'),
      ('accuracy',),
      folder='RTE',
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'RTE'),),
    ),
    GlueTask(
      'wnli',
      ('0', '1'),
      ('accuracy',),
      folder='WNLI',
      **_pair(1, 2, 3, 1, 2),
      test_splits=(('test', 'WNLI'),),
    ),
  )
}
# Other spellings people use for the same tasks.
_ALIASES = {'sst2': 'sst-2', 'sst': 'sst-2', 'stsb': 'sts-b', 'sts': 'sts-b'}


def get_task(name: str) -> GlueTask:
  key = name.lower()
  key = _ALIASES.get(key, key)
  if key not in TASKS:
    raise tasks.TaskDataError(f'--task={name}: not a GLUE task; choose one of {", ".join(TASKS)}')
  return TASKS[key]


def _read_rows(path: str) -> list[list[str]]:
  if not epath.Path(path).exists():
    raise tasks.TaskDataError(
      f'{path}: no such file; --data_dir must hold the task folders as GLUE '
      'ships them (e.g. glue_data/CoLA/train.tsv), or name the file with --train_file, '
      '--dev_file or --test_file'
    )
  try:
    with storage.open_text(path, encoding='utf-8-sig', newline='') as f:  # MRPC starts with a BOM.
      # GLUE's files are not quoted: a '"' is part of the text.
      return list(csv.reader(f, delimiter='\t', quoting=csv.QUOTE_NONE))
  except UnicodeDecodeError as e:
    raise tasks.TaskDataError(f'{path}: not UTF-8 ({e}); GLUE files are UTF-8 text') from None


def task_files(task: GlueTask, glue_dir: str | None, files: dict[str, str]) -> tasks.TaskFiles:
  """The task's splits in glue_dir's layout, with `files` ('train', 'dev', 'test')
  naming other files."""
  for kind, splits in (('dev', task.dev_splits), ('test', [s for s, _ in task.test_splits])):
    if kind in files and len(splits) > 1:
      raise tasks.TaskDataError(
        f'--{kind}_file: {task.name} has {len(splits)} {kind} files ({", ".join(splits)}); '
        f'put them in --data_dir as {task.folder}/{splits[0]}.tsv, ...'
      )
  splits = ['train', *task.dev_splits, *(split for split, _ in task.test_splits)]
  paths = {}
  for split in splits:
    kind = 'test' if split.startswith('test') else 'dev' if split.startswith('dev') else 'train'
    if kind in files:
      paths[split] = files[kind]
    elif glue_dir is None:
      raise tasks.TaskDataError(
        f'--data_dir: not given, and no --{kind}_file either; give the folder that holds '
        f'{task.folder}/{split}.tsv'
      )
    else:
      paths[split] = os.path.join(glue_dir, task.folder, f'{split}.tsv')
  return tasks.TaskFiles(task, paths, lambda split, path: read_file(task, split, path))


def read_file(task: GlueTask, split: str, path: str) -> tasks.Examples:
  """Reads the file of `split` (train, dev, dev_matched, test, ...) of `task`."""
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
      raise tasks.TaskDataError(
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
    raise tasks.TaskDataError(f'{path}: no examples; the file is empty')
  dtype = np.float32 if task.is_regression else np.int32
  return tasks.Examples(
    text_a,
    text_b if columns.text_b is not None else None,
    np.asarray(labels, dtype) if columns.label is not None else None,
    ids,
  )


def _label(task: GlueTask, value: str, path: str, line: int) -> float | int:
  if task.is_regression:
    low, high = task.score_range
    try:
      number = float(value)
    except ValueError:
      number = float('nan')
    if not low <= number <= high:
      raise tasks.TaskDataError(
        f'{path}:{line}: score {value!r} is not a number in [{low}, {high}]'
      )
    return number
  if value not in task.labels:
    raise tasks.TaskDataError(
      f"{path}:{line}: label {value!r} is not one of {task.name}'s labels {list(task.labels)}"
    )
  return task.labels.index(value)
