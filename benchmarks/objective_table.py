"""Prints benchmarks/objective_ablation.sh's Table-5-style table from its OUT folder.

  python benchmarks/objective_table.py OUT BUDGET_TFLOP LR [LR ...]

Reads OUT/finetune/TASK-ROW/results.json (paper protocol; or one results.json per
seed in its subfolders, when each seed ran as its own process), OUT/select/ROW-lrLR
(the learning-rate grid, and the pretraining step it compared), OUT/pretrain/ROW.lr
(each row's chosen rate) and each pretraining run's checkpoints and TensorBoard
events; rows not run yet are left out, so it can be printed at any point of the run.

OUT/pretrain_flags and OUT/finetune_flags hold the PRETRAIN_FLAGS and FINETUNE_FLAGS
of the script's runs into OUT (it refuses others there); the heading names them, since
a row is labelled by its objective alone (a uniform_generator run shows as `electra`)
and the paper's figures are for its own protocol.

Below the table, a task's SECOND metric where F1 alone can mislead: MRPC's accuracy,
with the constant answer's, and in the verdicts.

Last, the time each lane spent, from OUT/times.tsv (every piece of a run in pieces).

Beside the grid it prints each pretraining run's last log window: the masked
LM's accuracy (the generator's in the ELECTRA rows) and the discriminator's
recall and precision; after it, the first two at CURVE_POINTS logged steps of
each run, which show when the masked LM left its plateau. A masked LM stuck near
0.19 here predicts token frequencies, and an ELECTRA discriminator with recall
near 0 predicts the prior: fine-tuning scores from such a run say little about
the objective (docs/experiments/2026-11-25_objective_ablation.md).
"""

from collections.abc import Iterable
import json
import pathlib
import statistics
import sys

from electra_jax import metric_writer

# The paper's Table 5: GLUE dev score of ELECTRA-Base-sized models at equal compute.
PAPER = {
  'electra': 85.0,
  'electra_t3': None,
  'all_tokens_mlm': 84.3,
  'replace_mlm': 82.4,
  'electra_15': 82.4,
  'mlm': 82.2,
  'electric': None,
  'random': None,
}
# The tasks objective_ablation.sh fine-tunes on (its TASKS): the dev metric each is
# scored by, and its column heading. The table shows those that OUT holds.
TASKS = {
  'sst-2': ('accuracy', 'SST-2 acc'),
  'mrpc': ('f1', 'MRPC F1'),
  'ner': ('f1', 'NER F1'),
  'chunking': ('f1', 'chunking F1'),
  'pos': ('accuracy', 'POS acc'),
}
# A second dev metric, shown below the table: MRPC's F1 rewards leaning to
# "paraphrase" (always answering it scores 0.812, above most rows at these budgets),
# and its accuracy (0.684 for that answer) tells a row that learned the task from one
# that leans.
SECOND = {'mrpc': ('accuracy', 'MRPC acc')}
# Pretraining's figures beside the grid: (train/ tag, column heading).
PRETRAINING = (
  ('mlm_accuracy', 'MLM acc'),
  ('main_mlm_accuracy', 'main MLM acc'),
  ('disc_recall', 'disc recall'),
  ('disc_precision', 'disc precision'),
)
# The curves printed after the grid: when (and whether) the masked LM left the
# token-frequency plateau, and the discriminator's recall with it.
CURVES = (('mlm_accuracy', 'MLM acc'), ('disc_recall', 'disc recall'))
CURVE_POINTS = 8


def seeds(out: pathlib.Path, row: str, task: str, metric: str) -> tuple[list[float], dict] | None:
  """Each seed's dev `metric` for ROW on TASK, and a results.json of the run (for its
  constant baseline). Seeds run as processes of their own (--config.seed=N
  --config.num_seeds=1, each in a subfolder of TASK-ROW) are read together."""
  folder = out / 'finetune' / f'{task}-{row}'
  paths = [folder / 'results.json']
  if not paths[0].exists():
    paths = sorted(folder.glob('*/results.json'))
  if not paths:
    return None
  results = [json.loads(path.read_text()) for path in paths]
  per_seed = {int(seed): s for result in results for seed, s in result['seeds'].items()}
  return [per_seed[seed]['dev']['dev'][metric] for seed in sorted(per_seed)], results[0]


def train_scalars(workdir: pathlib.Path) -> dict[str, dict[int, float]]:
  """A pretraining run's train/ scalars, {name: {step: value}}; event files are read
  oldest first, so a resumed run's later write of a step wins."""
  found: dict[str, dict[int, float]] = {}
  for tag, values in metric_writer.read_scalars(str(workdir)).items():
    if tag.startswith('train/'):
      found[tag.removeprefix('train/')] = dict(values)
  return found


def last_window(scalars: dict[str, dict[int, float]]) -> dict[str, float]:
  """The scalars of the last logged step ({} if none)."""
  if not scalars:
    return {}
  last = max(max(by_step) for by_step in scalars.values())
  return {name: by_step[last] for name, by_step in scalars.items() if last in by_step}


