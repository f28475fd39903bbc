"""GLUE task files: the real CoLA, SST-2, MRPC and WNLI, the other layouts, bad rows,
model inputs and submission files."""

import jax
import numpy as np
import pytest

from configs import tiny
from electra_jax import config_lib
from electra_jax.data import tokenizers
from electra_jax.finetune import features, glue, tasks
from electra_jax.model import SequenceClassifier
from tests.conftest import data_dir


def _glue() -> str:
  return str(data_dir() / 'glue')


def _read(task: str, split: str, glue_dir: str | None = None) -> tasks.Examples:
  """One split, through the layout fine-tuning reads (glue_dir: the real data by default)."""
  return glue.task_files(glue.get_task(task), glue_dir or _glue(), {}).read(split)


@pytest.mark.parametrize(
  'task, split, rows, labelled',
  [
    ('cola', 'train', 8551, True),
    ('cola', 'dev', 1043, True),
    ('cola', 'test', 1063, False),
    ('SST-2', 'train', 67349, True),
    ('sst2', 'dev', 872, True),
    ('sst-2', 'test', 1821, False),
    ('MRPC', 'train', 3668, True),
    ('mrpc', 'dev', 408, True),
    ('mrpc', 'test', 1725, False),
    ('wnli', 'train', 635, True),
    ('wnli', 'dev', 71, True),
    ('wnli', 'test', 146, False),
  ],
)
def test_real_task_files(task, split, rows, labelled):
  t = glue.get_task(task)
  examples = _read(task, split)
  assert len(examples) == rows
  assert (examples.text_b is not None) == (t.name in ('mrpc', 'wnli'))
  if labelled:
    assert set(np.unique(examples.labels)) == {0, 1}
  else:
    assert examples.labels is None and examples.ids[:2] == ['0', '1']


def test_real_rows_land_in_the_right_fields():
  cola = _read('cola', 'train')
  assert cola.text_a[0].startswith("Our friends won't buy this analysis")
  assert cola.labels[0] == 1
  mrpc = _read('mrpc', 'train')  # Its header has a BOM.
  assert mrpc.text_a[0].startswith('Amrozi accused his brother')
  assert mrpc.text_b[0].startswith('Referring to him as only')
  assert mrpc.labels[:2].tolist() == [1, 0]


def _write(tmp_path, folder: str, name: str, lines: list[str]) -> str:
  (tmp_path / folder).mkdir(exist_ok=True)
  (tmp_path / folder / name).write_text('\n'.join(lines) + '\n')
  return str(tmp_path)


def test_other_layouts_as_glue_ships_them(tmp_path):
  _write(
    tmp_path,
    'STS-B',
    'dev.tsv',
    [
      'index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore',
      '0\tmain-captions\tMSRvid\t2012test\t0000\tnone\tnone\tA man plays.\tA man is playing.\t4.6',
    ],
  )
  sts = _read('STS-B', 'dev', str(tmp_path))
  assert (sts.text_a, sts.text_b) == (['A man plays.'], ['A man is playing.'])
  assert sts.labels.dtype == np.float32 and sts.labels[0] == pytest.approx(4.6)

  header = '\t'.join(
    [
      'index',
      'promptID',
      'pairID',
      'genre',
      's1b',
      's2b',
      's1p',
      's2p',
      'sentence1',
      'sentence2',
      'label1',
      'gold_label',
    ]
  )
  _write(
    tmp_path,
    'MNLI',
    'dev_mismatched.tsv',
    [
      header,
      '\t'.join(
        ['0', '1', '2', 'g', 'x', 'x', 'x', 'x', 'A cat.', 'An animal.', 'entailment', 'entailment']
      ),
    ],
  )
  mnli = _read('mnli', 'dev_mismatched', str(tmp_path))
  assert mnli.text_b == ['An animal.'] and mnli.labels.tolist() == [1]

  _write(tmp_path, 'QQP', 'test.tsv', ['id\tquestion1\tquestion2', '7\tWhy?\tHow?'])
  qqp = _read('qqp', 'test', str(tmp_path))
  assert (qqp.ids, qqp.text_a, qqp.text_b) == (['7'], ['Why?'], ['How?'])
  _write(
    tmp_path,
    'RTE',
    'train.tsv',
    ['index\tsentence1\tsentence2\tlabel', '0\tIt rains.\tIt is dry.\tnot_entailment'],
  )
  rte = _read('rte', 'train', str(tmp_path))
  assert rte.labels.tolist() == [1]


