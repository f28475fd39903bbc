"""gs:// paths end to end, against a real local GCS server (tests/gcs_emulator.py).

The user's path on a Cloud TPU, with every file in a bucket: a corpus, the
prepared shards, the pretraining workdir (checkpoints, TensorBoard), a SIGKILL
and a bit-identical resume, evaluation, fine-tuning and export. Then a good
checkpoint that the server refuses to serve for a while: it is never moved
aside.
"""

import functools
import json
import os
import pathlib
import re
import signal
import subprocess

from etils import epath
import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from configs import tiny
from electra_jax import checkpointing, pretrained, storage
from electra_jax.data import pipeline, shard_writer
from tests import gcs_emulator
from tests.conftest import data_dir, run_module, start_module, wait_for
from tests.main_runs import checkpoint_params, last_per_step

# The whole user path against the bucket: a run may take long.
_run = functools.partial(run_module, timeout=900)

BUCKET = f'gs://{gcs_emulator.BUCKET}'


@pytest.fixture(scope='module')
def gcs(tmp_path_factory):
  """The server, with this process's clients pointed at it too."""
  emulator = gcs_emulator.Emulator(str(tmp_path_factory.mktemp('gcs')))
  saved = {k: os.environ.get(k) for k in emulator.env}
  os.environ.update(emulator.env)
  yield emulator
  emulator.stop()
  for key, value in saved.items():
    if value is None:
      os.environ.pop(key)
    else:
      os.environ[key] = value


def _pretrain(workdir: str, prepared: str, *args: str) -> list[str]:
  return [
    '--config=configs/tiny.py',
    f'--workdir={workdir}',
    f'--config.data.prepared_dir={prepared}',
    '--config.log_every_steps=1',
    '--config.checkpoint.every_minutes=0',
    '--config.checkpoint.every_steps=10',
    *args,
  ]


def _start_until(args: list[str], log: pathlib.Path, text: str) -> subprocess.Popen:
  """Starts the main job with its output in `log`; returns once the log holds `text`."""
  process = start_module('electra_jax.main', log, *args)
  wait_for(process, log, re.escape(text), timeout=600)
  return process


def test_paths_in_a_bucket(gcs, tmp_path):
  (tmp_path / 'a.txt').write_text('alpha\n')
  storage.copy(tmp_path / 'a.txt', f'{BUCKET}/unit/x/a.txt')
  storage.write_json(f'{BUCKET}/unit/y/b.json', {'b': 1})
  with storage.open_text(f'{BUCKET}/unit/y/c.txt', 'w') as f:
    f.write('gamma\n')
  assert storage.glob(f'{BUCKET}/unit/*/[ab].*') == [
    f'{BUCKET}/unit/x/a.txt',
    f'{BUCKET}/unit/y/b.json',
  ]
  assert storage.read_json(f'{BUCKET}/unit/y/b.json') == {'b': 1}
  with storage.open_text(f'{BUCKET}/unit/y/c.txt') as f:
    assert f.read() == 'gamma\n'
  assert epath.Path(f'{BUCKET}/unit/x/a.txt').exists()
  assert not epath.Path(f'{BUCKET}/unit/x/missing.txt').exists()
  # A staged write that fails leaves nothing behind.
  with pytest.raises(RuntimeError):
    with storage.staged(f'{BUCKET}/unit/z/half.bin') as local:
      open(local, 'wb').write(b'half')
      raise RuntimeError('killed mid-write')
  assert not epath.Path(f'{BUCKET}/unit/z/half.bin').exists()


