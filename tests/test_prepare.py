"""prepare_data end to end through the CLI: real text, WordPiece, TFDS, resume, bad input."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from electra_jax.data import packing, shards, sources
from tests.conftest import REPO, data_dir, start_module, wait_for


def run_prepare(*args, timeout=300):
  return subprocess.run(
    [sys.executable, '-m', 'electra_jax.prepare_data', *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


def _vocab() -> str:
  return str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')


def _records(data: shards.PreparedData) -> list[np.ndarray]:
  import grain  # pylint: disable=g-import-not-at-top

  source = grain.sources.ArrayRecordDataSource(data.shard_paths())
  return [np.frombuffer(source[i], data.dtype) for i in range(len(source))]


def test_wordpiece_preparation_resumes_and_refuses_other_options(tmp_path, wiki_glob):
  out = tmp_path / 'prepared'
  args = [
    f'--corpus=wiki:{wiki_glob}',
    f'--output_dir={out}',
    f'--vocab={_vocab()}',
    '--max_seq_length=128',
    '--num_workers=2',
  ]
  result = run_prepare(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  for line in ('documents:', 'tokens:', 'unknown-token rate:', 'examples:'):
    assert line in result.stdout, result.stdout
  assert 'WARNING' not in result.stdout
  data = shards.PreparedData.load(str(out))
  counts = data.metadata['counts']
  assert data.vocab_size == 30522 and data.max_seq_length == 128
  assert data.dtype == np.uint16
  assert data.special_ids.cls == 101 and data.special_ids.mask == 103
  assert counts['documents'] == sum(open(p).read().count('<doc ') for p in glob.glob(wiki_glob))
  assert counts['unknown_tokens'] < 0.001 * counts['tokens']
  records = _records(data)
  assert len(records) == counts['examples'] == data.num_examples
  assert sum(len(r) - 4 + (r[0] == len(r) - 1) for r in records) == counts['tokens']
  decoded = packing.decode_records(records[:1], 128, 0)
  assert decoded['input_ids'][0, 0] == 101
  assert decoded['attention_mask'][0].sum() == len(records[0]) - 1
  # The first example holds the first words of the first article.
  tokenizer = data.tokenizer()
  first_doc = next(
    sources.read_documents(
      sources.plan_units(f'wiki:{wiki_glob}', sources.ReadOptions())[0], sources.ReadOptions()
    )
  )
  first_ids = [i for ids in tokenizer.encode(packing.split_sentences(first_doc[0])) for i in ids]
  assert list(records[0][2 : 2 + len(first_ids[:5])]) == first_ids[:5]

  # A crash leaves finished shards, a partial temporary file, no metadata:
  # rerunning redoes only the missing shard and gives identical output.
  shard1 = shards.shard_path(str(out), 1)
  with open(shard1, 'rb') as f:
    original = f.read()
  os.remove(shard1)
  os.remove(shards.shard_stats_path(str(out), 1))
  os.remove(out / 'metadata.json')
  with open(shard1 + '.tmp-12345', 'wb') as f:
    f.write(b'partial')
  shard0_mtime = os.path.getmtime(shards.shard_path(str(out), 0))
  result = run_prepare(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming: 1 of 2 shards are already written' in result.stderr
  with open(shard1, 'rb') as f:
    assert f.read() == original
  assert os.path.getmtime(shards.shard_path(str(out), 0)) == shard0_mtime
  assert shards.PreparedData.load(str(out)).metadata['counts'] == counts

  # A finished directory is left alone; other options are refused.
  result = run_prepare(*args)
  assert result.returncode == 0 and 'is already prepared' in result.stderr
  result = run_prepare(*args[:-2], '--max_seq_length=64')
  assert result.returncode == 2
  assert "different options ['max_seq_length']" in result.stderr.splitlines()[-1]
  assert shards.PreparedData.load(str(out)).metadata['counts'] == counts


def test_a_vocabulary_of_another_script_is_named_loudly(tmp_path):
  # Korean Wikipedia with BERT's English vocabulary: nearly every word is [UNK].
  result = run_prepare(
    f'--corpus=wiki:{data_dir() / "korean" / "kowiki" / "AA" / "wiki_00"}',
    f'--output_dir={tmp_path / "prepared"}',
    f'--vocab={_vocab()}',
    '--max_seq_length=128',
    '--num_workers=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  counts = shards.PreparedData.load(str(tmp_path / 'prepared')).metadata['counts']
  rate = counts['unknown_tokens'] / counts['tokens']
  assert rate > 0.3, rate
  expected = f'{rate:.1%} of the tokens are [UNK]: the vocabulary does not cover this corpus.'
  assert f'WARNING: {expected}' in result.stdout and expected in result.stderr


def test_mixed_sources_with_a_trained_sentencepiece_model(tmp_path, wiki_glob):
  docs = list(
    sources.read_documents(
      sources.plan_units(f'wiki:{wiki_glob}', sources.ReadOptions())[1], sources.ReadOptions()
    )
  )
  half = len(docs) // 2
  (tmp_path / 'docs.jsonl').write_text(
    ''.join(json.dumps({'text': '\n'.join(d)}) + '\n' for d in docs[:half])
  )
  (tmp_path / 'docs.txt').write_text('\n\n'.join('\n'.join(d) for d in docs[half:]))
  (tmp_path / 'empty.txt').write_text('')
  out = tmp_path / 'prepared'
  result = run_prepare(
    f'--corpus=jsonl:{tmp_path}/*.jsonl,text:{tmp_path}/*.txt',
    f'--output_dir={out}',
    '--spm_vocab_size=1000',
    '--max_seq_length=64',
    '--config.data.spm_sample_sentences=20000',
    '--num_workers=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'{tmp_path}/empty.txt is empty and was skipped' in result.stderr
  data = shards.PreparedData.load(str(out))
  assert data.metadata['tokenizer']['kind'] == 'sentencepiece'
  assert data.vocab_size == 1000 and data.special_ids.cls == 2
  assert data.metadata['counts']['documents'] == len(docs)
  assert data.metadata['counts']['empty_files'] == [f'{tmp_path}/empty.txt']
  assert [s['source'].split(':')[0] for s in data.metadata['shards']] == ['jsonl', 'text', 'text']


def _build_tfds_dataset(data_dir_path: str, docs: list[list[str]], file_format: str) -> None:
  """A real TFDS dataset, built by a GeneratorBasedBuilder."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  # Unregistered, so that each test can define it afresh; readers find the
  # dataset by name in data_dir all the same.
  with tfds.core.registered.skip_registration():

    class WikiSlice(tfds.core.GeneratorBasedBuilder):
      VERSION = tfds.core.Version('1.0.0')

      def _info(self):
        return tfds.core.DatasetInfo(
          builder=self,
          features=tfds.features.FeaturesDict(
            {'title': tfds.features.Text(), 'text': tfds.features.Text()}
          ),
        )

      def _split_generators(self, dl_manager):
        del dl_manager
        return {'train': self._generate_examples()}

      def _generate_examples(self):
        for i, doc in enumerate(docs):
          yield i, {'title': doc[0], 'text': '\n\n'.join(doc[1:])}

    WikiSlice(data_dir=data_dir_path, file_format=file_format).download_and_prepare()


