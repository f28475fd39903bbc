"""SQuAD's windows, answer positions and decoding, on real SQuAD questions with
both tokenizers. (Its metrics: test_squad_metrics.py; the CLI run:
test_finetune.py.)"""

import json

import numpy as np
import pytest

from configs import finetune as finetune_config
from electra_jax.data import tokenizers
from electra_jax.finetune import squad, squad_metrics, tasks
from tests.conftest import data_dir


def _task(name: str, **settings) -> squad.SquadTask:
  config = finetune_config.get_config().squad
  config.update(settings)
  return squad.task_files(name, str(data_dir() / 'squad'), {}, config).task


def _oracle(task: squad.SquadTask, encoded) -> np.ndarray:
  """Outputs that put all their weight on the training targets."""
  n, length = encoded['input_ids'].shape
  outputs = np.zeros((n, length, task.num_outputs), np.float32)
  outputs[np.arange(n), encoded['targets'][:, 0], 0] = 10
  outputs[np.arange(n), encoded['targets'][:, 1], 1] = 10
  return outputs


@pytest.fixture(scope='module')
def wordpiece():
  return tokenizers.WordPieceTokenizer(str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt'))


def test_windows_hold_the_answers_they_point_at(wordpiece):
  task = _task('squad', max_seq_length=128, doc_stride=48)
  questions = squad.read_squad(
    str(data_dir() / 'squad' / 'train-v1.1.json'), unanswerable=False
  ).subset(np.arange(300))
  encoded = task.encode(questions, wordpiece, task.max_seq_length)
  assert encoded['input_ids'].shape[1] == 128
  assert len(encoded['example']) > len(questions)  # Long contexts take several windows.
  # Every context piece has its most context in exactly one window of its question.
  for i in range(len(questions)):
    rows = encoded['example'] == i
    starts = encoded['char_start'][rows]
    counted = encoded['max_context'][rows]
    assert set(starts[counted > 0].tolist()) == set(starts[starts >= 0].tolist())
  # A window's target is [CLS] or the answer, read back from the context's characters.
  predicted, _ = task.answers(_oracle(task, encoded), encoded, questions)
  right = [
    squad_metrics.exact_match(predicted[qid], answers[0])
    for qid, answers in zip(questions.ids, questions.answers, strict=True)
  ]
  # The rest are answers that end inside a word ('2' of '280') or are too long.
  assert np.mean(right) > 0.98, np.mean(right)


def test_sentencepiece_and_unanswerable_questions(tiny_tokenizer):
  task = _task('squad_v2', max_seq_length=128, doc_stride=48)
  questions = squad.read_squad(
    str(data_dir() / 'squad' / 'dev-v2.0-part-a.json'), unanswerable=True
  ).subset(np.arange(200))
  encoded = task.encode(questions, tiny_tokenizer, task.max_seq_length)
  outputs = _oracle(task, encoded)
  answerable = np.array([bool(questions.answers[i]) for i in encoded['example']])
  outputs[:, 0, 2] = np.where(answerable, 3.0, -3.0)
  result = task.evaluate(outputs, encoded, questions)
  assert result['no_ans_exact_match'] == 100.0
  assert result['has_ans_f1'] > 95, result
  assert 0 < result['best_f1_threshold'] or result['best_f1'] >= result['f1']
  # Answering nothing gets every unanswerable question right, and next to no other.
  constant = task.constant_baseline(questions, {'dev': questions})['dev']['dev']
  assert constant['no_ans_exact_match'] == 100.0 and constant['has_ans_f1'] < 2, constant


def test_a_hand_made_question_in_two_windows(wordpiece):
  context = 'Paris is the capital of France. ' * 6 + 'The river is the Seine.'
  start = context.index('Seine')
  questions = squad.Questions(['q'], ['Which river?'], [context], [['Seine']], [start])
  task = _task('squad', max_seq_length=32, doc_stride=16, max_query_length=8)
  encoded = task.encode(questions, wordpiece, task.max_seq_length)
  assert len(encoded['example']) > 1
  # Only the last window holds the answer; the others point at [CLS].
  targets = encoded['targets']
  assert (targets[:-1] == 0).all() and (targets[-1] > 0).all()
  row, (s, e) = len(targets) - 1, targets[-1]
  assert context[encoded['char_start'][row, s] : encoded['char_end'][row, e]] == 'Seine'
  assert wordpiece.tokens([encoded['input_ids'][row, s]]) == ['seine']


def test_files_errors_name_the_question(tmp_path, wordpiece):
  bad = {
    'data': [
      {
        'paragraphs': [
          {
            'context': 'abc',
            'qas': [{'id': 'x1', 'question': 'q?', 'answers': [{'text': 'zz', 'answer_start': 0}]}],
          }
        ]
      }
    ]
  }
  path = tmp_path / 'bad.json'
  path.write_text(json.dumps(bad))
  with pytest.raises(tasks.TaskDataError, match="question 'x1'.*not at character 0"):
    squad.read_squad(str(path), unanswerable=False)
  bad['data'][0]['paragraphs'][0]['qas'][0]['answers'] = []
  path.write_text(json.dumps(bad))
  with pytest.raises(tasks.TaskDataError, match="'x1'.*--task=squad_v2"):
    squad.read_squad(str(path), unanswerable=False)