def curve(by_step: dict[int, float], points: int = CURVE_POINTS) -> list[tuple[int, float]]:
  """Up to `points` of a scalar's logged steps, evenly spread, the last included."""
  steps = sorted(by_step)
  picked = sorted({steps[round(i * (len(steps) - 1) / max(points - 1, 1))] for i in range(points)})
  return [(step, by_step[step]) for step in picked]


def trained_steps(run: pathlib.Path) -> str:
  """The step of a pretraining run's newest checkpoint ('-' if none)."""
  # By number: 10181 is later than 8000.
  saved = [int(p.name) for p in (run / 'checkpoints').glob('[0-9]*') if p.name.isdigit()]
  return str(max(saved)) if saved else '-'


def chosen_rate(out: pathlib.Path, row: str) -> str:
  """The learning rate objective_ablation.sh chose for ROW ('-' if none yet)."""
  lr_file = out / 'pretrain' / f'{row}.lr'
  return lr_file.read_text().strip() if lr_file.exists() else '-'


def tasks_run(outs: list[pathlib.Path]) -> list[str]:
  """The TASKS that some OUT has fine-tuned a row on, in TASKS' order (SST-2 and MRPC,
  the script's default, before any has)."""
  run = [task for task in TASKS if any(any(out.glob(f'finetune/{task}-*')) for out in outs)]
  return run or ['sst-2', 'mrpc']


def second_key(task: str) -> str:
  """'TASK METRIC': the verdicts' and objective_seeds.py's name for TASK's SECOND metric."""
  return f'{task} {SECOND[task][0]}'


def scores(tasks: Iterable[str]) -> list[tuple[str, str, str]]:
  """(key, task, metric) for each task's metric, then for each SECOND metric (keyed by
  second_key)."""
  first = [(task, task, TASKS[task][0]) for task in tasks]
  return first + [(second_key(task), task, SECOND[task][0]) for task in tasks if task in SECOND]


def seeds_cell(values: list[float]) -> str:
  """A row's seeds and, in brackets, their median."""
  return ', '.join(f'{v:.3f}' for v in values) + f' ({statistics.median(values):.3f})'


def constant_cell(answer: dict, metric: str) -> str:
  """The constant answer's dev `metric` and the answer (a results.json's
  constant_baseline)."""
  return f'{answer["dev"]["dev"][metric]:.3f} (always {answer["answer"]})'


def print_verdicts(found: dict[tuple[str, str], list[float]], heading: str) -> None:
  """The issue's test, per row and score (a key of `scores`): is every seed in `found`
  above every BERT (mlm) seed?"""
  print(heading)
  for row in (
    'electra_t3',
    'electra',
    'electra_15',
    'replace_mlm',
    'all_tokens_mlm',
    'electric',
    'random',
  ):
    verdicts = []
    for task, _, _ in scores(TASKS):
      if (row, task) in found and ('mlm', task) in found:
        above = min(found[row, task]) > max(found['mlm', task])
        verdicts.append(f'{task}: {"yes" if above else "no"}')
    if verdicts:
      print(f'{row:15} ' + '   '.join(verdicts))


def flags_in(out: pathlib.Path, name: str) -> str:
  """The PRETRAIN_FLAGS or FINETUNE_FLAGS (name: pretrain, finetune) kept in OUT."""
  path = out / f'{name}_flags'
  return path.read_text().strip() if path.exists() else ''