def test_prepared_data_in_a_bucket_is_read_from_a_local_copy(gcs, tmp_path):
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_00',
    max_seq_length=64,
    vocab=str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt'),
  )
  remote = shard_writer.prepare(options, f'{BUCKET}/copied', num_workers=1, progress=False)
  config = tiny.get_config()
  config.data.prepared_dir, config.data.local_copy_dir = remote.directory, str(tmp_path)
  config.model.vocab_size, config.max_seq_length = remote.vocab_size, 64
  local = pipeline.prepared_data(config, str(tmp_path / 'workdir'))
  assert local.directory == str(tmp_path / 'electra-test_copied')
  assert local.metadata == remote.metadata
  shard = pathlib.Path(local.shard_paths()[0])
  assert shard.read_bytes() == epath.Path(remote.shard_paths()[0]).read_bytes()
  # A later run keeps the copy; the batches are the bucket's.
  written = shard.stat().st_mtime_ns
  assert pipeline.prepared_data(config, str(tmp_path / 'workdir')).directory == local.directory
  assert shard.stat().st_mtime_ns == written
  first = lambda data: next(pipeline.train_iterator(data, config, process_index=0, process_count=1))
  for key, value in first(remote).items():
    np.testing.assert_array_equal(value, first(local)[key])


def test_refused_reads_are_trouble_not_damage(gcs, tmp_path):
  """The errors that gcsfs and tensorstore raise while the server refuses a
  checkpoint read as trouble; a truncated file reads as damage."""
  path = f'{BUCKET}/refused/ckpt'
  checkpointer = ocp.StandardCheckpointer()
  checkpointer.save(path, {'w': np.arange(8, dtype=np.float32)})
  checkpointer.wait_until_finished()
  gcs.refuse('refused/ckpt/')
  try:
    with pytest.raises(Exception) as metadata_error:
      storage.read_json(f'{path}/_METADATA')
    gcs.refuse('refused/ckpt/.*ocdbt|refused/ckpt/d/')
    with pytest.raises(Exception) as array_error:
      checkpointer.restore(path, {'w': jax.ShapeDtypeStruct((8,), np.float32)})
  finally:
    gcs.stop_refusing()
  assert checkpointing._is_trouble(metadata_error.value), metadata_error.value
  assert checkpointing._is_trouble(array_error.value), array_error.value

  local = tmp_path / 'ckpt'
  checkpointer.save(local, {'w': np.arange(8, dtype=np.float32)})
  checkpointer.wait_until_finished()
  data = [p for p in local.rglob('*') if p.is_file() and p.parent.name == 'd']
  for p in data:
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
  with pytest.raises(Exception) as truncated:
    checkpointer.restore(local, {'w': jax.ShapeDtypeStruct((8,), np.float32)})
  assert not checkpointing._is_trouble(truncated.value), truncated.value


