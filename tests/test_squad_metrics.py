"""SQuAD's exact match and F1 against hand-computed cases and the official rules."""

import pytest

from electra_jax.finetune import squad_metrics as m


def test_normalisation_follows_the_official_rules():
  assert m.normalize_answer('The  Cat, sat!') == 'cat sat'
  assert m.normalize_answer('An apple a day') == 'apple day'
  # Articles go only as whole words; punctuation anywhere, even inside words.
  assert m.normalize_answer('Theory of anatomy') == 'theory of anatomy'
  assert m.normalize_answer("Rock'n'roll (1950s)") == 'rocknroll 1950s'
  assert m.normalize_answer('  ') == ''


def test_exact_match_and_f1_by_hand():
  assert m.exact_match('the Eiffel Tower', 'Eiffel tower.') == 1.0
  assert m.exact_match('Eiffel', 'Eiffel Tower') == 0.0
  # 2 common tokens; precision 2/3, recall 2/2.
  assert m.f1('the big red ball', 'red ball') == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
  # Repeated tokens count as often as both sides hold them.
  assert m.f1('paris paris', 'paris') == pytest.approx(2 * 0.5 * 1 / 1.5)
  assert m.f1('london', 'paris') == 0.0
  assert m.f1('', '') == 1.0 and m.f1('the', '') == 1.0 and m.f1('paris', '') == 0.0


def test_v11_takes_the_best_gold_and_scores_missing_predictions_zero():
  golds = {'q1': ['Denver Broncos', 'The Broncos'], 'q2': ['1990'], 'q3': ['Santa Clara']}
  predictions = {'q1': 'broncos', 'q2': 'in 1990'}
  # q1: EM 1 against "The Broncos". q2: EM 0, F1 2/3. q3: missing.
  assert m.evaluate(golds, predictions) == pytest.approx(
    {'exact_match': 100 / 3, 'f1': 100 * (1 + 2 / 3) / 3}
  )


def test_v20_breakdown_and_null_threshold():
  golds = {'a': ['Normandy'], 'b': ['10th century'], 'c': [], 'd': []}
  predictions = {'a': 'Normandy', 'b': 'the 10th', 'c': '', 'd': 'France'}
  got = m.evaluate(golds, predictions)
  # a: 1/1; b: EM 0, F1 2*(1/1)*(1/2)/(1.5) = 2/3; c: right (empty); d: wrong.
  assert got == pytest.approx(
    {
      'exact_match': 50.0,
      'f1': 100 * (1 + 2 / 3 + 1) / 4,
      'has_ans_exact_match': 50.0,
      'has_ans_f1': 100 * (1 + 2 / 3) / 2,
      'no_ans_exact_match': 50.0,
      'no_ans_f1': 50.0,
    }
  )
  # Null odds: answering in order a (0.1), b (0.4), d (0.6), c (0.9).
  odds = {'a': 0.1, 'b': 0.4, 'c': 0.9, 'd': 0.6}
  predictions['c'] = 'something'
  # Nothing answered: 2 of 4 (the unanswerable). +a: 3; +b: 3 + 2/3; +d: 2 + 2/3; +c: ...
  best, threshold = m.best_null_threshold(golds, predictions, odds)
  assert best == pytest.approx(100 * (3 + 2 / 3) / 4) and threshold == 0.4
  assert m.best_null_threshold(golds, predictions, odds, 'exact_match') == (75.0, 0.1)
  thresholded = m.apply_null_threshold(predictions, odds, threshold)
  assert thresholded == {'a': 'Normandy', 'b': 'the 10th', 'c': '', 'd': ''}
  assert m.evaluate(golds, thresholded)['f1'] == pytest.approx(best)
