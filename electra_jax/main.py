"""Pretrains ELECTRA.

  python -m electra_jax.main --config=configs/small.py --workdir=DIR \
      --config.data.prepared_dir=PREPARED [--config.key=value ...] [--stop_at_step=N]

With --config.data.corpus=SPEC instead of a prepared directory, the corpus is
prepared into DIR/data first (see electra_jax/prepare_data.py).
"""

import os

from absl import flags
import jax

from electra_jax import cli, errors, train

_CONFIG = cli.define_config(None, 'Path to a config file in configs/.')
_WORKDIR = flags.DEFINE_string(
  'workdir', None, 'Directory for checkpoints, TensorBoard event files and the tokenizer.'
)
_STOP_AT_STEP = flags.DEFINE_integer(
  'stop_at_step',
  None,
  'Save and stop once this step is done, on the schedule of config.num_train_steps; a '
  'rerun without it goes on, bit for bit as one run. For comparing settings on a '
  "prefix of their runs (benchmarks/objective_ablation.sh's learning rates).",
  lower_bound=1,
)
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
      raise errors.UserError(
        'JAX_COORDINATOR_ADDRESS is set, so JAX_NUM_PROCESSES and '
        'JAX_PROCESS_ID must be set to integers too (the process count, '
        "and this process's index)"
      )
    # CPU processes exchange collectives through gloo; other backends ignore it.
    jax.config.update('jax_cpu_collectives_implementation', 'gloo')
    jax.distributed.initialize(os.environ['JAX_COORDINATOR_ADDRESS'], count, index)


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  _maybe_initialize_distributed()
  train.train_and_evaluate(_CONFIG.value, _WORKDIR.value, _STOP_AT_STEP.value)


if __name__ == '__main__':
  cli.run(main)
