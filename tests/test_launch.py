"""launch/ scripts: the recommended flags are ones the installed XLA knows, and the CPU
allocator settings keep XLA's temporaries mapped."""

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO


def _sourced(platform: str) -> dict[str, str]:
  """The environment after `source launch/xla_flags.sh PLATFORM`."""
  result = subprocess.run(
    ['bash', '-c', f'source launch/xla_flags.sh {platform} && env -0'],
    cwd=REPO,
    capture_output=True,
    text=True,
    check=True,
    env={k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', 'LIBTPU_INIT_ARGS')},
  )
  return dict(item.split('=', 1) for item in result.stdout.split('\0') if '=' in item)


def test_gpu_flags_parse_in_the_installed_jaxlib():
  env = _sourced('gpu')
  assert '--xla_gpu_enable_latency_hiding_scheduler=true' in env['XLA_FLAGS']
  # XLA parses XLA_FLAGS for every backend and aborts on a name it does not know.
  result = subprocess.run(
    [sys.executable, '-c', 'import jax; jax.numpy.ones(2).block_until_ready()'],
    env={**env, 'JAX_PLATFORMS': 'cpu'},
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize(
  'platform, expected',
  [
    ('v5p', '--xla_tpu_enable_async_collective_fusion=true'),
    ('v6e', '--xla_tpu_scoped_vmem_limit_kib=98304'),
  ],
)
def test_tpu_flags_are_set(platform, expected):
  env = _sourced(platform)
  assert expected in env['LIBTPU_INIT_ARGS'] and 'XLA_FLAGS' not in env
  assert env['JAX_COMPILATION_CACHE_DIR']


_FAULT_PROBE = """
import resource, statistics, jax, jax.numpy as jnp
x = jnp.ones((64, 1024, 1024), jnp.float32)
f = jax.jit(lambda x: jnp.sum(jnp.flip(jnp.exp(x), axis=1) * x))  # A 256 MiB temporary.
for _ in range(3):  # Warm-up: the allocator's first blocks fault as they are handed out.
  f(x).block_until_ready()
faults = []
for _ in range(7):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(statistics.median(faults))
"""


def test_cpu_allocator_keeps_xla_temporaries_mapped():
  env = _sourced('cpu')
  assert 'tcmalloc' in env.get('LD_PRELOAD', '') or 'hugetlb=1' in env['GLIBC_TUNABLES']
  result = subprocess.run(
    [sys.executable, '-c', _FAULT_PROBE],
    env={**env, 'JAX_PLATFORMS': 'cpu'},
    capture_output=True,
    text=True,
    timeout=120,
    check=True,
  )
  # glibc alone maps each call's temporary afresh: 65,536 faults of 4 KiB pages.
  # (The median: on a loaded machine a call can start before the last one's
  # temporary is freed, and take a new block.)
  assert float(result.stdout) < 65_536 / 20, result.stdout


def test_cpu_flags_without_tcmalloc_under_strict_bash(tmp_path):
  # A launch script under 'set -euo pipefail' on a host without tcmalloc: the
  # library lookup finds nothing, and sourcing must fall back to glibc, not exit.
  (tmp_path / 'ldconfig').write_text('#!/bin/sh\nexit 0\n')
  (tmp_path / 'ldconfig').chmod(0o755)
  result = subprocess.run(
    ['bash', '-c', 'set -euo pipefail; source launch/xla_flags.sh cpu; echo "$GLIBC_TUNABLES"'],
    cwd=REPO,
    capture_output=True,
    text=True,
    env=dict(os.environ, PATH=f'{tmp_path}:{os.environ["PATH"]}'),
  )
  assert result.returncode == 0, result.stderr
  assert 'glibc.malloc.hugetlb=1' in result.stdout


def test_unknown_platform_is_refused():
  result = subprocess.run(
    ['bash', '-c', 'source launch/xla_flags.sh v9x'], cwd=REPO, capture_output=True, text=True
  )
  assert result.returncode == 2 and 'usage: source launch/xla_flags.sh' in result.stderr


def _tpu_vm(*args: str, **env: str) -> subprocess.CompletedProcess:
  """launch/tpu_vm.sh with DRY_RUN=1: the gcloud commands it would run."""
  return subprocess.run(
    ['bash', 'launch/tpu_vm.sh', *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    env=dict(
      os.environ,
      DRY_RUN='1',
      TPU_NAME='electra',
      ZONE='us-east5-a',
      WORKDIR='gs://bucket/run',
      **env,
    ),
  )


def test_tpu_vm_script_creates_sets_up_and_trains_on_every_worker():
  created = _tpu_vm('create', 'queued', TYPE='v5e-16').stdout
  assert (
    'gcloud compute tpus queued-resources create electra --node-id=electra '
    '--zone=us-east5-a --accelerator-type=v5litepod-16 '
    '--runtime-version=v2-alpha-tpuv5-lite --spot'
  ) in created
  setup = _tpu_vm('setup', TYPE='v5p-64').stdout
  assert 'tpu-vm scp' in setup and '--worker=all' in setup and 'pip\\ install' in setup
  trained = _tpu_vm('train', '--config=configs/base.py', TYPE='v5p-64').stdout
  assert trained.startswith(
    'gcloud compute tpus tpu-vm ssh electra --zone=us-east5-a --worker=all --command='
  )
  for part in (
    'source\\ launch/xla_flags.sh\\ v5p',
    'ELECTRA_JAX_DISTRIBUTED=1',
    '--workdir=gs://bucket/run\\ --config=configs/base.py',
    '\\>\\ ~/electra_worker.log',
  ):
    assert part in trained, (part, trained)


def test_tpu_vm_script_refuses_an_unknown_slice():
  result = _tpu_vm('create', TYPE='v3-8')
  assert result.returncode == 2 and 'TYPE=v3-8' in result.stderr


def test_slurm_script_is_valid_bash_with_sbatch_directives():
  subprocess.run(['bash', '-n', 'launch/slurm_gpu.sbatch'], cwd=REPO, check=True)
  text = (REPO / 'launch' / 'slurm_gpu.sbatch').read_text()
  assert '#SBATCH --gpus-per-task=1' in text and 'srun --kill-on-bad-exit=1' in text
