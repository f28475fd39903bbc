"""The offline GPU kit and suite, end to end on this CPU: the kit is built (wheels from
the package index, prepared data, GLUE), then every stage's dry run installs from it as
a GPU node would and writes its table, so the suite cannot rot before it meets a GPU."""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO, data_dir


def _bash(script: str, *args: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    ['bash', script, *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=900,
    env={**os.environ, **env},
  )


def _dry_run(stage: str, kit: pathlib.Path, out: pathlib.Path, **env: str):
  """One stage of the suite on this CPU, installing from `kit`."""
  return _bash(
    'benchmarks/accelerator_suite.sh',
    STAGE=stage,
    KIT=str(kit),
    OUT=str(out),
    SUITE_DRY_RUN='1',
    **env,
  )


@pytest.fixture(scope='module')
def kit(tmp_path_factory) -> pathlib.Path:
  path = tmp_path_factory.mktemp('kit') / 'kit'
  built = _bash(
    'benchmarks/accelerator_kit.sh',
    str(path),
    ELECTRA_JAX_DATA=str(data_dir()),
    WIKI_TRAIN='AA/wiki_0[0-1]',
  )
  assert built.returncode == 0, built.stderr[-3000:]
  assert f'kit: {path}, ' in built.stdout
  return path


def test_the_kit_holds_what_a_node_lacks(kit):
  wheels = sorted(p.name for p in (kit / 'wheels').iterdir())
  for name in ('ml_collections', 'grain', 'array_record', 'tensorboardx'):
    assert any(w.lower().startswith(name) for w in wheels), (name, wheels)
  # The GPU node's Python, whatever this machine runs.
  assert any('cp312' in w for w in wheels if w.startswith('grain'))
  for prepared in ('wiki_train', 'wiki_held_out'):
    assert (kit / 'data' / prepared / 'metadata.json').exists()
  assert (kit / 'glue' / 'SST-2' / 'dev.tsv').exists()
  size = sum(p.stat().st_size for p in kit.rglob('*') if p.is_file())
  assert size < 64 * 2**20


def test_every_stage_runs_from_the_kit(kit, tmp_path):
  out = tmp_path / 'results'
  for stage in ('env', 'small', 'base', 'quality'):
    result = _dry_run(stage, kit, out, QUALITY_TASKS='sst-2 mrpc')
    assert result.returncode == 0, (stage, result.stderr[-3000:])
  # Installed from the kit, not from the index.
  assert (
    kit / next(p.name for p in kit.iterdir() if p.name.startswith('site-')) / '.installed'
  ).exists()
  env = (out / 'env.md').read_text()
  assert '| bfloat16 | 512 |' in env and '- commit: ' in env
  small = (out / 'small.md').read_text()
  rows = [line.split('|')[1:-1] for line in small.splitlines() if line.startswith('| ')]
  timed = {row[0].strip(): row[1].strip() for row in rows[1:]}
  assert float(timed['explicit attention'].replace(',', '')) > 0, small
  assert float(timed['HF transformers (PyTorch), as explicit attention'].replace(',', '')) > 0
  assert float(timed['xla, scan unrolled, remat dots_saveable'].replace(',', '')) > 0, small
  assert '3 steps traced; ' in small and (out / 'profile' / 'train_step.hlo.txt').exists()
  base = (out / 'base.md').read_text()
  assert 'the largest whose step fits' in base and ' MFU against the target' in base, base
  # Quality: 4 steps of pretraining, the held-out metrics and a GLUE seed per task; a
  # second job with a longer schedule resumes the same workdir from step 4.
  quality = (out / 'quality.md').read_text()
  assert 'pretrained for 4 steps' in quality and 'disc_auc=' in quality, quality
  assert '| sst-2 | accuracy | 0.' in quality and '| mrpc | f1 | ' in quality, quality
  result = _dry_run('quality', kit, out, QUALITY_STEPS='6', QUALITY_TASKS='wnli')
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resumed at step 4' in (out / 'quality' / 'pretrain.log').read_text()
  quality = (out / 'quality.md').read_text()
  assert 'pretrained for 6 steps' in quality and '| wnli | accuracy | 0.' in quality, quality


def test_the_suite_names_a_missing_kit(tmp_path):
  result = _bash('benchmarks/accelerator_suite.sh', STAGE='env', KIT=str(tmp_path / 'none'))
  assert result.returncode == 1
  assert 'error: no kit at' in result.stderr and 'accelerator_kit.sh' in result.stderr


def test_the_objectives_stage_runs_the_ablation_from_its_kit(tmp_path):
  # A small SentencePiece corpus stands in for the ablation's wiki_spm8k.
  corpus = tmp_path / 'wiki_spm'
  prepared = subprocess.run(
    [
      sys.executable,
      '-m',
      'electra_jax.prepare_data',
      f'--corpus=wiki:{data_dir()}/wikipedia/AA/wiki_0[0-1]',
      f'--output_dir={corpus}',
      '--spm_vocab_size=1000',
      '--max_seq_length=128',
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert prepared.returncode == 0, prepared.stderr[-3000:]
  kit = tmp_path / 'kit'
  built = _bash(
    'benchmarks/accelerator_kit.sh',
    str(kit),
    ELECTRA_JAX_DATA=str(data_dir()),
    OBJECTIVE_CORPUS=str(corpus),
  )
  assert built.returncode == 0, built.stderr[-3000:]
  assert (kit / 'data' / 'objective_corpus.tar.xz').exists()
  assert not (kit / 'data' / 'wiki_train').exists()
  out = tmp_path / 'results'
  two_layers = '--config.model.num_layers=2 --config.model.scan_unroll=2'
  short = '--config.max_seq_length=64'
  result = _dry_run('objectives', kit, out, PRETRAIN_FLAGS=two_layers, FINETUNE_FLAGS=short)
  assert result.returncode == 0, result.stderr[-3000:]
  for row in ('electra_t3', 'mlm'):  # PRETRAIN_FLAGS comes after the recipe's 4 layers.
    config = json.loads((out / 'objectives/run/pretrain' / f'{row}-lr1e-3/config.json').read_text())
    assert config['model']['num_layers'] == 2
  report = (out / 'objectives.md').read_text()
  # The probe read both loops' speed and chose a budget; a dry run then uses two steps
  # of the costlier row, ELECTRA's (BERT's cheaper step gets at least as many).
  assert re.search(r'Probe, .*: electra [\d.]+ steps/s .*, mlm [\d.]+ steps/s', report), report
  assert re.search(r"rows 'electra_t3 mlm' .* [\d.]+ TFLOP of pretraining per row\.", report)
  # Both rows pretrained on the unpacked corpus and fine-tuned on the kit's GLUE.
  for row, steps in (('electra_t3', '2'), ('mlm', r'[2-9]')):
    line = rf'^{row} +1e-3 +{steps} 0\.\d+, 0\.\d+, 0\.\d+ \(0\.\d+\)'
    assert re.search(line, report, re.M), report
  assert (out / 'objectives' / 'run' / 'logs' / 'lane1.log').exists()
  # The user's FINETUNE_FLAGS reach fine-tuning, and the dry run's few examples after them.
  tuned = json.loads((out / 'objectives/run/finetune/sst-2-mlm/results.json').read_text())
  assert tuned['config']['max_seq_length'] == 64, tuned['config']
  assert tuned['config']['max_train_examples'] == 32, tuned['config']
  # Each lane's jobs were timed: pretraining and the paper protocol's two tasks. The stage's
  # one learning rate leaves nothing to choose, so no selection fine-tune runs.
  times = (out / 'objectives' / 'run' / 'times.tsv').read_text().splitlines()
  assert sorted(line.split('\t')[2] for line in times) == ['0'] * 3 + ['1'] * 3, times
  assert not (out / 'objectives' / 'run' / 'select').exists()
  assert re.search(r'^Time \(OUT/times.tsv\): lane 0 [\d.]+ h, lane 1 [\d.]+ h;', report, re.M)
  # Run again, as after an interruption: the probe starts afresh, the finished runs are
  # kept (the pretraining restores, the fine-tunes are skipped), the table is the same.
  results = sorted((out / 'objectives' / 'run').glob('*/*/results.json'))
  written = [p.stat().st_mtime_ns for p in results]
  again = _dry_run('objectives', kit, out, PRETRAIN_FLAGS=two_layers, FINETUNE_FLAGS=short)
  assert again.returncode == 0, again.stderr[-3000:]
  assert len(results) == 4 and [p.stat().st_mtime_ns for p in results] == written
  # Each lane's log holds both pieces: two runs of the row's pretraining (lane 1: BERT).
  log = (out / 'objectives' / 'run' / 'logs' / 'lane1.log').read_text()
  assert log.count('Config: objective mlm;') == 2, log[-3000:]
  rerun = (out / 'objectives.md').read_text()

  def table(text: str) -> str:  # The rerun's restores add to the time, not to the table.
    return re.sub(r'\nTime \(OUT.*', '', text[text.index('```') :].split('Stage time')[0])

  assert table(rerun) == table(report)


def test_the_objectives_stage_names_a_kit_without_its_corpus(kit, tmp_path):
  result = _dry_run('objectives', kit, tmp_path)
  assert result.returncode == 1
  assert 'the kit has no objective_corpus.tar.xz' in result.stderr
  assert 'OBJECTIVE_CORPUS=' in result.stderr
