"""The Colab notebook end to end, then GLUE fine-tuning and probing of the model it
pretrained.

The notebook (launch/colab_tpu.ipynb) is executed as Colab would, cell by cell
in a Python kernel (nbclient), so that it cannot rot. Its settings are turned
down through the environment variables its first cell reads: the tiny config
for 50 steps on one real Wikipedia file with BERT's WordPiece vocabulary. The
model it pretrains is then fine-tuned on real SST-2 through the CLI.
"""

import dataclasses
import json
import pathlib
import re
import shutil
import signal
import subprocess
import time

import ml_collections
import pytest

from configs import finetune as finetune_configs
from electra_jax.finetune import glue, resume, tasks
from electra_jax.finetune import train as finetune_train
from electra_jax.metric_writer import read_scalars
from tests.conftest import REPO, data_dir, require, run_module, start_module, wait_for

NOTEBOOK = REPO / 'launch' / 'colab_tpu.ipynb'


def _finetune(*args: str) -> subprocess.CompletedProcess:
  return run_module('electra_jax.finetune', *args)


@pytest.fixture(scope='module')
def colab_run(tmp_path_factory) -> tuple[pathlib.Path, str]:
  """(the notebook's WORK folder, the text of its cell outputs) after running it."""
  nbformat = require('nbformat')
  nbclient = require('nbclient')
  data = data_dir()
  work = tmp_path_factory.mktemp('colab') / 'work'
  notebook = nbformat.read(NOTEBOOK, as_version=4)
  nbformat.validate(notebook)
  settings = {
    'ELECTRA_JAX_SOURCE': str(REPO),
    'ELECTRA_JAX_CORPUS': f'wiki:{data}/wikipedia/AA/wiki_00',
    'ELECTRA_JAX_VOCAB': str(data / 'vocab' / 'bert-base-uncased-vocab.txt'),
    'ELECTRA_JAX_CONFIG': 'configs/tiny.py',
    'ELECTRA_JAX_STEPS': '50',
    'ELECTRA_JAX_SEQ_LENGTH': '64',
    'ELECTRA_JAX_OVERRIDES': '',
    'ELECTRA_JAX_WORK': str(work),
  }
  with pytest.MonkeyPatch.context() as patch:
    for name, value in {**settings, 'JAX_PLATFORMS': 'cpu'}.items():
      patch.setenv(name, value)
    client = nbclient.NotebookClient(
      notebook,
      timeout=600,
      kernel_name='python3',
      resources={'metadata': {'path': str(work.parent)}},
    )
    try:
      client.execute()
    except nbclient.exceptions.CellExecutionError as e:
      pytest.fail(f'{NOTEBOOK.name} failed in a cell: {e}')
  text = '\n'.join(
    output.get('text', '')
    for cell in notebook.cells
    if cell.cell_type == 'code'
    for output in cell.get('outputs', [])
    if output.get('output_type') == 'stream'
  )
  return work, text


@pytest.fixture(scope='module')
def pretrained_workdir(colab_run) -> str:
  return str(colab_run[0] / 'pretrain')


def test_colab_notebook_runs_top_to_bottom(colab_run):
  work, text = colab_run
  # The live metric table reached the last step, the export loaded in
  # transformers and scored each token, and predict printed its summary.
  assert '\n    50 ' in text, text[-3000:]
  assert (work / 'pretrain' / 'checkpoints' / '50').is_dir()
  assert (work / 'hf' / 'model.safetensors').is_file()
  assert '       [CLS] 0.' in text and '        meal 0.' in text
  assert 'tokens replaced; the discriminator flags' in text