def print_table(out: pathlib.Path, budget: str, lrs: list[str]) -> None:
  tasks = tasks_run([out])
  # The paper's GLUE score beside the rows only where the table has a GLUE task.
  glue = bool({'sst-2', 'mrpc'} & set(tasks))
  pretrain_flags, finetune_flags = (flags_in(out, name) for name in ('pretrain', 'finetune'))
  print(
    f'Each row: {budget} TFLOP of pretraining'
    + (f" with PRETRAIN_FLAGS '{pretrain_flags}'" if pretrain_flags else '')
    + "; fine-tuning 3 seeds (GLUE under the paper's protocol"
    + (f", then FINETUNE_FLAGS '{finetune_flags}'" if finetune_flags else '')
    + '), dev medians'
    + (
      "; the paper's figures are for its own settings."
      if glue and (pretrain_flags or finetune_flags)
      else '.'
    )
  )
  print(
    f'{"row":15} {"lr":6} {"steps":>6} '
    + ' '.join(f'{TASKS[task][1] + ": seeds (median)":34}' for task in tasks)
    + f' {"mean":>6}'
    + (f' {"paper GLUE":>10}' if glue else '')
  )
  found, constant = {}, {}
  for row in PAPER:
    cells, medians = [], []
    for task in tasks:
      metric = TASKS[task][0]
      got = seeds(out, row, task, metric)
      if got is None:
        cells.append('not run')
        continue
      found[row, task] = got[0]
      constant.setdefault(task, constant_cell(got[1]['constant_baseline'], metric))
      medians.append(statistics.median(got[0]))
      cells.append(seeds_cell(got[0]))
    if not medians:
      continue
    lr = chosen_rate(out, row)
    steps = trained_steps(out / 'pretrain' / f'{row}-lr{lr}') if lr != '-' else '-'
    mean = f'{statistics.mean(medians):.3f}' if len(medians) == len(tasks) else '-'
    print(
      f'{row:15} {lr:6} {steps:>6} '
      + ' '.join(f'{cell:34}' for cell in cells)
      + f' {mean:>6}'
      + (f' {PAPER[row] if PAPER[row] else "-":>10}' if glue else '')
    )
  if constant:
    print(
      f'{"constant answer":15} {"":6} {"":>6} '
      + ' '.join(f'{constant.get(task, "-"):34}' for task in tasks).rstrip()
    )
  for task in tasks:
    if task in SECOND:
      found.update(print_second(out, task))

  print(
    '\nLearning-rate grid: median dev accuracy on 1,000 SST-2 examples (3 seeds) of the '
    'checkpoint at step "at"; the run trained to step "trained" (only the chosen rate '
    "goes on past the comparison), and its last log window (MLM acc: the generator's in "
    'ELECTRA rows)'
  )
  print(
    f'{"row":15} {"lr":6} {"select":>6} {"at":>6} {"trained":>7} '
    + ' '.join(f'{h:>14}' for _, h in PRETRAINING)
  )
  scalars = {
    (row, lr): train_scalars(out / 'pretrain' / f'{row}-lr{lr}') for row in PAPER for lr in lrs
  }
  for row in PAPER:
    for lr in lrs:
      select = out / 'select' / f'{row}-lr{lr}' / 'results.json'
      window = last_window(scalars[row, lr])
      if not select.exists() and not window:
        continue
      score, at = '-', '-'
      if select.exists():
        selected = json.loads(select.read_text())
        score = f'{selected["median"]["dev"]["accuracy"]:.3f}'
        at = str(selected['pretraining_step'])
      trained = trained_steps(out / 'pretrain' / f'{row}-lr{lr}')
      figures = ' '.join(
        f'{window[tag]:>14.3f}' if tag in window else f'{"-":>14}' for tag, _ in PRETRAINING
      )
      print(f'{row:15} {lr:6} {score:>6} {at:>6} {trained:>7} {figures}')

  print(
    '\nPretraining curves, step: value (a masked LM near 0.19 on the 8,000-piece vocabulary '
    'still predicts token frequencies)'
  )
  for (row, lr), run in scalars.items():
    for tag, heading in CURVES:
      if tag in run:
        points = '  '.join(f'{step}: {value:.3f}' for step, value in curve(run[tag]))
        print(f'{row:15} {lr:6} {heading:12} {points}')

  print_verdicts(found, '\nEvery seed of the row above every BERT (mlm) seed?')


def print_second(out: pathlib.Path, task: str) -> dict[tuple[str, str], list[float]]:
  """TASK's SECOND metric for each row that has it, and the constant answer's; returns
  the seeds, keyed (row, second_key(TASK)), for the verdicts."""
  metric, heading = SECOND[task]
  print(f'\n{heading} beside {TASKS[task][1]}: seeds (median)')
  found, answer = {}, None
  for row in PAPER:
    got = seeds(out, row, task, metric)
    if got is not None:
      found[row, second_key(task)] = got[0]
      answer = got[1]['constant_baseline']
      print(f'{row:15} {seeds_cell(got[0])}')
  if answer is not None:
    print(f'{"constant answer":15} {constant_cell(answer, metric)}')
  return found


def lane_seconds(out: pathlib.Path) -> tuple[dict[str, int], int]:
  """Seconds each lane spent on its jobs, summed over the pieces of the run, and how
  many pieces did not finish: objective_ablation.sh writes
  "JOB<TAB>seconds<TAB>lane<TAB>status" to OUT/times.tsv (no status before 2026-11-28)."""
  lanes: dict[str, int] = {}
  unfinished = 0
  path = out / 'times.tsv'
  for line in path.read_text().splitlines() if path.exists() else []:
    _, seconds, lane, *status = line.split('\t')
    lanes[lane] = lanes.get(lane, 0) + int(seconds)
    unfinished += status not in ([], ['0'])
  return dict(sorted(lanes.items())), unfinished


def print_times(out: pathlib.Path) -> None:
  lanes, unfinished = lane_seconds(out)
  if lanes:
    print(
      '\nTime (OUT/times.tsv): '
      + ', '.join(f'lane {lane} {s / 3600:.2f} h' for lane, s in lanes.items())
      + f'; {sum(lanes.values()) / 60:.0f} job-minutes in all'
      + (f' ({unfinished} stopped or failed pieces included)' if unfinished else '')
      + ". The slowest lane is the table's time, if its pieces ran back to back."
    )


if __name__ == '__main__':
  print_table(pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
  print_times(pathlib.Path(sys.argv[1]))
