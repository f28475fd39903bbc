"""Evaluation metrics on host arrays: GLUE's metrics, ROC AUC, and two AUCs that part a
replaced-token detector's use of context from what the token alone gives away.

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


def context_free_auc(labels: np.ndarray, token_ids: np.ndarray, folds: np.ndarray) -> float:
  """The ROC AUC of a replaced-token detector that reads only the token itself.

  Each token scores its id's replaced rate in the other fold (folds holds 0 or 1
  per token), shrunk toward that fold's overall rate by ten pseudo-tokens, so a
  token is never scored by its own label. A discriminator whose AUC is no higher
  has learned nothing that needs the context: which ids the generator
  over-samples, not which tokens fit the sentence. Rare ids need many tokens:
  the figure rises toward the best context-free detector's as they grow.
  """
  labels = np.asarray(labels).astype(np.float64).ravel()
  token_ids = np.asarray(token_ids).astype(np.int64).ravel()
  folds = np.asarray(folds).astype(bool).ravel()
  size = int(token_ids.max()) + 1 if token_ids.size else 0
  scores = np.empty_like(labels)
  for fold in (False, True):
    other = folds != fold
    replaced = np.bincount(token_ids[other], weights=labels[other], minlength=size)
    seen = np.bincount(token_ids[other], minlength=size)
    prior = labels[other].mean() if other.any() else 0.0
    here = folds == fold
    scores[here] = ((replaced + 10 * prior) / (seen + 10.0))[token_ids[here]]
  return roc_auc(labels, scores)


def same_token_auc(labels: np.ndarray, scores: np.ndarray, token_ids: np.ndarray) -> float:
  """The probability that a replaced token scores above an original token of the same
  id, ties counting half: ROC AUC over those pairs only.

  A detector that reads only the token scores 0.5 here, however well it ranks rare
  ids above common ones; what lifts this figure above 0.5 comes from the context.
  """
  labels = np.asarray(labels).astype(bool).ravel()
  scores = np.asarray(scores, np.float64).ravel()
  token_ids = np.asarray(token_ids).astype(np.int64).ravel()
  order = np.lexsort((scores, token_ids))
  ids, sorted_scores, positive = token_ids[order], scores[order], labels[order]
  position = np.arange(len(ids))
  new_id = np.r_[True, ids[1:] != ids[:-1]]
  new_tie = new_id | np.r_[True, sorted_scores[1:] != sorted_scores[:-1]]
  # Each token's 1-based rank among its id's tokens, ties sharing their mean rank.
  id_start = np.maximum.accumulate(np.where(new_id, position, 0))
  tie_start = np.flatnonzero(new_tie)
  tie_end = np.r_[tie_start[1:], len(ids)]
  rank = np.repeat((tie_start + 1 + tie_end) / 2, tie_end - tie_start) - id_start
  group = np.cumsum(new_id) - 1
  positives = np.bincount(group, weights=positive)
  negatives = np.bincount(group, weights=~positive)
  pairs = np.sum(positives * negatives)
  if not pairs:
    return float('nan')
  # An id's replaced tokens outrank p (p + 1) / 2 pairs among themselves; the rest
  # of their rank sum counts the original tokens below them (0 for an id of one kind).
  rank_sums = np.bincount(group, weights=np.where(positive, rank, 0.0))
  return float(np.sum(rank_sums - positives * (positives + 1) / 2) / pairs)
