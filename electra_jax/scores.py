"""Evaluation metrics on host arrays: GLUE's metrics and ROC AUC.

Plain numpy, computed over a whole evaluation set at once (never averaged
over batches), with the definitions GLUE uses: Matthews correlation for
CoLA, F1 of the positive class for MRPC and QQP, Pearson and Spearman
correlation for STS-B, accuracy elsewhere; and macro-averaged F1 for the
user's own classification tasks.
"""

import numpy as np


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def _confusion(labels: np.ndarray, predictions: np.ndarray) -> tuple[float, float, float, float]:
  """(true positives, false positives, false negatives, true negatives); 1 is positive."""
  y, p = np.asarray(labels) == 1, np.asarray(predictions) == 1
  return (
    float(np.sum(y & p)),
    float(np.sum(~y & p)),
    float(np.sum(y & ~p)),
    float(np.sum(~y & ~p)),
  )


def f1(labels: np.ndarray, predictions: np.ndarray) -> float:
  """F1 of the positive class (label 1); 0 when nothing is predicted or present."""
  tp, fp, fn, _ = _confusion(labels, predictions)
  return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def macro_f1(labels: np.ndarray, predictions: np.ndarray) -> float:
  """The unweighted mean of each class's F1 over the classes that occur in the
  labels or the predictions (scikit-learn's average='macro')."""
  labels, predictions = np.asarray(labels), np.asarray(predictions)
  per_class = []
  for c in np.union1d(labels, predictions):
    tp = np.sum((labels == c) & (predictions == c))
    wrong = np.sum((labels == c) != (predictions == c))  # False positives and negatives.
    per_class.append(2 * tp / (2 * tp + wrong))
  return float(np.mean(per_class))


def matthews_corrcoef(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Matthews correlation of binary labels; 0 when a row or column is empty."""
  tp, fp, fn, tn = _confusion(labels, predictions)
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x: np.ndarray, y: np.ndarray) -> float:
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  dx, dy = x - x.mean(), y - y.mean()
  denominator = np.sqrt(np.sum(dx * dx) * np.sum(dy * dy))
  return float(np.sum(dx * dy) / denominator) if denominator else 0.0


def _average_ranks(x: np.ndarray) -> np.ndarray:
  """1-based ranks, ties sharing the mean of the ranks they span."""
  x = np.asarray(x)
  order = np.argsort(x, kind='stable')
  sorted_x = x[order]
  # Start of each run of equal values, and the mean rank of each run.
  starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
  ends = np.r_[starts[1:], len(x)]
  run_ranks = (starts + 1 + ends) / 2
  ranks = np.empty(len(x), np.float64)
  ranks[order] = np.repeat(run_ranks, ends - starts)
  return ranks


def spearman(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson correlation of the average ranks."""
  return pearson(_average_ranks(x), _average_ranks(y))


def roc_auc(labels: np.ndarray, scores: np.ndarray) -> float:
  """Area under the ROC curve: the probability that a random positive scores
  above a random negative, ties counting half (the Mann-Whitney statistic)."""
  labels = np.asarray(labels).astype(bool).ravel()
  ranks = _average_ranks(np.asarray(scores, np.float64).ravel())
  positives, negatives = int(labels.sum()), int((~labels).sum())
  if not positives or not negatives:
    return float('nan')
  rank_sum = ranks[labels].sum()
  return float((rank_sum - positives * (positives + 1) / 2) / (positives * negatives))