def test_finetuned_tiny_model_beats_chance_on_sst2(pretrained_workdir, tmp_path):
  out = tmp_path / 'sst2'
  # 4,000 of SST-2's 67k training sentences for 2 epochs; the tiny model's
  # 2 layers take the full learning rate (no layer-wise decay).
  args = (
    '--task=SST-2',
    f'--glue_dir={data_dir() / "glue"}',
    f'--init={pretrained_workdir}',
    f'--workdir={out}',
    '--config.max_train_examples=4000',
    '--config.num_train_epochs=2',
    '--config.max_seq_length=64',
    '--config.learning_rate=1e-3',
    '--config.layerwise_lr_decay=1.0',
    '--config.num_seeds=1',
    '--config.progress_every_seconds=0.001',
  )
  result = _finetune(*args)
  assert result.returncode == 0, result.stderr[-3000:]
  # A progress line at each log step after the first, which sets the clock: 250 steps.
  progress = re.findall(
    r'\] seed 0: step (\d+)/250 \(\d+%\)  \S+ steps/s  \S+ examples/s  \S+ left$',
    result.stderr,
    re.M,
  )
  assert progress == ['100', '150', '200', '250'], result.stderr[-3000:]
  last = result.stdout.strip().splitlines()[-1]
  print(result.stdout)
  assert last.startswith('sst-2 dev, 1 seed: dev accuracy=')
  accuracy = float(last.rsplit('=', 1)[1])
  # The dev set is 50.9% positive: always answering "positive" scores 0.509,
  # and chance's standard deviation over 872 sentences is 0.017. Three
  # fine-tuning seeds from one such model scored 0.632-0.689 (and 0.639-0.689
  # before electra_jax.prng drew the dropout masks), so 0.6 leaves room for
  # that spread while still asking for 5 standard deviations above chance.
  assert accuracy > 0.6, accuracy

  with open(out / 'results.json') as f:
    results = json.load(f)
  assert results['pretraining_step'] == 50 and not results['random_init']
  assert results['median']['dev']['accuracy'] == pytest.approx(accuracy, abs=1e-4)
  assert len(results['seeds']['0']['dev_per_epoch']) == 2
  # The table's last row: always the 4,000 sentences' majority label, which 444
  # (positive) or 428 of the 872 dev sentences carry.
  constant = results['constant_baseline']
  assert constant['dev']['dev']['accuracy'] == pytest.approx(
    {'1': 444 / 872, '0': 428 / 872}[constant['answer']]
  )
  row = ['always', constant['answer'], f'{constant["dev"]["dev"]["accuracy"]:.4f}']
  assert row in [line.split() for line in result.stdout.splitlines()], result.stdout
  submission = (out / 'seed_0' / 'SST-2.tsv').read_text().splitlines()
  assert submission[0] == 'index\tprediction' and len(submission) == 1 + 1821
  assert {line.split('\t')[1] for line in submission[1:]} <= {'0', '1'}
  scalars = read_scalars(out / 'seed_0')
  assert 'dev/dev/accuracy' in scalars and 'finetune/loss' in scalars

  # A run killed after its first seed: the rerun reads that seed instead of
  # training it again, and only a change of settings trains it anew.
  (out / 'results.json').unlink()
  again = _finetune(*args)
  assert again.returncode == 0, again.stderr[-3000:]
  assert 'seed 0: finished by an earlier run' in again.stderr
  assert again.stdout.strip().splitlines()[-1] == last
  assert json.loads((out / 'results.json').read_text())['seeds'] == results['seeds']
  # Stopped once it says so: its training would only compile programs for a new schedule.
  log = tmp_path / 'changed.log'
  changed = start_module('electra_jax.finetune', log, *args, '--config.max_train_examples=64')
  try:
    wait_for(changed, log, 'comes from other settings; training it again')
  finally:
    changed.kill()
    changed.wait()


