"""SQuAD's windows, answer positions and decoding, on real SQuAD questions with
both tokenizers. (Its metrics: test_squad_metrics.py; the CLI run:
test_finetune.py.)"""

import json

import jax
import numpy as np
import pytest

from configs import finetune as finetune_config
from configs import tiny
from electra_jax import config_lib, model
from electra_jax.data import tokenizers
from electra_jax.finetune import squad, squad_metrics, tasks
from tests.conftest import data_dir


def _task(name: str, **settings) -> squad.SquadTask:
  config = finetune_config.get_config().squad
  config.update(settings)
  return squad.task_files(name, str(data_dir() / 'squad'), {}, config).task


def _oracle(task: squad.SquadTask, encoded, answerable=None):
  """Either head's outputs that put all their weight on the training targets (and
  answerability logits of +3 or -3 where `answerable` says)."""
  n, length = encoded['input_ids'].shape
  start, end = encoded['targets'][:, 0], encoded['targets'][:, 1]
  logit = np.where(answerable, 3.0, -3.0) if answerable is not None else None
  if task.head_kind == 'independent':
    outputs = np.zeros((n, length, task.num_outputs), np.float32)
    outputs[np.arange(n), start, 0] = 10
    outputs[np.arange(n), end, 1] = 10
    if logit is not None:
      outputs[:, 0, 2] = logit
    return outputs
  # The beam: the target first, then other places, all far less likely.
  k = task.beam_size
  others = np.arange(1, k + 1)
  outputs = {
    'starts': np.where(np.arange(k) == 0, start[:, None], others),
    'start_log_probs': np.where(np.arange(k) == 0, 0.0, -20.0) + np.zeros((n, 1)),
    'ends': np.where(np.arange(k) == 0, end[:, None, None], others) + np.zeros((n, k, 1), int),
    'end_log_probs': np.where(np.arange(k) == 0, 0.0, -20.0) + np.zeros((n, k, 1)),
  }
  if logit is not None:
    outputs['answerable'] = logit
  return outputs


HEADS = pytest.mark.parametrize('head', squad.HEADS)


@pytest.fixture(scope='module')
def wordpiece():
  return tokenizers.WordPieceTokenizer(str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt'))


@HEADS
def test_windows_hold_the_answers_they_point_at(wordpiece, head):
  task = _task('squad', max_seq_length=128, doc_stride=48, head=head)
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


@HEADS
def test_sentencepiece_and_unanswerable_questions(tiny_tokenizer, head):
  task = _task('squad_v2', max_seq_length=128, doc_stride=48, head=head)
  questions = squad.read_squad(
    str(data_dir() / 'squad' / 'dev-v2.0-part-a.json'), unanswerable=True
  ).subset(np.arange(200))
  encoded = task.encode(questions, tiny_tokenizer, task.max_seq_length)
  answerable = np.array([bool(questions.answers[i]) for i in encoded['example']])
  outputs = _oracle(task, encoded, answerable)
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


def test_the_released_head_conditions_the_end_on_the_start():
  cfg = config_lib.discriminator_config(tiny.get_config())
  head = model.SpanPredictor(cfg, unanswerable=True, beam_size=5)
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 1000, (3, 24))
  types = np.zeros_like(ids)
  types[:, 8:] = 1  # [CLS] and a 7-piece question, then the context.
  mask = np.ones_like(ids)
  mask[1, 20:] = 0
  # Jitted: op by op, each of the head's operations would compile on its own.
  params = jax.jit(head.init)(jax.random.key(0), ids, types, mask)['params']
  predict = jax.jit(lambda p, *inputs: head.apply({'params': p}, *inputs))
  beam = jax.device_get(predict(params, ids, types, mask))
  assert beam['starts'].shape == (3, 5) and beam['ends'].shape == (3, 5, 5)
  assert beam['answerable'].shape == (3,)
  # Every start and end of the beam is in the context or at [CLS], never in the
  # question or the padding.
  allowed = (mask * types > 0) | (np.arange(24) == 0)
  for places in (beam['starts'], beam['ends']):
    rows = np.arange(3).reshape((3,) + (1,) * (places.ndim - 1))
    assert allowed[rows, places].all()
  # Training scores the ends of the gold start; prediction, of each start in the
  # beam: the same log-probabilities.
  start = beam['starts'][:, 2]
  trained = jax.jit(lambda p: head.apply({'params': p}, ids, types, mask, True, start))(params)
  log_probs = np.asarray(jax.nn.log_softmax(trained['end']))
  np.testing.assert_allclose(
    np.take_along_axis(log_probs, beam['ends'][:, 2], 1), beam['end_log_probs'][:, 2], atol=1e-5
  )
  # A batch trimmed shorter than the beam fills it with [CLS], which holds no answer.
  short = jax.device_get(predict(params, ids[:, :3], types[:, :3], mask[:, :3]))
  assert (short['starts'][:, 3:] == 0).all() and np.isneginf(short['start_log_probs'][:, 3:]).all()


def test_an_unknown_head_is_refused():
  with pytest.raises(config_lib.ConfigError, match="config.squad.head: 'xlnet' is not one of"):
    _task('squad', head='xlnet')
