"""What the GLUE commands (finetune, probe) share: the flags that name the
config, the task and the model, and the errors they report in one line."""

from collections.abc import Callable
import dataclasses
import os
import sys
from typing import Any

from absl import flags, logging
from ml_collections import config_flags

from electra_jax import checkpointing, config_lib, hf_interop
from electra_jax.data import tokenizers
from electra_jax.finetune import glue, train

# The errors a bad input raises; the commands print their message, not a traceback.
USER_ERRORS = (config_lib.ConfigError, glue.GlueDataError, train.FinetuneError,
               FileNotFoundError, checkpointing.CheckpointError, hf_interop.HFCheckpointError,
               tokenizers.TokenizerError)

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
      config_flags.DEFINE_config_file('config', _DEFAULT_CONFIG, config_help,
                                      lock_config=True),
      flags.DEFINE_string('task', None, f'GLUE task: {", ".join(glue.TASKS)} '
                          '(case-insensitive).'),
      flags.DEFINE_string('glue_dir', None, 'Folder holding the task folders as GLUE ships '
                          'them (CoLA/train.tsv, ...).'),
      flags.DEFINE_string('init', None, 'A pretraining workdir or an HF ELECTRA directory.'))
  flags.mark_flags_as_required(['task', 'glue_dir', 'init'])
  return holders


def run(command: Callable[..., Any], *args: Any) -> Any:
  """command(*args), with a bad input's error printed as one line and exit status 1."""
  checkpointing.hide_orbax_info_logs()
  try:
    return command(*args)
  except USER_ERRORS as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')