@pytest.mark.parametrize(
  'lines, message',
  [
    (
      ['index\tsentence1\tsentence2\tlabel', '0\tonly two fields'],
      r'RTE/train.tsv:2: 2 tab-separated fields, but rte needs at least 4',
    ),
    (
      ['index\tsentence1\tsentence2\tlabel', '0\ta\tb\tentailment', '1\ta\tb\tmaybe'],
      r"RTE/train.tsv:3: label 'maybe' is not one of rte's labels",
    ),
    (['index\tsentence1\tsentence2\tlabel'], r'RTE/train.tsv: no examples'),
  ],
)
def test_bad_rows_name_file_and_line(tmp_path, lines, message):
  _write(tmp_path, 'RTE', 'train.tsv', lines)
  with pytest.raises(tasks.TaskDataError, match=message):
    _read('rte', 'train', str(tmp_path))


def test_bad_scores_missing_files_and_unknown_tasks(tmp_path):
  _write(
    tmp_path,
    'STS-B',
    'train.tsv',
    ['h\th\th\th\th\th\th\th\th\th', '0\tg\tf\ty\t0\ts\ts\tA.\tB.\t7.5'],
  )
  with pytest.raises(
    tasks.TaskDataError,
    match=r"STS-B/train.tsv:2: score '7.5' is not a "
    r'number in \[0.0, 5.0\]',
  ):
    _read('sts-b', 'train', str(tmp_path))
  with pytest.raises(tasks.TaskDataError, match=r'CoLA/dev.tsv: no such file'):
    _read('cola', 'dev', str(tmp_path))
  with pytest.raises(tasks.TaskDataError, match='--task=squad: not a GLUE task'):
    glue.get_task('squad')


def test_features_follow_bert_layout():
  tokenizer = tokenizers.WordPieceTokenizer(
    str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  )
  examples = tasks.Examples(
    ['the cat sat on the mat', 'hi'], ['a dog', 'there'], np.array([1, 0], np.int32), ['0', '1']
  )
  f = features.encode(examples, tokenizer, max_seq_length=8)
  cls, sep = tokenizer.cls_id, tokenizer.sep_id
  # The longer text is cut first: 6 + 2 tokens in a budget of 5.
  a, b = tokenizer.encode(['the cat sat on the mat', 'a dog'])
  assert f['input_ids'][0].tolist() == [cls, *a[:3], sep, *b, sep]
  assert f['token_type_ids'][0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1]
  assert f['attention_mask'][1].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]
  assert f['token_type_ids'][1].tolist() == [0, 0, 0, 1, 1, 0, 0, 0]
  swapped = features.encode(examples, tokenizer, max_seq_length=8, swap=True)
  assert swapped['input_ids'][1].tolist()[:5] == [
    cls,
    *tokenizer.encode(['there'])[0],
    sep,
    *tokenizer.encode(['hi'])[0],
    sep,
  ]
  single = features.encode(tasks.Examples(['hello world'], None, None, ['0']), tokenizer, 8)
  assert single['token_type_ids'].sum() == 0 and single['attention_mask'].sum() == 4


def test_trimmed_padding_takes_two_lengths_an_octave():
  def trimmed(longest: int, full: int = 128) -> int:
    mask = np.zeros((2, full), np.int32)
    mask[0, :longest] = 1
    batch = {'input_ids': np.zeros((2, full), np.int32), 'attention_mask': mask}
    return features.trim_padding(batch)['input_ids'].shape[1]

  longest = [1, 16, 17, 32, 33, 48, 49, 64, 65, 96, 97, 128]
  assert [trimmed(n) for n in longest] == [16, 16, 32, 32, 48, 48, 64, 64, 96, 96, 128, 128]
  assert [trimmed(n, full=512) for n in (129, 193, 257, 385)] == [192, 256, 384, 512]
  assert trimmed(100, full=100) == 100  # Never longer than the rows.