# ArrayRecord datasets are read record by record without TensorFlow; TFRecord
# ones (most public TFDS datasets) are streamed through tf.data.
@pytest.mark.parametrize('file_format', ['array_record', 'tfrecord'])
def test_tfds_source_streams_a_built_dataset(tmp_path, wiki_glob, file_format):
  unit = sources.plan_units(f'wiki:{wiki_glob}', sources.ReadOptions())[0]
  docs = [d for d in sources.read_documents(unit, sources.ReadOptions()) if len(d) > 1]
  _build_tfds_dataset(str(tmp_path / 'tfds'), docs, file_format)
  # In-process: the documents come back, split into paragraphs (in the order
  # TFDS wrote them, which shuffles by key).
  options = sources.ReadOptions(tfds_data_dir=str(tmp_path / 'tfds'))
  units = sources.plan_units('tfds:wiki_slice@train', options)
  assert [(u.start, u.stop) for u in units] == [(0, len(docs))]
  as_set = lambda ds: sorted(map(tuple, ds))
  assert as_set(sources.read_documents(units[0], options)) == as_set(d[1:] for d in docs)
  # Through the CLI, in a process that has never seen the builder class.
  out = tmp_path / 'prepared'
  result = run_prepare(
    '--corpus=tfds:wiki_slice@train',
    f'--output_dir={out}',
    f'--vocab={_vocab()}',
    '--max_seq_length=128',
    f'--config.data.tfds_data_dir={tmp_path / "tfds"}',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  data = shards.PreparedData.load(str(out))
  assert data.metadata['counts']['documents'] == len(docs)
  assert data.metadata['shards'][0]['source'] == f'tfds:wiki_slice@train[0:{len(docs)}]'
  result = run_prepare(
    '--corpus=tfds:wiki_slice@validation',
    f'--output_dir={out}2',
    f'--vocab={_vocab()}',
    f'--config.data.tfds_data_dir={tmp_path / "tfds"}',
  )
  assert "no split 'validation'" in result.stderr.splitlines()[-1]


@pytest.mark.parametrize(
  'case',
  [
    'no_match',
    'invalid_utf8',
    'bad_vocab',
    'too_long',
    'all_empty',
    'no_tokenizer',
    'vocab_too_big',
  ],
)
def test_bad_input_gets_one_clear_line(tmp_path, case):
  text = tmp_path / 'text.txt'
  text.write_bytes(b'A fine line of text.\nA bad \xff line.\n')
  bad_vocab = tmp_path / 'vocab.txt'
  bad_vocab.write_text('[PAD]\n[UNK]\nhello\n')
  (tmp_path / 'empty.txt').write_text('\n')
  corpus, extra, expected = {
    'no_match': (
      f'text:{tmp_path}/none*.txt',
      [f'--vocab={_vocab()}'],
      f"no files match '{tmp_path}/none*.txt'",
    ),
    'invalid_utf8': (
      str(text),
      [f'--vocab={_vocab()}', '--on_invalid_utf8=error'],
      f'{text}, line 2: not valid UTF-8',
    ),
    'bad_vocab': (
      str(text),
      [f'--vocab={bad_vocab}'],
      f"{bad_vocab}: lacks the special tokens ['[CLS]', '[SEP]', '[MASK]']",
    ),
    'too_long': (
      str(text),
      [f'--vocab={_vocab()}', '--max_seq_length=1024'],
      "max_seq_length=1024: must be in [8, 512], the model's position embeddings",
    ),
    'all_empty': (f'{tmp_path}/empty.txt', [f'--vocab={_vocab()}'], 'holds no text'),
    'no_tokenizer': (str(text), [], 'choose exactly one tokenizer'),
    # sentencepiece's own refusal, from its child process.
    'vocab_too_big': (str(text), ['--spm_vocab_size=5000'], 'use a smaller --spm_vocab_size'),
  }[case]
  result = run_prepare(f'--corpus={corpus}', f'--output_dir={tmp_path / "out"}', *extra)
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith('error: ') and expected in last, result.stderr[-2000:]
  assert 'Traceback' not in result.stderr


def _as_from_a_shell() -> None:
  """SIGINT handled and unblocked in the child, as a shell starts it: a test process
  (a pytest-xdist worker, after earlier tests) may ignore or block it, and children
  inherit both."""
  signal.signal(signal.SIGINT, signal.SIG_DFL)
  signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


# preexec_fn makes subprocess fork without exec'ing at once, which JAX warns about;
# the child only resets two signal settings and then execs.
@pytest.mark.filterwarnings(r'ignore:os\.fork\(\) was called:RuntimeWarning')
def test_ctrl_c_stops_sentencepiece_training_at_once(tmp_path):
  """sentencepiece's C++ trainer runs in a child process, so SIGINT stops it at once.
  32,000 pieces on 200,000 sentences of the slice train for a minute or more."""
  log = tmp_path / 'log'
  process = start_module(
    'electra_jax.prepare_data',
    log,
    f'--corpus=wiki:{data_dir()}/wikipedia/AA/wiki_*',
    f'--output_dir={tmp_path / "out"}',
    '--spm_vocab_size=32000',
    '--config.data.spm_sample_sentences=200000',
    preexec_fn=_as_from_a_shell,
  )
  wait_for(process, log, 'sentencepiece: training 32000 pieces', timeout=120)
  time.sleep(2)  # Into the training.
  process.send_signal(signal.SIGINT)
  start = time.monotonic()
  status = process.wait(timeout=60)
  text = log.read_text()
  assert time.monotonic() - start < 10, text[-3000:]
  assert 'Trained a 32000-piece' not in text, 'the training ended before the signal'
  assert status == 130 and text.strip().endswith('error: interrupted'), text[-3000:]
  assert 'Traceback' not in text
