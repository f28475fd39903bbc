"""Two processes of 4 simulated CPU devices each, joined by jax.distributed with gloo
collectives on loopback and meshed as two DCN granules, train like one process of 8
devices, and a checkpoint written by the two resumes in one; a damaged one is moved
aside once, by process 0, and both resume from the one before. SIGTERM to one of them,
or to both, stops both at the same step with the same checkpoint, and time-based
saves happen on the same steps in both."""

import os
import re
import shutil
import signal
import socket
import subprocess
import time

import numpy as np
import pytest

from tests.conftest import cpu_env, run_module, start_module, wait_for
from tests.main_runs import checkpoint_params, last_per_step

_ARGS = (
  '--config=configs/tiny.py',
  '--config.num_train_steps=10',
  '--config.log_every_steps=1',
  '--config.checkpoint.every_steps=6',
  '--config.checkpoint.every_minutes=0',
)


def _main(workdir, prepared: str) -> list[str]:
  """The main job's flags: the tiny config's 10 steps in `workdir`."""
  return [f'--workdir={workdir}', *_ARGS, f'--config.data.prepared_dir={prepared}']


def _one_process(workdir, prepared: str, *extra: str) -> subprocess.CompletedProcess:
  """The main job in one process of 8 devices, run to its end."""
  return run_module('electra_jax.main', *_main(workdir, prepared), *extra, env=cpu_env(8))


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('localhost', 0))
    return s.getsockname()[1]


