"""SQuAD's metrics: exact match and token F1, as the official v1.1 and v2.0 scripts
define them.

An answer is normalised by lower-casing, removing punctuation (every character
of Python's string.punctuation), the articles "a", "an" and "the" as words,
and collapsing whitespace. A question scores the maximum over its gold
answers. In v2.0 a question without answers scores 1 only for the empty
prediction, and the scores are also given over the answerable ("HasAns") and
unanswerable ("NoAns") questions. With a null threshold, a prediction whose
null score (the null odds) is above it becomes the empty answer; the best
threshold is the one that maximises the score on the set it is chosen on.
"""

import collections
from collections.abc import Mapping
import re
import string

_ARTICLES = re.compile(r'\b(a|an|the)\b')
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
  text = ''.join(c for c in text.lower() if c not in _PUNCTUATION)
  return ' '.join(_ARTICLES.sub(' ', text).split())


def exact_match(prediction: str, gold: str) -> float:
  return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
  """Token F1 after normalisation; an empty side scores 1 only against an empty one."""
  predicted, wanted = normalize_answer(prediction).split(), normalize_answer(gold).split()
  if not predicted or not wanted:
    return float(predicted == wanted)
  common = sum((collections.Counter(predicted) & collections.Counter(wanted)).values())
  if not common:
    return 0.0
  precision, recall = common / len(predicted), common / len(wanted)
  return 2 * precision * recall / (precision + recall)


def _question_scores(prediction: str, golds: list[str]) -> tuple[float, float]:
  golds = golds or ['']  # Unanswerable: only the empty answer is right.
  return max(exact_match(prediction, g) for g in golds), max(f1(prediction, g) for g in golds)


def evaluate(golds: Mapping[str, list[str]], predictions: Mapping[str, str]) -> dict[str, float]:
  """`golds`: question id -> gold answer texts (empty: unanswerable). Returns
  exact_match and f1 in percent, as the official scripts print them, and with
  unanswerable questions also has_ans_* and no_ans_* over each kind. A question
  without a prediction scores 0."""
  scores = {
    qid: _question_scores(predictions[qid], g) if qid in predictions else (0.0, 0.0)
    for qid, g in golds.items()
  }

  def mean(ids: list[str]) -> dict[str, float]:
    return {
      'exact_match': 100 * sum(scores[i][0] for i in ids) / len(ids),
      'f1': 100 * sum(scores[i][1] for i in ids) / len(ids),
    }

  result = mean(list(golds))
  answerable = [qid for qid, g in golds.items() if g]
  unanswerable = [qid for qid, g in golds.items() if not g]
  if unanswerable:
    for name, ids in (('has_ans', answerable), ('no_ans', unanswerable)):
      if ids:
        result.update({f'{name}_{k}': v for k, v in mean(ids).items()})
  return result


def apply_null_threshold(
  predictions: Mapping[str, str], null_odds: Mapping[str, float], threshold: float
) -> dict[str, str]:
  """The predictions with every answer whose null odds exceed `threshold` made empty."""
  return {qid: '' if null_odds[qid] > threshold else text for qid, text in predictions.items()}


def best_null_threshold(
  golds: Mapping[str, list[str]],
  predictions: Mapping[str, str],
  null_odds: Mapping[str, float],
  metric: str = 'f1',
) -> tuple[float, float]:
  """(the best score in percent, the threshold that gives it), as the official v2.0
  script searches: start from answering nothing, then answer questions in order
  of rising null odds, keeping the best running score."""
  value = exact_match if metric == 'exact_match' else f1
  # Answering nothing: every unanswerable question is right.
  score = best = sum(not g for g in golds.values())
  threshold = 0.0
  for qid in sorted(golds, key=lambda q: null_odds[q]):
    answered = max(value(predictions[qid], g) for g in golds[qid] or [''])
    empty = float(not golds[qid])
    score += answered - empty
    if score > best:
      best, threshold = score, null_odds[qid]
  return 100 * best / len(golds), threshold