@pytest.mark.heavy  # Seven CLI runs: about five minutes.
def test_the_whole_user_path_in_a_bucket(gcs, tmp_path):
  wiki = data_dir() / 'wikipedia' / 'AA'
  for name in ('wiki_00', 'wiki_01'):
    storage.copy(wiki / name, f'{BUCKET}/corpus/AA/{name}')
  prepared = f'{BUCKET}/prepared'
  result = _run(
    'electra_jax.prepare_data',
    f'--corpus=wiki:{BUCKET}/corpus/*/wiki_0[0-1]',
    f'--output_dir={prepared}',
    '--spm_vocab_size=2000',
    '--max_seq_length=64',
    '--num_workers=2',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'in 2 shards' in result.stdout

  # The reference: 30 uninterrupted steps in a local workdir, from the bucket's data.
  # It reads the shards from the bucket; the run below, from a local copy.
  reference = str(tmp_path / 'reference')
  result = _run(
    'electra_jax.main',
    *_pretrain(reference, prepared, '--config.num_train_steps=30', '--config.data.local_copy_dir='),
  )
  assert result.returncode == 0, result.stderr[-3000:]

  # The same in the bucket, killed after its checkpoint of step 20, then resumed.
  workdir = f'{BUCKET}/run'
  args = _pretrain(
    workdir,
    prepared,
    '--config.num_train_steps=30',
    f'--config.data.local_copy_dir={tmp_path / "copies"}',
  )
  process = _start_until(args, tmp_path / 'killed.log', 'Saved the checkpoint of step 20')
  process.send_signal(signal.SIGKILL)
  process.wait()
  result = _run('electra_jax.main', *args)
  assert result.returncode == 0, result.stderr[-3000:]
  assert re.search(r'Resumed at step (20|30) ', result.stderr), result.stderr[-3000:]
  assert f'Reading {prepared} from its local copy {tmp_path / "copies"}' in result.stderr
  a, b = last_per_step(reference), last_per_step(workdir)
  assert set(a) == set(b)
  for tag in a:
    assert [b[tag][s] for s in range(1, 31)] == [a[tag][s] for s in range(1, 31)], tag
  for x, y in zip(checkpoint_params(reference, 30), checkpoint_params(workdir, 30), strict=True):
    np.testing.assert_array_equal(x, y)

  result = _run('electra_jax.evaluate', f'--workdir={workdir}', f'--data={prepared}')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'step 30: mlm_loss=' in result.stdout

  glue = f'{BUCKET}/glue'
  for split in ('train', 'dev', 'test'):
    storage.copy(data_dir() / 'glue' / 'SST-2' / f'{split}.tsv', f'{glue}/SST-2/{split}.tsv')
  result = _run(
    'electra_jax.finetune',
    '--task=sst-2',
    f'--data_dir={glue}',
    f'--init={workdir}',
    f'--workdir={BUCKET}/finetuned',
    '--config.max_train_examples=256',
    '--config.num_train_epochs=1',
    '--config.max_seq_length=32',
    '--config.num_seeds=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  results = storage.read_json(f'{BUCKET}/finetuned/results.json')
  assert results['pretraining_step'] == 30 and results['data']['dev'] == f'{glue}/SST-2/dev.tsv'
  assert epath.Path(f'{BUCKET}/finetuned/seed_0/SST-2.tsv').exists()
  assert storage.glob(f'{BUCKET}/finetuned/seed_0/events.out.tfevents.*')

  result = _run('electra_jax.export', f'--workdir={workdir}', f'--output={BUCKET}/hf')
  assert result.returncode == 0, result.stderr[-3000:]
  exported, source = pretrained.load(f'{BUCKET}/hf'), pretrained.load(workdir)
  for key in ('embeddings', 'discriminator'):
    for x, y in zip(
      jax.tree.leaves(exported.params[key]), jax.tree.leaves(source.params[key]), strict=True
    ):
      np.testing.assert_array_equal(x, y)
  assert json.loads(storage.open_text(f'{BUCKET}/hf/config.json').read())['vocab_size'] == 2000


@pytest.mark.heavy  # Three CLI runs and 15 s of retries: two minutes.
def test_a_checkpoint_the_bucket_refuses_for_a_while_is_never_moved_aside(
  gcs, tmp_path, prepared_tiny
):
  workdir = f'{BUCKET}/refused_run'
  args = _pretrain(workdir, prepared_tiny, '--config.num_train_steps=20')
  result = _run('electra_jax.main', *args)
  assert result.returncode == 0, result.stderr[-3000:]
  more = [*args, '--config.num_train_steps=30']

  # Refused throughout: the run stops, naming the checkpoint, and leaves it.
  gcs.refuse('refused_run/checkpoints/20/state/')
  try:
    result = _run('electra_jax.main', *more)
  finally:
    gcs.stop_refusing()
  assert result.returncode != 0
  last = result.stderr.strip().splitlines()[-1]
  assert 'refused_run/checkpoints/20 could not be read' in last and 'left in place' in last, last
  assert result.stderr.count('trying again in') == len(checkpointing.READ_RETRY_DELAYS)
  names = [p.rsplit('/', 1)[-1] for p in storage.glob(f'{workdir}/checkpoints/*')]
  assert '20' in names and not any('unreadable' in n for n in names), names

  # Refused until the first retry is announced, then served: the retries resume from it.
  gcs.refuse('refused_run/checkpoints/20/state/')
  log = tmp_path / 'refused.log'
  try:
    process = _start_until(more, log, 'trying again in 1 s')
  finally:
    gcs.stop_refusing()
  assert process.wait(timeout=600) == 0, log.read_text()[-3000:]
  assert 'Resumed at step 20 ' in log.read_text()
  assert not any('unreadable' in p for p in storage.glob(f'{workdir}/checkpoints/*'))
