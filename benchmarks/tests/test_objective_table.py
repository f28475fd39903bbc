"""benchmarks/objective_table.py on an OUT folder laid out as objective_ablation.sh
leaves it: fine-tuning results.json files as electra_jax.finetune writes them, and
pretraining event files written by the trainer's own MetricWriter, one run resumed."""

import json
import pathlib
import subprocess
import sys

from benchmarks.objective_table import curve
from electra_jax import metric_writer
from tests.conftest import REPO


def _results(
  path: pathlib.Path,
  metric: str,
  values: list[float],
  constant: float,
  first_seed: int = 0,
  pretraining_step: int = 1000,
  second: tuple[str, list[float], float] | None = None,
) -> None:
  """A results.json of `values` of `metric`; `second` adds another metric's (its name,
  values and constant answer's), as MRPC's have both F1 and accuracy."""
  seeds = {str(first_seed + i): {'dev': {'dev': {metric: v}}} for i, v in enumerate(values)}
  baseline = {'answer': '1', 'dev': {'dev': {metric: constant}}}
  if second:
    name, second_values, second_constant = second
    for seed, value in zip(seeds.values(), second_values, strict=True):
      seed['dev']['dev'][name] = value
    baseline['dev']['dev'][name] = second_constant
  path.mkdir(parents=True)
  path.joinpath('results.json').write_text(
    json.dumps(
      {
        'pretraining_step': pretraining_step,
        'seeds': seeds,
        'median': {'dev': {metric: sorted(values)[len(values) // 2]}},
        'constant_baseline': baseline,
      }
    )
  )


def _run(script: str, *args: str) -> list[list[str]]:
  """Runs benchmarks/SCRIPT on ARGS; its output lines, split into words."""
  done = subprocess.run(
    [sys.executable, f'benchmarks/{script}', *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  return [line.split() for line in done.stdout.splitlines()]


def _pretraining(run: pathlib.Path, windows: list[tuple[int, dict[str, float]]]) -> None:
  run.joinpath('checkpoints', str(windows[-1][0])).mkdir(parents=True, exist_ok=True)
  writer = metric_writer.MetricWriter(str(run))
  for step, scalars in windows:
    writer.write(step, scalars)
  writer.close()


def test_the_table_the_grid_and_the_verdicts(tmp_path):
  out = tmp_path
  gen = {'mlm_accuracy': 0.19, 'disc_recall': 0.01, 'disc_precision': 0.6}
  _pretraining(out / 'pretrain/electra-lr1e-3', [(200, gen), (400, {**gen, 'disc_recall': 0.3})])
  # A resumed run writes its events to a second file; the later window wins.
  _pretraining(
    out / 'pretrain/electra-lr1e-3', [(400, {**gen, 'mlm_accuracy': 0.25, 'disc_recall': 0.35})]
  )
  # Saved at 900 and 1,000: the later step has more digits.
  _pretraining(out / 'pretrain/mlm-lr1e-3', [(900, {'mlm_accuracy': 0.30})])
  _pretraining(out / 'pretrain/mlm-lr1e-3', [(1000, {'mlm_accuracy': 0.34})])
  (out / 'pretrain/electra.lr').write_text('1e-3\n')
  (out / 'pretrain/mlm.lr').write_text('1e-3\n')
  # The grid's rates were compared at step 200; only the chosen one went on.
  _pretraining(out / 'pretrain/electra-lr2e-3', [(200, {**gen, 'disc_recall': 0.02})])
  _results(out / 'select/electra-lr1e-3', 'accuracy', [0.6, 0.7, 0.65], 0.5, pretraining_step=200)
  _results(out / 'select/electra-lr2e-3', 'accuracy', [0.5, 0.6, 0.55], 0.5, pretraining_step=200)
  _results(out / 'finetune/sst-2-electra', 'accuracy', [0.82, 0.83, 0.81], 0.509)
  # MRPC's accuracy too: ELECTRA's F1 seeds fall among BERT's, its accuracy seeds do not.
  accuracy = ('accuracy', [0.72, 0.71, 0.73], 0.684)
  _results(out / 'finetune/mrpc-electra', 'f1', [0.80, 0.79, 0.81], 0.812, second=accuracy)
  # BERT's SST-2 seeds ran as processes of their own, one folder each.
  for seed, value in ((2, 0.805), (0, 0.80), (1, 0.79)):
    _results(out / f'finetune/sst-2-mlm/s{seed}', 'accuracy', [value], 0.509, first_seed=seed)
  accuracy = ('accuracy', [0.69, 0.70, 0.68], 0.684)
  _results(out / 'finetune/mrpc-mlm', 'f1', [0.80, 0.805, 0.79], 0.812, second=accuracy)
  # Lane 1's pretraining ran in two pieces, the first stopped by SIGTERM; both count.
  # The first two lines are in the format before the status column.
  (out / 'times.tsv').write_text(
    'pretrain pretrain/electra-lr1e-3\t3600\t0\n'
    'finetune finetune/sst-2-electra\t1800\t0\n'
    'pretrain pretrain/mlm-lr1e-3\t1800\t1\t143\n'
    'pretrain pretrain/mlm-lr1e-3\t1440\t1\t0\n'
  )

  lines = _run('objective_table.py', str(out), '200', '1e-3', '2e-3')
  assert ' '.join(lines[0]).startswith('Each row: 200 TFLOP of pretraining; fine-tuning')
  # The script's PRETRAIN_FLAGS, where it had some, head the table: the row names alone
  # would pass a variant off as the paper's objective. So do its FINETUNE_FLAGS: the
  # medians are for that fine-tuning, not the paper's. Each file adds to the heading.
  pretrain = "PRETRAIN_FLAGS '--config.objective.uniform_generator=True'"
  for name, flags, heading in (
    (
      'pretrain',
      '--config.objective.uniform_generator=True',
      f"{pretrain}; fine-tuning 3 seeds (GLUE under the paper's protocol), dev medians;",
    ),
    (
      'finetune',
      '--config.learning_rate=1e-4',
      f"{pretrain}; fine-tuning 3 seeds (GLUE under the paper's protocol, then "
      "FINETUNE_FLAGS '--config.learning_rate=1e-4'), dev medians;",
    ),
  ):
    (out / f'{name}_flags').write_text(flags + '\n')
    flagged = _run('objective_table.py', str(out), '200', '1e-3', '2e-3')
    assert ' '.join(flagged[0]) == (
      f"Each row: 200 TFLOP of pretraining with {heading} the paper's figures are for its "
      'own settings.'
    )
    assert flagged[1:] == lines[1:]
  assert ['electra', '1e-3', '400', '0.820,', '0.830,', '0.810', '(0.820)'] == lines[2][:7]
  assert lines[2][-3:] == ['(0.800)', '0.810', '85.0']  # MRPC median, mean, paper
  assert ['mlm', '1e-3', '1000', '0.800,', '0.790,', '0.805', '(0.800)'] == lines[3][:7]
  assert lines[3][-2:] == ['0.800', '82.2']
  assert ['constant', 'answer', '0.509', '(always', '1)', '0.812', '(always', '1)'] in lines
  # Below the table, MRPC's accuracy: each row's seeds, then the constant answer's.
  second = lines.index(['MRPC', 'acc', 'beside', 'MRPC', 'F1:', 'seeds', '(median)'])
  assert lines[second + 1 : second + 4] == [
    ['electra', '0.720,', '0.710,', '0.730', '(0.720)'],
    ['mlm', '0.690,', '0.700,', '0.680', '(0.690)'],
    ['constant', 'answer', '0.684', '(always', '1)'],
  ]
  # The grid: selection median and the step it read, the step the run trained to, then
  # MLM acc, main MLM acc, disc recall, disc precision of its last window.
  assert ['electra', '1e-3', '0.650', '200', '400', '0.250', '-', '0.350', '0.600'] in lines
  assert ['electra', '2e-3', '0.550', '200', '200', '0.190', '-', '0.020', '0.600'] in lines
  assert ['mlm', '1e-3', '-', '-', '1000', '0.340', '-', '-', '-'] in lines
  # The curves: each logged step (up to 8), the resumed run's later write winning.
  assert ['electra', '1e-3', 'MLM', 'acc', '200:', '0.190', '400:', '0.250'] in lines
  assert ['electra', '1e-3', 'disc', 'recall', '200:', '0.010', '400:', '0.350'] in lines
  assert ['mlm', '1e-3', 'MLM', 'acc', '900:', '0.300', '1000:', '0.340'] in lines
  assert ['electra', 'sst-2:', 'yes', 'mrpc:', 'no', 'mrpc', 'accuracy:', 'yes'] in lines
  assert ' '.join(lines[-1]).startswith(
    'Time (OUT/times.tsv): lane 0 1.50 h, lane 1 0.90 h; 144 job-minutes in all (1 stopped '
    'or failed pieces included).'
  )


def test_the_table_shows_the_tagging_tasks_it_finds(tmp_path):
  """TASKS='ner pos': the table's columns are the tasks OUT holds, in TASKS' order."""
  for row, ner, pos in (
    ('electra_t3', [0.36, 0.35, 0.37], [0.71, 0.72, 0.73]),
    ('mlm', [0.52, 0.53, 0.51], [0.85, 0.84, 0.86]),
  ):
    (tmp_path / 'pretrain').mkdir(exist_ok=True)
    (tmp_path / 'pretrain' / f'{row}.lr').write_text('1e-3\n')
    _results(tmp_path / f'finetune/pos-{row}', 'accuracy', pos, 0.167)
    _results(tmp_path / f'finetune/ner-{row}', 'f1', ner, 0.0)

  lines = _run('objective_table.py', str(tmp_path), '200', '1e-3')
  assert ' '.join(lines[1]).startswith(
    'row lr steps NER F1: seeds (median) POS acc: seeds (median) mean'
  )
  assert ['electra_t3', '1e-3', '-', '0.360,', '0.350,', '0.370', '(0.360)'] == lines[2][:7]
  # POS median and mean; no paper GLUE score beside a table without a GLUE task.
  assert lines[2][-3:] == ['0.730', '(0.720)', '0.540']
  assert lines[3][0] == 'mlm' and lines[3][-3:] == ['0.860', '(0.850)', '0.685']
  assert ['constant', 'answer', '0.000', '(always', '1)', '0.167', '(always', '1)'] in lines
  assert ['electra_t3', 'ner:', 'no', 'pos:', 'no'] in lines
  assert not [line for line in lines if line[:2] == ['MRPC', 'acc']]


def test_a_curve_spreads_its_points_and_keeps_the_last():
  by_step = {200 * i: i / 100 for i in range(1, 30)}  # Steps 200 to 5,800.
  points = curve(by_step)
  assert [step for step, _ in points] == [200, 1000, 1800, 2600, 3400, 4200, 5000, 5800]
  assert points[-1] == (5800, 0.29)
  assert curve({5: 1.0}) == [(5, 1.0)]


def test_seeds_pool_over_pretraining_seeds(tmp_path):
  """benchmarks/objective_seeds.py: each pretraining seed's OUT beats BERT on SST-2 on
  its own, but not once pooled, since seed 0's BERT is above seed 1's ELECTRA."""
  first, second = tmp_path / 'seed0', tmp_path / 'seed1'
  for out, electra, bert in (
    (first, [0.83, 0.82, 0.84], [0.81, 0.805, 0.80]),
    (second, [0.80, 0.81, 0.795], [0.78, 0.77, 0.79]),
  ):
    for row in ('electra', 'mlm'):
      (out / 'pretrain').mkdir(parents=True, exist_ok=True)
      (out / 'pretrain' / f'{row}.lr').write_text('1e-3\n')
    _results(out / 'finetune/sst-2-electra', 'accuracy', electra, 0.509)
    _results(out / 'finetune/sst-2-mlm', 'accuracy', bert, 0.509)
  accuracy = ('accuracy', [0.70, 0.69, 0.71], 0.684)
  _results(first / 'finetune/mrpc-electra', 'f1', [0.80, 0.79, 0.81], 0.812, second=accuracy)
  accuracy = ('accuracy', [0.68, 0.69, 0.70], 0.684)
  _results(first / 'finetune/mrpc-mlm', 'f1', [0.70, 0.71, 0.72], 0.812, second=accuracy)
  # ELECTRA 15% ran in the second OUT only, at another rate.
  (second / 'pretrain/electra_15.lr').write_text('2e-3\n')
  _results(second / 'finetune/sst-2-electra_15', 'accuracy', [0.70, 0.72, 0.71], 0.509)

  lines = _run('objective_seeds.py', str(first), str(second))
  # Rates, each OUT's median, then all seeds: count, median, range.
  assert [
    'electra',
    'sst-2',
    '1e-3,',
    '1e-3',
    '0.830,',
    '0.800',
    '6',
    '0.815',
    '0.795-0.840',
  ] in lines
  assert ['electra', 'mrpc', '1e-3', '0.800', '3', '0.800', '0.790-0.810'] in lines
  # MRPC's accuracy, pooled as a task of its own.
  assert ['electra', 'mrpc', 'accuracy', '1e-3', '0.700', '3', '0.700', '0.690-0.710'] in lines
  assert ['electra_15', 'sst-2', '2e-3', '0.710', '3', '0.710', '0.700-0.720'] in lines
  assert ['mlm', 'sst-2', '1e-3,', '1e-3', '0.805,', '0.780', '6', '0.795', '0.770-0.810'] in lines
  assert ['electra', 'sst-2:', 'no', 'mrpc:', 'yes', 'mrpc', 'accuracy:', 'no'] in lines
  assert ['electra_15', 'sst-2:', 'no'] in lines
  # Across pretraining seeds: ELECTRA's OUT medians 0.830 and 0.800 against BERT's 0.805
  # and 0.780 rank 3 of the 4 pairs above; of the 6 splits of four medians into two
  # pairs, 2 do as well. MRPC and ELECTRA 15% have one OUT each, too few to test.
  joined = [' '.join(line) for line in lines]
  heading = joined.index(
    'Across pretraining seeds (one median per OUT; exact one-sided Mann-Whitney):'
  )
  assert joined[heading + 1 :] == [
    'electra sst-2 above BERT, p = 0.333 (2 pretraining seeds against 2)'
  ]

  usage = subprocess.run(
    [sys.executable, 'benchmarks/objective_seeds.py'], cwd=REPO, capture_output=True, text=True
  )
  assert usage.returncode == 2 and usage.stderr.startswith('usage:')


def test_seeds_test_each_pretraining_seed_as_one_observation(tmp_path):
  """Three pretraining seeds a side on NER, every ELECTRA OUT's median below every
  BERT one's: the exact test's floor, 1/20; one crossing pair lifts it to 2/20."""
  outs = [tmp_path / f'seed{k}' for k in range(3)]
  for k, out in enumerate(outs):
    (out / 'pretrain').mkdir(parents=True)
    for row in ('electra_t3', 'mlm'):
      (out / 'pretrain' / f'{row}.lr').write_text('1e-3\n')
    _results(out / 'finetune/ner-electra_t3', 'f1', [0.36 + k / 100] * 3, 0.0)
    _results(out / 'finetune/ner-mlm', 'f1', [0.50 + k / 100] * 3, 0.0)
    # POS: seed 2's ELECTRA (0.755) is above seed 0's BERT (0.75).
    _results(out / 'finetune/pos-electra_t3', 'accuracy', [(0.73, 0.74, 0.755)[k]] * 3, 0.17)
    _results(out / 'finetune/pos-mlm', 'accuracy', [0.75 + k / 100] * 3, 0.17)

  lines = _run('objective_seeds.py', *map(str, outs))
  assert ['electra_t3', 'ner', '1e-3,', '1e-3,', '1e-3'] == lines[2][:5]
  assert ['electra_t3', 'ner:', 'no', 'pos:', 'no'] in lines
  tests = [' '.join(line) for line in lines if 'BERT,' in line]
  assert tests == [
    'electra_t3 ner below BERT, p = 0.050 (3 pretraining seeds against 3)',
    'electra_t3 pos below BERT, p = 0.100 (3 pretraining seeds against 3)',
  ]
