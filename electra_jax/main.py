"""Pretrains ELECTRA.

  python -m electra_jax.main --config=configs/small.py --workdir=DIR \
      --config.data.prepared_dir=PREPARED [--config.key=value ...]

With --config.data.corpus=SPEC instead of a prepared directory, the corpus is
prepared into DIR/data first (see electra_jax/prepare_data.py).
"""

import os
import sys

from absl import app, flags, logging
import jax
from ml_collections import config_flags

from electra_jax import checkpointing, config_lib, train
from electra_jax.data import prepare

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Path to a config file in configs/.',
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string('workdir', None, 'Directory for checkpoints, TensorBoard '
                               'event files and the tokenizer.')
flags.mark_flags_as_required(['config', 'workdir'])


def _maybe_initialize_distributed() -> None:
  """Joins a multi-process run before anything touches a device.

  SLURM jobs of several tasks, and TPU slices whose workers are listed in
  TPU_WORKER_HOSTNAMES, are detected here; ELECTRA_JAX_DISTRIBUTED=1 (which
  launch/tpu_vm.sh sets) lets jax find the peers itself, e.g. from a Cloud
  TPU VM's metadata. Elsewhere (several GPU hosts, or CPU processes), the
  launcher sets JAX_COORDINATOR_ADDRESS (host:port of process 0),
  JAX_NUM_PROCESSES and JAX_PROCESS_ID for every process. A single process
  initialises nothing.
  """
  multi_host_tpu = ',' in os.environ.get('TPU_WORKER_HOSTNAMES', '')
  slurm = int(os.environ.get('SLURM_NTASKS', '1')) > 1
  if multi_host_tpu or slurm or os.environ.get('ELECTRA_JAX_DISTRIBUTED') == '1':
    jax.distributed.initialize()
  elif 'JAX_COORDINATOR_ADDRESS' in os.environ:
    try:
      count, index = (int(os.environ[name]) for name in ('JAX_NUM_PROCESSES', 'JAX_PROCESS_ID'))
    except (KeyError, ValueError):
      sys.exit('error: JAX_COORDINATOR_ADDRESS is set, so JAX_NUM_PROCESSES and JAX_PROCESS_ID '
               'must be set to integers too (the process count, and this process\'s index)')
    # CPU processes exchange collectives through gloo; other backends ignore it.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(os.environ['JAX_COORDINATOR_ADDRESS'], count, index)


def _parse_flags(argv: list[str]) -> list[str]:
  """absl flag parsing, with a one-line error for an unknown --config.* key."""
  try:
    return flags.FLAGS(argv)
  except (AttributeError, KeyError) as e:
    key = str(e).strip('"\'')
    bad = [a.split('=')[0] for a in argv if a.startswith('--config.') and key in a.split('=')[0]]
    sys.exit(f'error: {bad[0] if bad else key}: no such config key ({key!r}); '
             'see the config file for the available keys')


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  checkpointing.hide_orbax_info_logs()
  _maybe_initialize_distributed()
  try:
    train.train_and_evaluate(_CONFIG.value, _WORKDIR.value)
  except (config_lib.ConfigError, FileNotFoundError, checkpointing.CheckpointError,
          train.TrainingStopped, *prepare.INPUT_ERRORS) as e:
    logging.error('%s', e)
    sys.exit(f'error: {e}')


if __name__ == '__main__':
  app.run(main, flags_parser=_parse_flags)
