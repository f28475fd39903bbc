"""Fine-tunes a pretrained ELECTRA discriminator on a GLUE task.

  python -m electra_jax.finetune --task=mrpc --glue_dir=GLUE --init=WORKDIR_OR_HF_DIR \
      --workdir=OUT [--config=configs/finetune.py:base] [--config.key=value ...]

Runs config.num_seeds seeds and prints a table of each seed's dev metrics and
their median; its last line gives the task's dev metrics. OUT receives
results.json, TensorBoard logs per seed and test predictions in GLUE's
submission format (OUT/seed_N/TASK.tsv).
"""

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from electra_jax import checkpointing, config_lib, hf_interop
from electra_jax.data import tokenizers
from electra_jax.finetune import glue, train

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), '..', '..', 'configs', 'finetune.py')
_CONFIG = config_flags.DEFINE_config_file('config', _DEFAULT_CONFIG,
                                          'configs/finetune.py[:small|base|large].',
                                          lock_config=True)
_TASK = flags.DEFINE_string('task', None, f'GLUE task: {", ".join(glue.TASKS)} '
                            '(case-insensitive).')
_GLUE_DIR = flags.DEFINE_string('glue_dir', None, 'Folder holding the task folders as GLUE '
                                'ships them (CoLA/train.tsv, ...).')
_INIT = flags.DEFINE_string('init', None, 'A pretraining workdir or an HF ELECTRA directory.')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Output folder.')
flags.mark_flags_as_required(['task', 'glue_dir', 'init', 'workdir'])

_ERRORS = (config_lib.ConfigError, glue.GlueDataError, train.FinetuneError, FileNotFoundError,
           checkpointing.CheckpointError, hf_interop.HFCheckpointError, tokenizers.TokenizerError)


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  checkpointing.hide_orbax_info_logs()
  try:
    results = train.finetune(_CONFIG.value, _TASK.value, _GLUE_DIR.value, _INIT.value,
                             _WORKDIR.value)
  except _ERRORS as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')
  print(train.results_table(results))
  summary = '  '.join(f'{split} {metric}={value:.4f}' for split, values in
                      results['median'].items() for metric, value in values.items())
  print(f'{results["task"]} dev, median of {len(results["seeds"])} seeds: {summary}')


if __name__ == '__main__':
  app.run(main)
