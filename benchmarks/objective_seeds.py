"""Pools benchmarks/objective_ablation.sh's fine-tuning seeds over pretraining seeds.

  python benchmarks/objective_seeds.py OUT [OUT ...]

Each OUT is one pretraining seed's run of the script, on the same corpus and budget
(PRETRAIN_FLAGS='--config.seed=N' into an OUT of its own). For each row and task it
prints each OUT's rate and median, then the median and range of all their seeds
together (a task's second metric too, MRPC's accuracy beside its F1, as a task of its
own); then the issue's test over all of them: is every seed of the row above
every BERT (mlm) seed? A row missing from some OUTs is pooled over the others: it
lists fewer rates and medians. At small budgets a second pretraining seed
can move a row's median by more than the gaps between rows
(docs/experiments/2026-11-25_objective_ablation.md), which one OUT cannot show.

Last, with two OUTs or more of a row and of BERT, the test across pretraining seeds:
each OUT's median is one observation, and the exact one-sided Mann-Whitney test asks
how often a random split of those medians would put the row's as far above (or
below) BERT's. Fine-tuning seeds of one pretraining run are not independent draws of
the objective, so this is the test that the pooled medians' gap answers to; it
cannot go below 1/20 with three pretraining seeds a side, or 1/6 with two.
"""

import pathlib
import statistics
import sys

from objective_table import PAPER, TASKS, chosen_rate, print_verdicts, scores, seeds, tasks_run
from scipy import stats


def pooled(outs: list[pathlib.Path]) -> dict[tuple[str, str], list[tuple[str, list[float]]]]:
  """{(row, score): [(rate, fine-tuning seeds) for each OUT that has them]}, a score
  being a task's metric or its second one (objective_table.scores)."""
  found: dict[tuple[str, str], list[tuple[str, list[float]]]] = {}
  for out in outs:
    for row in PAPER:
      for key, task, metric in scores(TASKS):
        got = seeds(out, row, task, metric)
        if got is not None:
          found.setdefault((row, key), []).append((chosen_rate(out, row), got[0]))
  return found


def print_pooled(outs: list[pathlib.Path]) -> None:
  found = pooled(outs)
  print(
    f'{len(outs)} pretraining seeds (one OUT each); per row and task: the rate and median '
    'of each OUT that has the row, then all their fine-tuning seeds together.'
  )
  print(
    f'{"row":15} {"task":13} {"rates":16} {"medians":22} {"seeds":>5} {"median":>7} {"range":>12}'
  )
  every = {key: [value for _, values in runs for value in values] for key, runs in found.items()}
  for row in PAPER:
    for task, _, _ in scores(tasks_run(outs)):
      if (row, task) not in found:
        continue
      runs, values = found[row, task], every[row, task]
      print(
        f'{row:15} {task:13} {", ".join(lr for lr, _ in runs):16} '
        f'{", ".join(f"{statistics.median(run):.3f}" for _, run in runs):22} '
        f'{len(values):>5} {statistics.median(values):>7.3f} '
        f'{f"{min(values):.3f}-{max(values):.3f}":>12}'
      )

  print_verdicts(every, '\nEvery seed of the row, in every OUT, above every BERT (mlm) seed?')
  print_seed_tests(found)


def seed_test(row: list[float], bert: list[float]) -> tuple[str, float]:
  """Whether the row's pretraining-seed medians sit above or below BERT's (by their
  median), and the exact one-sided Mann-Whitney p of that direction."""
  side = 'above' if statistics.median(row) > statistics.median(bert) else 'below'
  alternative = 'greater' if side == 'above' else 'less'
  return side, stats.mannwhitneyu(row, bert, alternative=alternative, method='exact').pvalue


def print_seed_tests(found: dict[tuple[str, str], list[tuple[str, list[float]]]]) -> None:
  lines = []
  for row in PAPER:
    for task, _, _ in scores(TASKS):
      runs, bert = found.get((row, task), []), found.get(('mlm', task), [])
      if row == 'mlm' or len(runs) < 2 or len(bert) < 2:
        continue
      row_medians = [statistics.median(values) for _, values in runs]
      bert_medians = [statistics.median(values) for _, values in bert]
      side, p = seed_test(row_medians, bert_medians)
      lines.append(
        f'{row:15} {task:13} {side} BERT, p = {p:.3f} '
        f'({len(row_medians)} pretraining seeds against {len(bert_medians)})'
      )
  if lines:
    print('\nAcross pretraining seeds (one median per OUT; exact one-sided Mann-Whitney):')
    print('\n'.join(lines))


if __name__ == '__main__':
  if len(sys.argv) < 2:
    print('usage: python benchmarks/objective_seeds.py OUT [OUT ...]', file=sys.stderr)
    sys.exit(2)
  print_pooled([pathlib.Path(arg) for arg in sys.argv[1:]])