@pytest.mark.heavy  # Four CLI runs: about two minutes.
def test_a_killed_or_preempted_seed_resumes_to_the_same_result(pretrained_workdir, tmp_path):
  args = (
    '--task=sst-2',
    f'--data_dir={data_dir() / "glue"}',
    f'--init={pretrained_workdir}',
    '--config.max_train_examples=1000',
    '--config.num_train_epochs=2',  # 31 steps an epoch, 62 a seed.
    '--config.max_seq_length=64',
    '--config.num_seeds=2',
    '--config.log_every_steps=10',
    '--config.length_grouped_batches=4',  # A resumed epoch regroups as it was.
  )
  straight = _finetune(
    *args, f'--workdir={tmp_path / "straight"}', '--config.progress_every_seconds=0.001'
  )
  assert straight.returncode == 0, straight.stderr[-3000:]
  # Seed 0's time left counts seed 1's steps too.
  left = re.findall(r'\] seed (\d): step \d+/62 .* left( \(\S+ in all\))?$', straight.stderr, re.M)
  assert {seed for seed, _ in left} == {'0', '1'}, straight.stderr[-3000:]
  assert all(bool(in_all) == (seed == '0') for seed, in_all in left), left
  out, log = tmp_path / 'interrupted', tmp_path / 'log'

  def start(*extra: str) -> subprocess.Popen:
    return start_module('electra_jax.finetune', log, *args, f'--workdir={out}', *extra)

  # Preempted in the second epoch of seed 0: it saves, says how to go on, and exits 143.
  first = start()
  wait_for(first, log, r'\] \[40\] ')
  first.send_signal(signal.SIGTERM)
  assert first.wait(timeout=120) == 143
  stopped = re.search(r'error: SIGTERM: saved this seed at step (\d+) of 62', log.read_text())
  assert stopped and 40 <= int(stopped[1]) < 62, log.read_text()[-3000:]
  # Resumed with a save every 0.12 s, then killed without warning during seed 1.
  second = start('--config.checkpoint.every_minutes=0.002')
  wait_for(second, log, rf'seed 0: resumed at step {stopped[1]} of 62')
  wait_for(second, log, r'(?s)seed 0: dev accuracy=.*Saved the checkpoint of step \d+ in \S+seed_1')
  second.kill()
  second.wait()
  assert not (out / 'seed_0' / 'checkpoints').exists()  # Spent once the result is written.
  # A change of checkpointing settings keeps the seed's checkpoint usable.
  last = start('--config.checkpoint.every_minutes=5')
  assert last.wait(timeout=300) == 0, log.read_text()[-3000:]
  assert 'seed 0: finished by an earlier run' in log.read_text()
  assert re.search(r'seed 1: resumed at step [1-9]\d* of 62', log.read_text())
  # Every dev figure of both seeds, per epoch, as the uninterrupted run's.
  results = [json.loads((d / 'results.json').read_text()) for d in (tmp_path / 'straight', out)]
  assert results[0]['seeds'] == results[1]['seeds']
  assert (out / 'seed_1' / 'SST-2.tsv').read_text() == (
    tmp_path / 'straight' / 'seed_1' / 'SST-2.tsv'
  ).read_text()
  assert not (out / 'seed_1' / 'checkpoints').exists()


def test_a_seed_saves_its_first_timed_checkpoint_a_full_interval_after_it_starts(tmp_path):
  # The interval passes during seed 0; seed 1 has no work to lose at its first step.
  config = ml_collections.ConfigDict(
    {'log_every_steps': 1, 'checkpoint': {'every_minutes': 0.5 / 60}}
  )
  saves = resume.Saves(config)
  try:
    resume.SeedCheckpoint(str(tmp_path / 'seed_0'), {}, saves).close()
    time.sleep(0.6)
    assert saves.due() == (True, False)
    resume.SeedCheckpoint(str(tmp_path / 'seed_1'), {}, saves).close()
    assert saves.due() == (False, False)
  finally:
    saves.close()


