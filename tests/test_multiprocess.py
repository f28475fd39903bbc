"""Two processes of 4 simulated CPU devices each, joined by jax.distributed with gloo
collectives on loopback and meshed as two DCN granules, train like one process of 8
devices, and a checkpoint written by the two resumes in one."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from electra_jax.data import shard_writer
from tests.conftest import REPO, data_dir
from tests.test_checkpointing import _last_per_step

_ARGS = (
  '--config=configs/tiny.py',
  '--config.num_train_steps=10',
  '--config.log_every_steps=1',
  '--config.checkpoint.every_steps=6',
  '--config.checkpoint.every_minutes=0',
)


@pytest.fixture(scope='module')
def prepared(tmp_path_factory) -> str:
  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_00',
    max_seq_length=64,
    spm_vocab_size=2000,
    spm_sample_sentences=20_000,
  )
  directory = str(tmp_path_factory.mktemp('prepared'))
  shard_writer.prepare(options, directory, num_workers=1, progress=False)
  return directory


def _env(devices: int, **extra: str) -> dict[str, str]:
  return dict(
    os.environ,
    JAX_PLATFORMS='cpu',
    XLA_FLAGS=f'--xla_force_host_platform_device_count={devices}',
    **extra,
  )


def _main(workdir, prepared: str) -> list[str]:
  return [
    sys.executable,
    '-m',
    'electra_jax.main',
    f'--workdir={workdir}',
    *_ARGS,
    f'--config.data.prepared_dir={prepared}',
  ]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


def test_two_processes_train_like_one_and_resume_in_one(tmp_path, prepared):
  two, one = tmp_path / 'two_processes', tmp_path / 'one_process'
  address = f'localhost:{_free_port()}'
  # The reference runs alongside: the two processes spend part of their time
  # waiting for each other's collectives.
  # The two processes stand for two slices (or GPU nodes): data = 2 over DCN x 4 within.
  processes = [
    subprocess.Popen(
      [*_main(two, prepared), '--config.mesh.dcn_data=2'],
      cwd=REPO,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      text=True,
      env=_env(
        4, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES='2', JAX_PROCESS_ID=str(index)
      ),
    )
    for index in range(2)
  ]
  processes.append(
    subprocess.Popen(
      _main(one, prepared),
      cwd=REPO,
      stdout=subprocess.DEVNULL,
      stderr=subprocess.PIPE,
      text=True,
      env=_env(8),
    )
  )
  logs = []
  for process in processes:
    logs.append(process.communicate(timeout=600)[1])
    assert process.returncode == 0, logs[-1][-3000:]
  assert "Mesh {'data': 8, 'fsdp': 1, 'tensor': 1} over 8 devices (cpu), 2 processes" in logs[0]
  assert "Mesh {'data': 8, 'fsdp': 1, 'tensor': 1} over 8 devices (cpu), 1 processes" in logs[2]

  a, b = _last_per_step(two), _last_per_step(one)
  assert set(a) == set(b) and sorted(a['train/loss']) == list(range(1, 11))
  for tag in a:
    for step in range(1, 11):
      assert a[tag][step] == pytest.approx(b[tag][step], rel=1e-6, abs=1e-7), (tag, step)

  # The two processes' checkpoint of step 6 resumes in one process of 8 devices.
  resumed = tmp_path / 'resumed'
  shutil.copytree(two, resumed)
  shutil.rmtree(resumed / 'checkpoints' / '10')
  result = subprocess.run(
    _main(resumed, prepared), cwd=REPO, capture_output=True, text=True, timeout=600, env=_env(8)
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resumed at step 6 ' in result.stderr
  c = _last_per_step(resumed)
  for tag in a:
    for step in range(7, 11):
      assert c[tag][step] == pytest.approx(a[tag][step], rel=1e-6, abs=1e-7), (tag, step)