def test_length_grouped_epochs_cut_padding_and_keep_batches_random():
  tokenizer = tokenizers.WordPieceTokenizer(
    str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  )
  train = _read('sst-2', 'train')
  rows = features.encode(train.subset(np.arange(4000)), tokenizer, max_seq_length=128)
  lengths, size = rows['attention_mask'].sum(-1), 32

  def batches(order: np.ndarray) -> np.ndarray:
    return order[: len(order) // size * size].reshape(-1, size)

  def padded_tokens(order: np.ndarray) -> float:
    cut = lambda b: features.trim_padding({k: v[b] for k, v in rows.items()})
    return float(np.mean([cut(b)['input_ids'].shape[1] for b in batches(order)]))

  # Off, the order is the permutation that runs before this option drew: old runs repeat.
  plain = features.epoch_order(3, 1, lengths, size)
  np.testing.assert_array_equal(plain, np.random.default_rng([3, 1]).permutation(4000))
  grouped = features.epoch_order(3, 1, lengths, size, group_batches=8)
  assert sorted(grouped) == list(range(4000))  # Every example, once.
  np.testing.assert_array_equal(grouped, features.epoch_order(3, 1, lengths, size, 8))
  assert padded_tokens(grouped) < 0.6 * padded_tokens(plain)
  # Rows of a batch are length neighbours, yet the batches' lengths come in no order,
  # and another epoch makes other batches.
  spread = lambda order: np.mean(np.ptp(lengths[batches(order)], axis=1))
  assert spread(grouped) < 0.25 * spread(plain)
  longest = lengths[batches(grouped)].max(axis=1)
  assert 0.3 < np.mean(np.diff(longest) > 0) < 0.7
  other = features.epoch_order(3, 2, lengths, size, 8)
  assert not {frozenset(b) for b in batches(grouped)} & {frozenset(b) for b in batches(other)}


def test_trimmed_padding_changes_no_output():
  tokenizer = tokenizers.WordPieceTokenizer(
    str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  )
  sentences = _read('sst-2', 'dev')
  rows = features.encode(sentences, tokenizer, max_seq_length=64)
  lengths = rows['attention_mask'].sum(-1)
  short, long = np.argsort(lengths)[:4], np.argsort(lengths)[-4:]
  assert lengths[short].max() <= 16 and 32 < lengths[long].max() <= 64
  cut = lambda idx: features.trim_padding({k: v[idx] for k, v in rows.items()})
  assert cut(short)['input_ids'].shape == (4, 16) and cut(long)['input_ids'].shape == (4, 64)
  # Never longer than the rows: 48-wide rows whose longest needs 64 stay 48 wide.
  narrow = {k: v[long][:, :48] for k, v in rows.items()}
  assert features.trim_padding(narrow)['input_ids'].shape == (4, 48)

  # Attention ignores padded keys: every output of the trimmed batch is the
  # padded batch's (a few float32 ulps apart, from shorter reductions).
  config = tiny.get_config()
  config.model.vocab_size = tokenizer.vocab_size
  model = SequenceClassifier(config_lib.discriminator_config(config), num_outputs=2)
  padded = {k: v[short] for k, v in rows.items()}
  params = jax.jit(model.init)(
    jax.random.key(0), padded['input_ids'], padded['token_type_ids'], padded['attention_mask']
  )
  forward = jax.jit(model.apply)
  apply = lambda b: forward(params, b['input_ids'], b['token_type_ids'], b['attention_mask'])
  np.testing.assert_allclose(apply(cut(short)), apply(padded), rtol=1e-5, atol=1e-6)


def test_submission_files(tmp_path):
  path = tmp_path / 'RTE.tsv'
  tasks.write_submission(glue.get_task('rte'), str(path), ['0', '1'], np.array([1, 0]))
  assert path.read_text() == 'index\tprediction\n0\tnot_entailment\n1\tentailment\n'
  tasks.write_submission(glue.get_task('sts-b'), str(path), ['5'], np.array([3.14159]))
  assert path.read_text() == 'index\tprediction\n5\t3.142\n'
  scores = tasks.score(glue.get_task('mrpc'), np.array([1, 0, 1]), np.array([1, 1, 1]))
  assert scores == {'f1': pytest.approx(0.8), 'accuracy': pytest.approx(2 / 3)}


@pytest.mark.parametrize(
  'task, answer, dev_scores',
  [
    # Train: 6,023 of 8,551 acceptable; always answering so has no correlation.
    ('cola', '1', {'mcc': 0.0}),
    ('sst-2', '1', {'accuracy': 444 / 872}),
    # 279 of MRPC's 408 dev pairs are paraphrases: F1 = 2 * 279 / (2 * 279 + 129).
    ('mrpc', '1', {'f1': 558 / 687, 'accuracy': 279 / 408}),
    # WNLI's train leans the other way (323 of 635 are 0) and so does its dev (40 of 71).
    ('wnli', '0', {'accuracy': 40 / 71}),
  ],
)
def test_constant_baseline_on_the_real_tasks(task, answer, dev_scores):
  t = glue.get_task(task)
  train, dev = (_read(task, split) for split in ('train', 'dev'))
  constant = tasks.constant_answer(t, train.labels)
  assert tasks.answer_name(t, constant) == answer
  assert tasks.score(t, dev.labels, np.full(len(dev), constant)) == pytest.approx(dev_scores)


def test_constant_answer_ties_and_regression():
  assert tasks.constant_answer(glue.get_task('rte'), np.array([1, 0, 0, 1])) == 0
  assert tasks.constant_answer(glue.get_task('mnli'), np.array([2, 2, 1])) == 2
  sts = glue.get_task('sts-b')
  mean = tasks.constant_answer(sts, np.array([1.0, 2.0, 4.5], np.float32))
  assert mean == pytest.approx(2.5) and tasks.answer_name(sts, mean) == '2.500'
