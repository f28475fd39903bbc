"""The main job on the tiny config in subprocesses: running and starting it, waiting
for its steps, and reading the metrics and parameters it wrote."""

import os
import re
import subprocess
import sys
import time

import jax
import numpy as np
import orbax.checkpoint as ocp

from electra_jax import checkpointing
from electra_jax.metric_writer import read_scalars
from tests.conftest import REPO, cpu_env, start_module, wait_for

# Throughput depends on the machine, not on the computation.
_TIMING_TAGS = (
  'train/step_time_s',
  'train/tokens_per_s',
  'train/examples_per_s',
  'train/model_tflops_per_s',
  'train/mfu',
)


def every_step_args(prepared: str, *extra: str) -> list[str]:
  """Flags for a run on `prepared` data that logs every step and saves by steps only."""
  return [
    f'--config.data.prepared_dir={prepared}',
    '--config.log_every_steps=1',
    '--config.checkpoint.every_minutes=0',
    *extra,
  ]


def run_main(workdir, *overrides, timeout=900, shell_setup='', optimize=True):
  """The main job on the tiny config; `shell_setup` runs first in a bash wrapper
  (e.g. `ulimit -f 1024`), so the child's limits need no fork in this process.
  `optimize=False` drops LLVM's optimisations (conftest.cpu_env), for a run of a
  few steps that compiles more than it runs."""
  command = [
    sys.executable,
    '-m',
    'electra_jax.main',
    '--config=configs/tiny.py',
    f'--workdir={workdir}',
    *overrides,
  ]
  if shell_setup:
    command = ['bash', '-c', f'{shell_setup} && exec "$0" "$@"', *command]
  return subprocess.run(
    command,
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
    env=cpu_env(optimize=optimize),
  )


def start_main(workdir, *args: str) -> tuple[subprocess.Popen, str]:
  """The main job on the tiny config, started; its output goes to a new log in `workdir`."""
  os.makedirs(workdir, exist_ok=True)
  log = os.path.join(workdir, f'output-{time.time_ns()}.txt')
  process = start_module(
    'electra_jax.main', log, '--config=configs/tiny.py', f'--workdir={workdir}', *args
  )
  return process, log


def _metric_steps(text: str) -> list[int]:
  return [int(m) for m in re.findall(r'metric_writer.py:\d+\] \[(\d+)\]', text)]


def logged_steps(log: str) -> list[int]:
  """The steps whose metrics the run's log holds."""
  with open(log) as f:
    return _metric_steps(f.read())


def wait_for_step(process: subprocess.Popen, log: str, step: int) -> None:
  """Waits until the run has logged the metrics of `step` or a later one."""
  wait_for(process, log, lambda text: any(s >= step for s in _metric_steps(text)))


def last_per_step(workdir) -> dict[str, dict[int, float]]:
  """{tag: {step: value}}; a step written again after a restart keeps its last value."""
  return {
    tag: dict(values) for tag, values in read_scalars(workdir).items() if tag not in _TIMING_TAGS
  }


def checkpoint_params(workdir, step: int) -> list[np.ndarray]:
  """The parameters of a checkpoint, whatever mesh wrote it (and wherever, gs://
  too), on this process's device."""
  path = str(checkpointing.checkpoint_dir(str(workdir)) / str(step) / 'state')
  checkpointer = ocp.StandardCheckpointer()
  local = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(
    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=local),
    checkpointer.metadata(path).item_metadata.tree,
  )
  state = checkpointer.restore(path, target)
  return [np.asarray(x) for x in jax.tree.leaves(state['params'])]
