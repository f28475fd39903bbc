"""Draws pretraining runs' curves from their TensorBoard event files, side by side.

  python benchmarks/plot_runs.py --output=runs.png NAME=WORKDIR [NAME=WORKDIR ...]

One row per run; the columns are the figures docs/healthy_runs.md discusses:
the total loss, the generator's MLM accuracy, the discriminator's loss against
the best constant answer's, its precision and recall, and the held-out AUC
where the run evaluated. Needs matplotlib (`pip install matplotlib`).
"""

import argparse
import sys

try:
  import matplotlib
except ImportError:
  sys.exit('error: benchmarks/plot_runs.py needs matplotlib: pip install matplotlib')
matplotlib.use('Agg')  # Files only; no display needed.
import matplotlib.pyplot as plt  # noqa: E402  # pylint: disable=g-import-not-at-top

from electra_jax import metric_writer, objectives  # noqa: E402


def _draw(axes, scalars: dict[str, list[tuple[int, float]]], name: str) -> None:
  def line(ax, tag, label=None, **style):
    if tag in scalars:
      steps, values = zip(*scalars[tag])
      ax.plot(steps, values, label=label or tag.split('/', 1)[1], **style)

  panels = [
    ('loss (MLM + 50 x BCE)', ['train/loss']),
    ('generator MLM accuracy', ['train/mlm_accuracy', 'eval/mlm_accuracy']),
    ('discriminator loss', ['train/disc_loss', 'eval/disc_loss']),
    ('discriminator precision, recall', ['train/disc_precision', 'train/disc_recall']),
    ('held-out AUC', ['eval/disc_auc']),
  ]
  for ax, (title, tags) in zip(axes, panels):
    for tag in tags:
      line(ax, tag, label=tag, marker='o' if tag.startswith('eval/') else None, markersize=3)
    if title == 'discriminator loss' and 'train/replaced_fraction' in scalars:
      steps, fractions = zip(*scalars['train/replaced_fraction'])
      ax.plot(
        steps,
        [objectives.constant_answer_disc_loss(p) for p in fractions],
        '--',
        color='grey',
        label='constant answer',
      )
    ax.set_title(f'{name}: {title}', fontsize=9)
    ax.set_xlabel('step', fontsize=8)
    ax.tick_params(labelsize=7)
    if ax.lines:
      ax.legend(fontsize=7)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--output', required=True, help='The image to write (.png, .svg).')
  parser.add_argument('runs', nargs='+', help='NAME=WORKDIR of a pretraining run.')
  args = parser.parse_args()
  runs = [run.split('=', 1) for run in args.runs]
  if any(len(run) != 2 for run in runs):
    parser.error('each run is NAME=WORKDIR')
  figure, axes = plt.subplots(len(runs), 5, figsize=(20, 3.6 * len(runs)), squeeze=False)
  for row, (name, workdir) in zip(axes, runs):
    scalars = metric_writer.read_scalars(workdir)
    if not scalars:
      parser.error(f'{workdir}: no TensorBoard scalars; is it a pretraining workdir?')
    _draw(row, scalars, name)
  figure.tight_layout()
  figure.savefig(args.output, dpi=90)
  print(f'wrote {args.output}')


if __name__ == '__main__':
  main()
