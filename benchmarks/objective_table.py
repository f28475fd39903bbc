"""Prints benchmarks/objective_ablation.sh's Table-5-style table from its OUT folder.

  python benchmarks/objective_table.py OUT BUDGET_TFLOP LR [LR ...]

Reads OUT/finetune/TASK-ROW/results.json (paper protocol), OUT/select/ROW-lrLR
(the learning-rate grid) and OUT/pretrain/ROW.lr (each row's chosen rate); rows
not run yet are left out, so it can be printed at any point of the run.
"""

import json
import pathlib
import statistics
import sys

out, budget, lrs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3:]
# The paper's Table 5: GLUE dev score of ELECTRA-Base-sized models at equal compute.
paper = {
  'electra': 85.0,
  'electra_t3': None,
  'all_tokens_mlm': 84.3,
  'replace_mlm': 82.4,
  'electra_15': 82.4,
  'mlm': 82.2,
  'electric': None,
  'random': None,
}
tasks = (('sst-2', 'accuracy'), ('mrpc', 'f1'))


def seeds(row, task, metric):
  path = out / 'finetune' / f'{task}-{row}' / 'results.json'
  if not path.exists():
    return None
  result = json.loads(path.read_text())
  return [s['dev']['dev'][metric] for s in result['seeds'].values()], result


print(
  f"Each row: {budget} TFLOP of pretraining; fine-tuning under the paper's protocol, "
  '3 seeds, dev medians.'
)
print(
  f'{"row":15} {"lr":6} {"steps":>6} {"SST-2 acc: seeds (median)":34} '
  f'{"MRPC F1: seeds (median)":34} {"mean":>6} {"paper GLUE":>10}'
)
found = {}
for row in paper:
  cells, medians = [], []
  for task, metric in tasks:
    got = seeds(row, task, metric)
    if got is None:
      cells.append('not run')
      continue
    found[row, task] = got[0]
    median = statistics.median(got[0])
    medians.append(median)
    cells.append(', '.join(f'{v:.3f}' for v in got[0]) + f' ({median:.3f})')
  if not medians:
    continue
  lr_file = out / 'pretrain' / f'{row}.lr'
  lr = lr_file.read_text().strip() if lr_file.exists() else '-'
  steps = '-'
  if lr != '-':
    meta = sorted((out / 'pretrain' / f'{row}-lr{lr}' / 'checkpoints').glob('[0-9]*'))
    steps = meta[-1].name if meta else '-'
  mean = f'{statistics.mean(medians):.3f}' if len(medians) == len(tasks) else '-'
  print(
    f'{row:15} {lr:6} {steps:>6} {cells[0]:34} {cells[1]:34} {mean:>6} '
    f'{paper[row] if paper[row] else "-":>10}'
  )
constant = next(
  (
    got[1]['constant_baseline']
    for (row, task), _ in found.items()
    if task == 'mrpc'
    for got in [seeds(row, task, 'f1')]
  ),
  None,
)
if constant:
  print(
    f'{"constant answer":15} {"":6} {"":>6} {"":34} '
    f'{constant["dev"]["dev"]["f1"]:.3f} (always {constant["answer"]})'
  )

print('\nLearning-rate grid: median dev accuracy on 1,000 SST-2 examples (3 seeds)')
for row in paper:
  scores = []
  for lr in lrs:
    path = out / 'select' / f'{row}-lr{lr}' / 'results.json'
    if path.exists():
      scores.append(f'lr {lr}: {json.loads(path.read_text())["median"]["dev"]["accuracy"]:.3f}')
  if scores:
    print(f'{row:15} ' + '   '.join(scores))

print('\nEvery seed of the row above every BERT (mlm) seed?')
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
  for task, _ in tasks:
    if (row, task) in found and ('mlm', task) in found:
      above = min(found[row, task]) > max(found['mlm', task])
      verdicts.append(f'{task}: {"yes" if above else "no"}')
  if verdicts:
    print(f'{row:15} ' + '   '.join(verdicts))
