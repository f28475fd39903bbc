"""The flags that the GLUE commands (finetune, probe) share: the config, the task
and the model."""

import dataclasses
import os

from absl import flags
from ml_collections import config_flags

from electra_jax.finetune import glue

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), '..', '..', 'configs', 'finetune.py')


@dataclasses.dataclass(frozen=True)
class TaskFlags:
  config: flags.FlagHolder
  task: flags.FlagHolder
  glue_dir: flags.FlagHolder
  init: flags.FlagHolder


def define_task_flags(config_help: str) -> TaskFlags:
  """Defines --config (configs/finetune.py), --task, --glue_dir and --init, all required
  but --config. Call once, at a command's module level."""
  holders = TaskFlags(
    config_flags.DEFINE_config_file('config', _DEFAULT_CONFIG, config_help, lock_config=True),
    flags.DEFINE_string('task', None, f'GLUE task: {", ".join(glue.TASKS)} (case-insensitive).'),
    flags.DEFINE_string(
      'glue_dir', None, 'Folder holding the task folders as GLUE ships them (CoLA/train.tsv, ...).'
    ),
    flags.DEFINE_string('init', None, 'A pretraining workdir or an HF ELECTRA directory.'),
  )
  flags.mark_flags_as_required(['task', 'glue_dir', 'init'])
  return holders
