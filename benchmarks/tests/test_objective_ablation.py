"""benchmarks/objective_ablation.sh's learning-rate grid, end to end on a tiny model and
real text: the rates are compared part way through their runs, and only the chosen
run goes on to the end."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys

from tests.conftest import REPO, data_dir, prepared_tiny  # noqa: F401 (a fixture)


def _ablation(out: pathlib.Path, budget: str, **env: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    ['bash', 'benchmarks/objective_ablation.sh', str(out), budget],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=900,
    env={**os.environ, 'ELECTRA_JAX_DATA': str(data_dir()), 'JAX_PLATFORMS': 'cpu', **env},
  )


def _newest_checkpoint(run: pathlib.Path) -> int:
  return max(int(p.name) for p in (run / 'checkpoints').iterdir() if p.name.isdigit())


def test_the_grid_compares_rates_half_way_and_only_the_chosen_run_goes_on(
  tmp_path,
  prepared_tiny,  # noqa: F811
):
  env = {
    # The tiny corpus instead of the recipe's (cpu_recipe.sh), and a smaller model.
    'prepared': prepared_tiny,
    'vocab_size': '2000',
    'PRETRAIN_FLAGS': '--config.max_seq_length=64 --config.model.num_layers=2 '
    '--config.model.scan_unroll=2',
    'FINETUNE_FLAGS': '--config.max_train_examples=32 --config.num_train_epochs=1 '
    '--config.max_seq_length=64',
    'ROWS': 'mlm',
    'LRS': '1e-3 2e-3',
    'SELECT_AT': '0.5',
    'RANDOM_INIT': '0',
  }
  model = subprocess.run(
    ['bash', '-c', 'source benchmarks/cpu_recipe.sh && printf "%s\\n" "${model[@]}"'],
    cwd=REPO,
    env={**os.environ, **env},
    capture_output=True,
    text=True,
    check=True,
  ).stdout.splitlines()
  per_step = subprocess.run(
    [sys.executable, '-m', 'electra_jax.flops', *model, '--config.objective.name=mlm'],
    cwd=REPO,
    capture_output=True,
    text=True,
    check=True,
  ).stdout
  budget = repr(10 * float(per_step) / 1e12)  # 10 steps; compared at step 5.

  refused = _ablation(tmp_path / 'refused', budget, **{**env, 'SELECT_AT': '0'})
  assert refused.returncode == 2 and 'error: SELECT_AT=0: ' in refused.stderr
  no_budget = _ablation(tmp_path / 'refused', '0', **env)
  assert no_budget.returncode == 2 and 'error: BUDGET_TFLOP=0: ' in no_budget.stderr
  unknown = _ablation(tmp_path / 'refused', budget, **{**env, 'TASKS': 'sst-2 sst2'})
  assert unknown.returncode == 2 and "error: TASKS names 'sst2': " in unknown.stderr

  out = tmp_path / 'abl'
  done = _ablation(out, budget, **env)
  assert done.returncode == 0, done.stderr[-3000:]
  chosen = (out / 'pretrain' / 'mlm.lr').read_text().strip()
  other = {'1e-3': '2e-3', '2e-3': '1e-3'}[chosen]
  scores = {}
  for lr in ('1e-3', '2e-3'):
    selected = json.loads((out / 'select' / f'mlm-lr{lr}' / 'results.json').read_text())
    assert selected['pretraining_step'] == 5, lr  # Both compared at the same step.
    scores[lr] = selected['median']['dev']['accuracy']
  assert scores[chosen] >= scores[other]
  assert f'mlm: learning rate {chosen} (1,000-example SST-2 median ' in done.stdout
  # The table's heading names the flags that made these rows other than the recipe's.
  assert (
    f"pretraining with PRETRAIN_FLAGS '{env['PRETRAIN_FLAGS']}'; fine-tuning 3 seeds (GLUE "
    f"under the paper's protocol, then FINETUNE_FLAGS '{env['FINETUNE_FLAGS']}'), dev "
    "medians; the paper's figures are for its own settings." in done.stdout
  )
  assert 'at step 5 of 10)' in done.stdout
  # One OUT, one set of PRETRAIN_FLAGS and one of FINETUNE_FLAGS: a rerun with others is
  # refused before any work (it would mix two recipes in a row, or keep the fine-tunes
  # made with the old flags as the new ones').
  for name, changed in (
    ('PRETRAIN_FLAGS', '--config.seed=1'),
    ('FINETUNE_FLAGS', '--config.num_train_epochs=2'),
  ):
    flags, kept = f'{env[name]} {changed}', out / name.lower()
    refused = _ablation(out, budget, **{**env, name: flags})
    assert refused.returncode == 2
    assert (
      f"error: {name}='{flags}', but {out} was run with {name}='{env[name]}' ({kept}): "
      'give these flags' in refused.stderr
    ), refused.stderr[-3000:]
    assert kept.read_text() == env[name] + '\n'
  assert _newest_checkpoint(out / 'pretrain' / f'mlm-lr{other}') == 5
  assert _newest_checkpoint(out / 'pretrain' / f'mlm-lr{chosen}') == 10
  assert 'Resumed at step 5 ' in done.stderr  # The chosen run went on from its stop.
  for task in ('sst-2', 'mrpc'):
    results = json.loads((out / 'finetune' / f'{task}-mlm' / 'results.json').read_text())
    assert results['pretraining_step'] == 10
  # Pretraining in three pieces (two to step 5, one on to 10), two selections, two tasks.
  jobs = [line.split('\t')[0] for line in (out / 'times.tsv').read_text().splitlines()]
  assert sorted(jobs) == sorted(
    [
      'pretrain pretrain/mlm-lr1e-3',
      'pretrain pretrain/mlm-lr2e-3',
      f'pretrain pretrain/mlm-lr{chosen}',
      'finetune select/mlm-lr1e-3',
      'finetune select/mlm-lr2e-3',
      'finetune finetune/sst-2-mlm',
      'finetune finetune/mrpc-mlm',
    ]
  )
  # The table's grid: the step each selection read, and the step each run trained to.
  assert re.search(rf'^mlm +{chosen} +0\.\d+ +5 +10 ', done.stdout, re.M), done.stdout
  assert re.search(rf'^mlm +{other} +0\.\d+ +5 +5 ', done.stdout, re.M), done.stdout

  # CoNLL-2003 POS from the same checkpoint: pretraining only restores, the finished
  # selections and GLUE tasks are kept, and the table gains the task's column.
  tagged = _ablation(out, budget, **{**env, 'TASKS': 'pos'})
  assert tagged.returncode == 0, tagged.stderr[-3000:]
  results = json.loads((out / 'finetune' / 'pos-mlm' / 'results.json').read_text())
  assert (results['task'], results['pretraining_step']) == ('conll2003', 10)
  assert 0 < results['median']['dev']['accuracy'] <= 1
  assert results['constant_baseline']['answer'] == 'NNP'  # Column 1: the POS tags.
  assert re.search(r'^row +lr +steps +SST-2 acc: .* MRPC F1: .* POS acc: ', tagged.stdout, re.M)
  assert (out / 'times.tsv').read_text().splitlines()[-1].startswith('finetune finetune/pos-mlm\t')

  # One rate, in lanes: nothing to choose between, so no selection fine-tune runs. The
  # chosen run, copied into another OUT, only restores, on core 0; ELECTRA pretrains on
  # core 1. Random initialisation's two tasks are dealt out, one to each lane, after its row.
  single = tmp_path / 'single'
  shutil.copytree(out / 'pretrain' / f'mlm-lr{chosen}', single / 'pretrain' / f'mlm-lr{chosen}')
  two_rows = {'ROWS': 'mlm electra', 'LRS': chosen, 'TASKS': 'pos ner', 'RANDOM_INIT': '1'}
  lanes = _ablation(single, budget, **{**env, **two_rows, 'PARALLEL': '2'})
  assert lanes.returncode == 0, lanes.stderr[-3000:]
  for lane, row in enumerate(('mlm', 'electra')):
    line = f'lane {lane} (core {lane}): {row}; its output goes to {single}/logs/lane{lane}.log'
    assert line in lanes.stdout
    log = (single / 'logs' / f'lane{lane}.log').read_text()
    assert f'{row}: learning rate {chosen} (the only rate in LRS)' in log, log[-3000:]
  assert 'Resumed at step 10 ' in (single / 'logs' / 'lane0.log').read_text()
  assert not (single / 'select').exists()
  jobs = [line.split('\t') for line in (single / 'times.tsv').read_text().splitlines()]
  done_in = {}
  for job, _, lane, status in jobs:
    assert status == '0', jobs
    done_in.setdefault(lane, []).append(job)
  assert done_in == {
    '0': [
      f'pretrain pretrain/mlm-lr{chosen}',
      *(f'finetune finetune/{t}-mlm' for t in ('pos', 'ner')),
      'finetune finetune/pos-random',
    ],
    '1': [
      f'pretrain pretrain/electra-lr{chosen}',
      *(f'finetune finetune/{t}-electra' for t in ('pos', 'ner')),
      'finetune finetune/ner-random',
    ],
  }, jobs
  for task in ('pos', 'ner'):
    assert json.loads((single / 'finetune' / f'{task}-random' / 'results.json').read_text())[
      'random_init'
    ]
  cell = r'(0\.\d+, ){2}0\.\d+ \(0\.\d+\) +'  # Three seeds (median), for each task.
  assert re.search(rf'^random +- +- +{cell}{cell}0\.\d+$', lanes.stdout, re.M), lanes.stdout

  # Rerun comparing whole runs: the half-way selections no longer answer for it.
  whole = _ablation(out, budget, **{**env, 'SELECT_AT': '1'})
  assert whole.returncode == 2
  assert (
    f'error: {out}/select/mlm-lr1e-3/results.json fine-tuned mlm-lr1e-3 at step 5, but this '
    'run asks for mlm-lr1e-3 at step 10 (SELECT_AT or LRS changed?)' in whole.stderr
  ), whole.stderr[-3000:]
  # Other FINETUNE_FLAGS on the same pretraining: its runs linked into a new OUT only
  # restore. A piece that fails (here, on a key finetune lacks) is timed too, with its
  # status, and the script stops with it.
  linked = tmp_path / 'other_flags'
  (linked / 'pretrain').mkdir(parents=True)
  for lr in ('1e-3', '2e-3'):
    (linked / 'pretrain' / f'mlm-lr{lr}').symlink_to(out / 'pretrain' / f'mlm-lr{lr}')
  failed = _ablation(linked, budget, **{**env, 'FINETUNE_FLAGS': '--config.no_such_key=1'})
  assert failed.returncode != 0
  job, seconds, lane, status = (linked / 'times.tsv').read_text().splitlines()[-1].split('\t')
  assert (job, lane, status) == ('finetune select/mlm-lr1e-3', '0', '2'), failed.stderr[-3000:]
  assert int(seconds) >= 0
  assert _newest_checkpoint(out / 'pretrain' / f'mlm-lr{chosen}') == 10  # Only restored.
