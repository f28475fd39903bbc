"""Linear probes of a frozen discriminator's layers on a fine-tuning task.

  python -m electra_jax.probe --task=sst-2 --data_dir=GLUE --init=WORKDIR_OR_HF_DIR \
      [--config.random_init=True] [--config.max_train_examples=N] [--output=ridge_probes.json]

Prints one row per layer (the embeddings, then each layer's output) with the
dev metrics of a ridge probe on the [CLS] vector and on the mean over the
tokens and both vectors' effective rank (near 1: a collapsed layer), then a
line naming the best probe. See electra_jax/finetune/ridge_probes.py.
"""

import json

from absl import flags

from electra_jax import cli, storage
from electra_jax.finetune import ridge_probes, task_flags

_FLAGS = task_flags.define_task_flags(
  'configs/finetune.py[:small|base|large]: its data settings and random_init.'
)
_OUTPUT = flags.DEFINE_string('output', None, 'Also write the results to this JSON file.')


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  files = _FLAGS.task_files()
  results = ridge_probes.probe(_FLAGS.config.value, files, _FLAGS.init.value)
  if _OUTPUT.value:
    storage.write_text(_OUTPUT.value, json.dumps(results, indent=1))
  print(ridge_probes.results_table(results))
  task = files.task
  split, metric = task.dev_splits[0], task.metrics[0]  # The task's main figure.
  best = max(results['probes'], key=lambda r: r['dev'][split][metric])
  layer = 'embeddings' if best['layer'] == 0 else f'layer {best["layer"]}'
  print(
    f'{task.name} best probe: {layer}, {best["pooling"]} pooling, '
    f'{split} {metric}={best["dev"][split][metric]:.4f}'
  )


if __name__ == '__main__':
  cli.run(main)