def test_seed_results_ignore_settings_that_do_not_change_them(tmp_path):
  # A seed file from before num_seeds and log_every_steps stopped counting still
  # holds them: it is reused; a changed learning rate is not.
  key = {'data': {'train': 't.tsv'}, 'init': 'w', 'pretraining_step': 5, 'config': {'lr': 1e-3}}
  saved = {**key, 'config': {'lr': 1e-3, 'num_seeds': 3, 'log_every_steps': 50}, 'result': 1}
  (tmp_path / 'seed_0').mkdir()
  (tmp_path / 'seed_0' / 'result.json').write_text(json.dumps(saved))
  assert finetune_train._finished_seed(str(tmp_path), 0, key) == 1
  assert finetune_train._finished_seed(str(tmp_path), 0, {**key, 'config': {'lr': 2e-3}}) is None


def test_a_random_initialisation_reuses_seeds_from_any_checkpoint_of_its_shape(
  pretrained_workdir,
):
  # The objective table fine-tunes random initialisation from whichever row's
  # checkpoint comes second: reordering its rows must not train it again.
  config = finetune_configs.get_config('small')
  source = finetune_train.load_source(config, pretrained_workdir)
  files = tasks.TaskFiles(glue.get_task('sst-2'), {'train': 't.tsv'}, reader=None)
  elsewhere = dataclasses.replace(source, source='/other/run', step=source.step + 100)
  wider = dataclasses.replace(
    elsewhere, discriminator_cfg=dataclasses.replace(source.discriminator_cfg, hidden_size=512)
  )

  def key(init: str, model) -> dict:
    return finetune_train._run_key(config, files, init, model)

  config.random_init = True
  assert key(pretrained_workdir, source) == key('/other/run', elsewhere)
  assert key(pretrained_workdir, source) != key('/other/run', wider)
  config.random_init = False
  assert key(pretrained_workdir, source) != key('/other/run', elsewhere)


def test_sst2_as_the_users_own_files_trains_exactly_as_glues_task(pretrained_workdir, tmp_path):
  sst2 = data_dir() / 'glue' / 'SST-2'
  common = (
    f'--init={pretrained_workdir}',
    '--config.max_train_examples=256',
    '--config.num_train_epochs=1',
    '--config.max_seq_length=32',
    '--config.num_seeds=1',
  )
  glue_run = _finetune(
    '--task=sst-2', f'--data_dir={sst2.parent}', f'--workdir={tmp_path / "glue"}', *common
  )
  assert glue_run.returncode == 0, glue_run.stderr[-3000:]
  # The same files, named one by one and read by their column names.
  csv_run = _finetune(
    '--task=csv',
    *(f'--{split}_file={sst2 / split}.tsv' for split in ('train', 'dev', 'test')),
    '--text_column=sentence',
    '--id_column=index',
    f'--workdir={tmp_path / "csv"}',
    *common,
  )
  assert csv_run.returncode == 0, csv_run.stderr[-3000:]
  glue_result, csv_result = (
    json.loads((tmp_path / name / 'results.json').read_text()) for name in ('glue', 'csv')
  )
  assert csv_result['task'] == 'csv' and csv_result['data']['dev'] == f'{sst2}/dev.tsv'
  dev = csv_result['seeds']['0']['dev']['dev']
  assert dev['accuracy'] == glue_result['seeds']['0']['dev']['dev']['accuracy']
  assert 0 < dev['macro_f1'] <= 1
  assert csv_run.stdout.strip().splitlines()[-1].startswith('csv dev, 1 seed: dev accuracy=')
  # Test predictions keep the file's ids and spell labels as the file does.
  predictions = (tmp_path / 'csv' / 'seed_0' / 'predictions.tsv').read_text()
  assert predictions == (tmp_path / 'glue' / 'seed_0' / 'SST-2.tsv').read_text()


