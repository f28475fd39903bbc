"""A fine-tuning task, whatever its files: its examples, model head, loss,
metrics, constant-answer baseline and predictions file.

`Task` is a sentence or sentence-pair classification or regression task;
GLUE's tasks (glue.py) and the user's own files (user_files.py) read their
files into its Examples. Token tagging (tagging.py) overrides the methods that
differ; the fine-tuning loop (train.py) calls only these methods.
"""

from collections.abc import Callable
import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax import errors, scores, storage
from electra_jax.config_lib import EncoderConfig
from electra_jax.finetune import features
from electra_jax.model import SequenceClassifier

Features = dict[str, np.ndarray]  # Model inputs (and 'targets'), one row per input.


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
  # Dev split -> name of a predictions file written for it (SQuAD's, which the
  # official evaluation script reads).
  dev_predictions: tuple[tuple[str, str], ...] = ()
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

  # What the fine-tuning loop calls; other kinds of task override them.

  def sequence_length(self, config: Any) -> tuple[str, int]:
    """(the config key, the value) of the length of the model's inputs."""
    return 'config.max_seq_length', config.max_seq_length

  def head(self, cfg: EncoderConfig, dropout_rate: float) -> nn.Module:
    return SequenceClassifier(cfg, self.num_outputs, dropout_rate)

  def apply(
    self,
    model: nn.Module,
    params: Any,
    batch: dict[str, jax.Array],
    *,
    train: bool,
    rngs=None,
    **head_args: Any,
  ) -> Any:
    """The head's outputs for a batch of model inputs (and, in training, 'targets');
    `head_args` go to the head as keywords."""
    return model.apply(
      {'params': params},
      batch['input_ids'],
      batch['token_type_ids'],
      batch['attention_mask'],
      not train,
      rngs=rngs,
      **head_args,
    )

  def encode(self, examples: Any, tokenizer: Any, max_seq_length: int, swap: bool = False):
    """Model inputs of `sequence_length` tokens, with 'targets' (what `loss`
    compares the outputs with) when the examples are labelled."""
    encoded = features.encode(examples, tokenizer, max_seq_length, swap=swap)
    if examples.labels is not None:
      encoded['targets'] = self.targets(examples.labels)
    return encoded

  def reference(self, examples: Any) -> Any:
    """What `evaluate` scores predictions against."""
    return examples.labels

  def targets(self, labels: np.ndarray) -> np.ndarray:
    """Class ids, or regression scores scaled to [0, 1] as the released code does."""
    if not self.is_regression:
      return labels.astype(np.int32)
    low, high = self.score_range
    return ((labels - low) / (high - low)).astype(np.float32)

  def predictions(self, outputs: np.ndarray) -> np.ndarray:
    """Label ids, or scores on the task's scale, from outputs trained on `targets`."""
    if not self.is_regression:
      return outputs.argmax(-1)
    low, high = self.score_range
    return outputs[:, 0] * (high - low) + low

  def loss(self, outputs: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean cross-entropy, or mean squared error for regression, in float32.
    `mask` is the batch's attention mask, for losses over tokens."""
    del mask
    if self.is_regression:
      return jnp.mean(jnp.square(outputs[:, 0] - targets))
    return jnp.mean(optax.softmax_cross_entropy_with_integer_labels(outputs, targets))

  def evaluate(self, outputs: np.ndarray, encoded: Features, reference: Any) -> dict[str, float]:
    del encoded
    return score(self, reference, self.predictions(outputs))

  def write_predictions(
    self, path: str, outputs: np.ndarray, encoded: Features, examples: Any
  ) -> None:
    """A split's predictions file (GLUE's submission format), at `path`.tsv."""
    del encoded
    write_submission(self, f'{path}.tsv', examples.ids, self.predictions(outputs))

  def constant_baseline(self, train: Any, dev: dict[str, Any]) -> dict[str, Any]:
    """What always giving the most frequent training answer scores on each dev
    split; `train` and `dev`'s values are `reference`s."""
    answer = constant_answer(self, train)
    return {
      'answer': answer_name(self, answer),
      'dev': {
        split: score(self, labels, np.full(len(labels), answer)) for split, labels in dev.items()
      },
    }


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
