"""A sentence or sentence-pair task, whatever its files: its examples, metrics, the
constant-answer baseline and the predictions file.

GLUE's tasks (glue.py) read their files into these.
"""

from collections.abc import Callable
import dataclasses

import numpy as np

from electra_jax import errors, scores, storage


class TaskDataError(errors.UserError):
  """A task file is missing or malformed; the message names file and line."""


@dataclasses.dataclass(frozen=True)
class Task:
  """What fine-tuning needs to know of a sentence or sentence-pair task."""

  name: str  # As --task takes it, lower case.
  labels: tuple[str, ...] | None  # Label strings in id order; None: regression.
  metrics: tuple[str, ...]  # The first is the task's main metric.
  dev_splits: tuple[str, ...] = ('dev',)
  # Test split -> name of its predictions file (GLUE's submission names).
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


@dataclasses.dataclass
class Examples:
  """One split of a task: texts, labels (ids, or floats for regression) and row ids."""

  text_a: list[str]
  text_b: list[str] | None
  labels: np.ndarray | None  # int32 label ids or float32 scores; None for test.
  ids: list[str]  # The test files' index column, used in submissions.

  def __len__(self) -> int:
    return len(self.text_a)

  def subset(self, keep: np.ndarray) -> 'Examples':
    return Examples(
      [self.text_a[i] for i in keep],
      None if self.text_b is None else [self.text_b[i] for i in keep],
      self.labels[keep],
      [self.ids[i] for i in keep],
    )


@dataclasses.dataclass(frozen=True)
class TaskFiles:
  """A task and the file each of its splits is read from."""

  task: Task
  paths: dict[str, str]  # Split -> file. A test split's file may be missing.
  reader: Callable[[str, str], Examples]  # (split, path) -> its examples.

  def read(self, split: str) -> Examples:
    return self.reader(split, self.paths[split])


def score(task: Task, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
  """The task's metrics; predictions are label ids, or scores for regression."""
  functions = {
    'accuracy': scores.accuracy,
    'f1': scores.f1,
    'macro_f1': scores.macro_f1,
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
  with storage.open_text(path, 'w') as f:
    f.write('index\tprediction\n')
    for row_id, prediction in zip(ids, predictions, strict=True):
      f.write(f'{row_id}\t{answer_name(task, prediction)}\n')