# A minute and a half; test_tagging.py checks the windows and conlleval in process.
@pytest.mark.heavy
def test_ner_tags_conll2003_through_the_cli(pretrained_workdir, tmp_path):
  conll = data_dir() / 'conll2003'
  result = _finetune(
    '--task=conll2003',
    f'--data_dir={conll}',
    f'--test_file={conll / "test.txt"}',
    f'--init={pretrained_workdir}',
    f'--workdir={tmp_path}',
    '--config.max_train_examples=2000',
    '--config.num_train_epochs=2',
    '--config.max_seq_length=64',
    '--config.learning_rate=1e-3',
    '--config.layerwise_lr_decay=1.0',
    '--config.num_seeds=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  print(result.stdout)
  results = json.loads((tmp_path / 'results.json').read_text())
  dev = results['seeds']['0']['dev']['dev']
  # Always tagging O finds no entity (F1 0) and gets 83.3% of the valid tags right.
  constant = results['constant_baseline']
  assert constant['answer'] == 'O' and constant['dev']['dev']['f1'] == 0
  assert constant['dev']['dev']['accuracy'] == pytest.approx(42_759 / 51_362)
  assert dev['f1'] > 0.05 and dev['accuracy'] > constant['dev']['dev']['accuracy'], dev
  # One line per test word, a blank line after each of the 3,453 sentences.
  lines = (tmp_path / 'seed_0' / 'predictions.tsv').read_text().split('\n')
  words = [line for line in lines if line]
  assert len(words) == 46_435 and len(lines) - 1 - len(words) == 3_453
  assert words[0].split('\t')[0] == 'SOCCER'


def test_probe_scores_each_layer_of_the_pretrained_model(pretrained_workdir, tmp_path):
  out = tmp_path / 'probe.json'
  result = run_module(
    'electra_jax.probe',
    '--task=sst-2',
    f'--glue_dir={data_dir() / "glue"}',
    f'--init={pretrained_workdir}',
    '--config.max_train_examples=8000',
    '--config.max_seq_length=64',
    f'--output={out}',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  print(result.stdout)
  assert result.stdout.strip().splitlines()[-1].startswith('sst-2 best probe: ')
  with open(out) as f:
    results = json.load(f)
  assert results['pretraining_step'] == 50 and results['train_examples'] == 8000
  accuracy = {(r['layer'], r['pooling']): r['dev']['dev']['accuracy'] for r in results['probes']}
  assert list(accuracy) == [(layer, pooling) for layer in range(3) for pooling in ('cls', 'mean')]
  # Before the first layer, [CLS] is the same vector in every sentence, so its
  # probe can only answer one class: dev accuracy is that class's share of dev.
  assert accuracy[0, 'cls'] in (pytest.approx(428 / 872), pytest.approx(444 / 872))
  # The mean of the embeddings is a bag of words, which SST-2 rewards: 3
  # standard deviations of chance (0.017) over the majority's 0.509. This model
  # scored 0.591 (0.568 from 2,000 examples, 0.610 from 20,000).
  assert accuracy[0, 'mean'] > 0.56, accuracy
  rank = {(r['layer'], r['pooling']): r['effective_rank'] for r in results['probes']}
  assert rank.pop((0, 'cls')) is None  # The same vector in every sentence.
  assert all(1 <= r <= 128 for r in rank.values()), rank  # configs/tiny.py: width 128.
  assert result.stdout.splitlines()[0].endswith('cls effective rank  mean effective rank')


def test_bad_inputs_get_one_clear_line(colab_run, pretrained_workdir, tmp_path):
  glue_dir = tmp_path / 'glue'
  (glue_dir / 'RTE').mkdir(parents=True)
  (glue_dir / 'RTE' / 'train.tsv').write_text(
    'index\tsentence1\tsentence2\tlabel\n0\tA cat.\tAn animal.\tentailment\n1\tbroken row\n'
  )
  common = (f'--init={pretrained_workdir}', f'--workdir={tmp_path / "out"}')
  result = _finetune('--task=rte', f'--glue_dir={glue_dir}', *common)
  assert result.returncode == 2
  assert (
    result.stderr.strip()
    .splitlines()[-1]
    .startswith(
      f'error: {glue_dir}/RTE/train.tsv:3: 2 tab-separated fields, but rte needs at least 4'
    )
  )

  result = _finetune('--task=cola', f'--glue_dir={glue_dir}', *common)
  assert result.returncode == 2
  assert f'error: {glue_dir}/CoLA/train.tsv: no such file' in result.stderr
  result = _finetune('--task=cola', f'--data_dir={glue_dir}', '--text_column=sentence', *common)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
    "error: --text_column: only --task=csv reads columns by name; --task=cola reads GLUE's layout"
  )
  result = _finetune('--task=mnli', '--dev_file=dev.tsv', *common)
  assert result.returncode == 2
  assert 'error: --dev_file: mnli has 2 dev files (dev_matched, dev_mismatched)' in result.stderr
  (tmp_path / 'reviews.tsv').write_text('text\tlabel\ngood\t1\nbad\t0\n')
  result = _finetune('--task=csv', f'--train_file={tmp_path / "reviews.tsv"}', *common)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
    'error: --task=csv needs a dev file: name it with --dev_file, or give --data_dir holding dev.tsv'
  )

  # A model whose vocabulary is not its tokenizer's: an HF directory with a
  # vocab.txt of 1,000 entries beside a 30,522-row embedding table.
  hf = tmp_path / 'hf'
  shutil.copytree(colab_run[0] / 'hf', hf)
  with open(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt') as f:
    (hf / 'vocab.txt').write_text(''.join(f.readlines()[:1000]))
  result = _finetune(
    '--task=rte', f'--glue_dir={glue_dir}', f'--init={hf}', f'--workdir={tmp_path / "out2"}'
  )
  assert result.returncode == 2
  assert 'the tokenizer has 1000 ids but the model 30522' in result.stderr


# About a minute; test_squad.py and test_squad_metrics.py check the windows, the heads
# and the official metrics in process.
@pytest.mark.heavy
def test_squad_v2_through_the_cli(pretrained_workdir, tmp_path):
  """Trained on v1.1 questions, scored on the first SQuAD 2.0 dev article; the
  predictions are written in the official scripts' format."""
  dev = json.loads((data_dir() / 'squad' / 'dev-v2.0-part-a.json').read_text())
  dev['data'] = dev['data'][:1]
  dev_file = tmp_path / 'dev.json'
  dev_file.write_text(json.dumps(dev))
  ids = [qa['id'] for p in dev['data'][0]['paragraphs'] for qa in p['qas']]
  result = _finetune(
    '--task=squad_v2',
    f'--train_file={data_dir() / "squad" / "train-v1.1.json"}',
    f'--dev_file={dev_file}',
    f'--init={pretrained_workdir}',
    f'--workdir={tmp_path / "out"}',
    '--config.max_train_examples=256',
    '--config.num_train_epochs=1',
    '--config.squad.max_seq_length=128',
    '--config.squad.doc_stride=48',
    '--config.num_seeds=1',
  )
  assert result.returncode == 0, result.stderr[-3000:]
  print(result.stdout)
  results = json.loads((tmp_path / 'out' / 'results.json').read_text())
  scores = results['seeds']['0']['dev']['dev']
  assert set(scores) >= {'f1', 'exact_match', 'has_ans_f1', 'no_ans_f1', 'best_f1'}
  # Answering nothing is right on the unanswerable questions (and on a gold
  # answer that normalises to nothing, such as 'the').
  constant = results['constant_baseline']['dev']['dev']
  assert constant['has_ans_f1'] < 2 and constant['no_ans_f1'] == 100
  # The best threshold searched on dev includes the default one.
  assert scores['best_f1'] >= scores['f1'] - 1e-9
  predictions = json.loads((tmp_path / 'out' / 'seed_0' / 'predictions.json').read_text())
  null_odds = json.loads((tmp_path / 'out' / 'seed_0' / 'null_odds.json').read_text())
  assert sorted(predictions) == sorted(null_odds) == sorted(ids)
  assert all(isinstance(v, str) for v in predictions.values())
  assert result.stdout.strip().splitlines()[-1].startswith('squad_v2 dev, 1 seed:')