@pytest.mark.heavy  # Two minutes of two processes training, then one resuming.
def test_two_processes_train_like_one_and_resume_in_one(tmp_path, prepared_tiny):
  two, one = tmp_path / 'two_processes', tmp_path / 'one_process'
  # The reference runs alongside: the two processes spend part of their time
  # waiting for each other's collectives.
  # The two processes stand for two slices (or GPU nodes): data = 2 over DCN x 4 within.
  one_log = tmp_path / 'one_process.txt'
  started = [
    *_two_processes(two, prepared_tiny),
    (
      start_module('electra_jax.main', one_log, *_main(one, prepared_tiny), env=cpu_env(8)),
      one_log,
    ),
  ]
  logs = _finish(started)
  assert "Mesh {'data': 8, 'fsdp': 1, 'tensor': 1} over 8 devices (cpu), 2 processes" in logs[0]
  assert "Mesh {'data': 8, 'fsdp': 1, 'tensor': 1} over 8 devices (cpu), 1 processes" in logs[2]

  a, b = last_per_step(two), last_per_step(one)
  assert set(a) == set(b) and sorted(a['train/loss']) == list(range(1, 11))
  for tag in a:
    for step in range(1, 11):
      assert a[tag][step] == pytest.approx(b[tag][step], rel=1e-6, abs=1e-7), (tag, step)

  # The two processes' checkpoint of step 6 resumes in one process of 8 devices.
  resumed = tmp_path / 'resumed'
  shutil.copytree(two, resumed)
  shutil.rmtree(resumed / 'checkpoints' / '10')
  result = _one_process(resumed, prepared_tiny)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resumed at step 6 ' in result.stderr
  c = last_per_step(resumed)
  for tag in a:
    for step in range(7, 11):
      assert c[tag][step] == pytest.approx(a[tag][step], rel=1e-6, abs=1e-7), (tag, step)

  # A damaged checkpoint: both processes find it damaged, process 0 alone moves
  # it aside, and both resume from the one before.
  state = [p for p in (two / 'checkpoints' / '10' / 'state').rglob('*') if p.is_file()]
  biggest = max(state, key=lambda p: p.stat().st_size)
  biggest.write_bytes(biggest.read_bytes()[: biggest.stat().st_size // 2])
  logs = _finish(_two_processes(two, prepared_tiny))
  for log in logs:
    assert 'Resumed at step 6 ' in log, log[-3000:]
  assert '; moved it to' in logs[0] and '; process 0 moved it aside' in logs[1]
  assert len([p for p in (two / 'checkpoints').iterdir() if '.unreadable-' in p.name]) == 1


def _two_processes(workdir, prepared: str, *extra: str) -> list[tuple[subprocess.Popen, str]]:
  """Starts the two processes; their stderr goes to files, read while they run."""
  address = f'localhost:{_free_port()}'
  os.makedirs(workdir, exist_ok=True)
  started = []
  for index in range(2):
    log = os.path.join(workdir, f'output-{index}-{time.time_ns()}.txt')
    process = start_module(
      'electra_jax.main',
      log,
      *_main(workdir, prepared),
      '--config.mesh.dcn_data=2',
      *extra,
      env=cpu_env(
        4, JAX_COORDINATOR_ADDRESS=address, JAX_NUM_PROCESSES='2', JAX_PROCESS_ID=str(index)
      ),
    )
    started.append((process, log))
  return started


def _finish(started, status: int = 0) -> list[str]:
  logs = []
  for process, log in started:
    process.wait(timeout=600)
    logs.append(open(log).read())
    assert process.returncode == status, logs[-1][-3000:]
  return logs


def _sigterm_after(started, pattern: str, to: list[int]) -> None:
  """SIGTERM to the processes `to` once process 0's log matches `pattern`."""
  wait_for(*started[0], pattern, timeout=600)
  for index in to:
    started[index][0].send_signal(signal.SIGTERM)


def _saved_steps(log: str) -> list[int]:
  return [int(s) for s in re.findall(r'Saving the checkpoint of step (\d+)', log)]


@pytest.mark.heavy  # Four runs of two processes, whose saves take seconds each: minutes.
def test_sigterm_to_one_or_both_processes_stops_both_at_one_step(tmp_path, prepared_tiny):
  steps = 24
  args = (f'--config.num_train_steps={steps}', '--config.log_every_steps=2')
  reference = tmp_path / 'uninterrupted'
  one = _one_process(reference, prepared_tiny, *args)
  assert one.returncode == 0, one.stderr[-3000:]

  workdir = tmp_path / 'preempted'
  # Saves every 0.3 s by the clock, with no step-based saves before the end.
  timed = ('--config.checkpoint.every_minutes=0.005', '--config.checkpoint.every_steps=1000')
  stops = []
  for to in ([1], [0, 1]):  # SIGTERM to the second process alone, then to both.
    started = _two_processes(workdir, prepared_tiny, *args, *timed)
    _sigterm_after(started, r'Saving the checkpoint of step', to)
    logs = _finish(started, status=143)  # Every process stops as a preempted one does.
    stopped = [re.search(r'SIGTERM: saved the checkpoint of step (\d+)', log) for log in logs]
    assert all(stopped), logs[0][-3000:]
    assert stopped[0].group(1) == stopped[1].group(1)
    stops.append(int(stopped[0].group(1)))
    # Both processes saved the same steps: timed ones, decided at log steps, then
    # the notice's.
    saved = [_saved_steps(log) for log in logs]
    assert saved[0] == saved[1] and len(saved[0]) >= 2, saved
    assert all(step % 2 == 0 for step in saved[0][:-1]) and saved[0][-1] == stops[-1], saved
  assert stops[0] < stops[1] < steps, stops
  logs = _finish(_two_processes(workdir, prepared_tiny, *args))
  assert f'Resumed at step {stops[1]} ' in logs[0]

  # The same training as without interruptions. A window cut by a stop at an odd
  # step is logged with the steps after the resume only, so it is left out.
  a, b = last_per_step(workdir), last_per_step(reference)
  assert sorted(a['train/loss']) == list(range(2, steps + 1, 2))
  for tag in a:
    for step in range(2, steps + 1, 2):
      if step - 1 not in stops:
        assert a[tag][step] == pytest.approx(b[tag][step], rel=1e-6, abs=1e-7), (tag, step)
  for x, y in zip(checkpoint_params(workdir, steps), checkpoint_params(reference, steps)):
    np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
