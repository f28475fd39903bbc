"""Pools benchmarks/objective_ablation.sh's fine-tuning seeds over pretraining seeds.

  python benchmarks/objective_seeds.py OUT [OUT ...]

Each OUT is one pretraining seed's run of the script, on the same corpus and budget
(PRETRAIN_FLAGS='--config.seed=N' into an OUT of its own). For each row and task it
prints each OUT's rate and median, then the median and range of all their seeds
together; last, the issue's test over all of them: is every seed of the row above
every BERT (mlm) seed? A row missing from some OUTs is pooled over the others: it
lists fewer rates and medians. At small budgets a second pretraining seed
can move a row's median by more than the gaps between rows
(docs/experiments/2026-11-25_objective_ablation.md), which one OUT cannot show.
"""

import pathlib
import statistics
import sys

from objective_table import PAPER, TASKS, seeds


def pooled(outs: list[pathlib.Path]) -> dict[tuple[str, str], list[tuple[str, list[float]]]]:
  """{(row, task): [(rate, fine-tuning seeds) for each OUT that has them]}."""
  found: dict[tuple[str, str], list[tuple[str, list[float]]]] = {}
  for out in outs:
    for row in PAPER:
      lr_file = out / 'pretrain' / f'{row}.lr'
      lr = lr_file.read_text().strip() if lr_file.exists() else '-'
      for task, metric in TASKS:
        got = seeds(out, row, task, metric)
        if got is not None:
          found.setdefault((row, task), []).append((lr, got[0]))
  return found


def print_pooled(outs: list[pathlib.Path]) -> None:
  found = pooled(outs)
  print(
    f'{len(outs)} pretraining seeds (one OUT each); per row and task: the rate and median '
    'of each OUT that has the row, then all their fine-tuning seeds together.'
  )
  print(
    f'{"row":15} {"task":6} {"rates":16} {"medians":22} {"seeds":>5} {"median":>7} {"range":>12}'
  )
  for row, task in ((row, task) for row in PAPER for task, _ in TASKS):
    if (row, task) not in found:
      continue
    runs = found[row, task]
    every = [value for _, values in runs for value in values]
    print(
      f'{row:15} {task:6} {", ".join(lr for lr, _ in runs):16} '
      f'{", ".join(f"{statistics.median(values):.3f}" for _, values in runs):22} '
      f'{len(every):>5} {statistics.median(every):>7.3f} '
      f'{f"{min(every):.3f}-{max(every):.3f}":>12}'
    )

  print('\nEvery seed of the row, in every OUT, above every BERT (mlm) seed?')
  for row in PAPER:
    verdicts = []
    for task, _ in TASKS:
      if row == 'mlm' or (row, task) not in found or ('mlm', task) not in found:
        continue
      lowest = min(v for _, values in found[row, task] for v in values)
      highest = max(v for _, values in found['mlm', task] for v in values)
      verdicts.append(f'{task}: {"yes" if lowest > highest else "no"}')
    if verdicts:
      print(f'{row:15} ' + '   '.join(verdicts))


if __name__ == '__main__':
  if len(sys.argv) < 2:
    print('usage: python benchmarks/objective_seeds.py OUT [OUT ...]', file=sys.stderr)
    sys.exit(2)
  print_pooled([pathlib.Path(arg) for arg in sys.argv[1:]])
