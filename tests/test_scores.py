"""GLUE metrics, macro F1 and ROC AUC against hand-computed values and scipy."""

import math

import numpy as np
import pytest
from scipy import stats

from electra_jax import scores


def test_binary_metrics_on_a_worked_example():
  # tp=3, fp=1, fn=2, tn=4.
  labels = np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0])
  predictions = np.array([1, 1, 1, 0, 0, 1, 0, 0, 0, 0])
  assert scores.accuracy(labels, predictions) == 0.7
  assert scores.f1(labels, predictions) == pytest.approx(2 * 3 / (2 * 3 + 1 + 2))
  assert scores.matthews_corrcoef(labels, predictions) == pytest.approx(
    (3 * 4 - 1 * 2) / math.sqrt(4 * 5 * 5 * 6)
  )


def test_degenerate_binary_cases():
  ones = np.ones(6, int)
  # A constant prediction has no correlation (CoLA's majority baseline scores 0).
  assert scores.matthews_corrcoef(np.array([0, 1, 0, 1, 1, 0]), ones) == 0.0
  assert scores.matthews_corrcoef(ones, ones) == 0.0
  assert scores.matthews_corrcoef(np.array([0, 1, 1]), np.array([0, 1, 1])) == 1.0
  assert scores.matthews_corrcoef(np.array([0, 1, 1]), np.array([1, 0, 0])) == -1.0
  assert scores.f1(np.zeros(4, int), np.zeros(4, int)) == 0.0


def test_macro_f1_by_hand():
  # Class 0: tp=1, fp=1, fn=1 -> 1/2. Class 1: tp=2, fp=0, fn=1 -> 4/5.
  # Class 2: tp=0, fp=1, fn=0 -> 0 (predicted only). Class 3 occurs nowhere.
  labels = np.array([0, 0, 1, 1, 1])
  predictions = np.array([0, 2, 1, 1, 0])
  assert scores.macro_f1(labels, predictions) == pytest.approx((1 / 2 + 4 / 5 + 0) / 3)
  # On two classes it is the mean of both classes' F1, not the positive one's.
  labels, predictions = (
    np.array([1, 1, 1, 1, 1, 0, 0, 0, 0, 0]),
    np.array([1, 1, 1, 0, 0, 1] + [0] * 4),
  )
  f1_1, f1_0 = 2 * 3 / (2 * 3 + 3), 2 * 4 / (2 * 4 + 3)
  assert scores.macro_f1(labels, predictions) == pytest.approx((f1_1 + f1_0) / 2)
  assert scores.macro_f1(np.array([2, 2]), np.array([2, 2])) == 1.0


def test_correlations_match_scipy_with_ties():
  rng = np.random.default_rng(0)
  x = rng.integers(0, 6, 200).astype(float)  # Many ties, as STS-B's scores.
  y = x + rng.normal(0, 2, 200)
  assert scores.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
  assert scores.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
  assert scores.spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
  assert scores.pearson([1, 1, 1], [1, 2, 3]) == 0.0


def test_roc_auc():
  assert scores.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == 0.75
  assert scores.roc_auc([0, 1], [0.5, 0.5]) == 0.5  # A tie counts half.
  assert scores.roc_auc([1, 1, 0], [3, 2, 1]) == 1.0
  assert math.isnan(scores.roc_auc([1, 1], [0.2, 0.3]))
  rng = np.random.default_rng(1)
  labels = rng.random(1000) < 0.3
  logits = labels + rng.normal(0, 1, 1000)
  # The Mann-Whitney U statistic over positives, normalised, is the AUC.
  u = stats.mannwhitneyu(logits[labels], logits[~labels]).statistic
  assert scores.roc_auc(labels, logits) == pytest.approx(u / (labels.sum() * (~labels).sum()))


def test_context_free_auc_reads_the_token_alone():
  rng = np.random.default_rng(2)
  ids = rng.integers(0, 50, 20_000)
  folds = np.arange(ids.size) % 2
  # Labels that follow the id: every token of ids 0-9 replaced, no other.
  assert scores.context_free_auc(ids < 10, ids, folds) == 1.0
  # Labels that ignore it: near chance.
  coin = rng.random(ids.size) < 0.15
  assert abs(scores.context_free_auc(coin, ids, folds) - 0.5) < 0.02
  # A replaced rate that rises with the id, as a generator that over-samples some ids.
  rate = 0.05 + 0.2 * ids / 49
  labels = rng.random(ids.size) < rate
  best = scores.roc_auc(labels, rate)  # The true rate: the best context-free detector.
  assert abs(scores.context_free_auc(labels, ids, folds) - best) < 0.01


def test_context_free_auc_never_scores_a_token_by_its_own_label():
  # Every id occurs once: the other fold knows nothing of it, so each token scores
  # its fold's prior, and with equal priors that is chance. Scored in-sample,
  # these labels would separate perfectly.
  ids = np.arange(1000)
  folds = ids % 2
  labels = (ids // 2) % 2 == 0
  assert scores.context_free_auc(labels, ids, folds) == 0.5


def test_same_token_auc_counts_pairs_of_one_id():
  rng = np.random.default_rng(3)
  ids = rng.integers(0, 30, 5000)
  labels = rng.random(ids.size) < 0.05 + 0.02 * ids
  # Scores that follow the id alone rank well overall but no better than chance
  # between two tokens of one id.
  assert scores.roc_auc(labels, ids) > 0.7
  assert scores.same_token_auc(labels, ids.astype(float), ids) == 0.5
  # Scores with a signal inside each id: the pooled Mann-Whitney count of each id's pairs.
  noisy = labels + rng.normal(0, 1, ids.size) + 0.3 * ids
  wins = pairs = 0.0
  for v in np.unique(ids):
    here = ids == v
    positive, negative = noisy[here & labels], noisy[here & ~labels]
    wins += np.sum(positive[:, None] > negative[None, :])
    wins += 0.5 * np.sum(positive[:, None] == negative[None, :])
    pairs += positive.size * negative.size
  assert scores.same_token_auc(labels, noisy, ids) == pytest.approx(wins / pairs, abs=1e-12)
  # Ties count half; an id with no replaced token, or no original one, adds no pair.
  assert scores.same_token_auc([1, 0, 1, 0, 1], [2.0, 2.0, 5.0, 1.0, 9.0], [0, 0, 1, 1, 2]) == 0.75
  assert math.isnan(scores.same_token_auc([1, 0], [0.3, 0.1], [4, 5]))
