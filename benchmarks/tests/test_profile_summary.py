"""benchmarks/profile_summary.py on a CPU trace the benchmark takes here, and on a trace
in the format a GPU's profile has (device streams, XLA's kernel names), which CI's
machines cannot take."""

import gzip
import json
import os
import subprocess
import sys

from tests.conftest import REPO


def _summary(directory) -> str:
  done = subprocess.run(
    [sys.executable, 'benchmarks/profile_summary.py', str(directory)],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert done.returncode == 0, done.stderr[-2000:]
  return done.stdout


def test_a_cpu_trace_of_the_benchmark(tmp_path):
  done = subprocess.run(
    [
      sys.executable,
      '-m',
      'electra_jax.benchmark',
      '--config=configs/tiny.py',
      '--steps=2',
      '--warmup=1',
      f'--profile_dir={tmp_path}',
    ],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=600,
    env={**os.environ, 'JAX_PLATFORMS': 'cpu'},
  )
  assert done.returncode == 0, done.stderr[-3000:]
  summary = _summary(tmp_path)
  assert summary.startswith('3 steps traced; ')
  assert 'threads busy' in summary
  assert '%  matmuls' in summary
  assert 'generator sampling' in summary


# Two steps of a GPU trace: the kernels run on the device's stream; the host's events
# (one ExecuteThunks per step, and launch wrappers) are not kernels.
_HLO = """\
%fused_dropout (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %m = f32[8]{0} multiply(%p, %p), metadata={op_name="jit(train_step)/Dropout/mul"}
}

ENTRY %main (a: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  ROOT %loop_multiply_fusion.7 = f32[8]{0} fusion(%a), kind=kLoop, calls=%fused_dropout
}
"""


def _event(pid: int, ts: float, dur: float, name: str) -> dict:
  return {'ph': 'X', 'pid': pid, 'tid': 14 if pid == 1 else 1, 'ts': ts, 'dur': dur, 'name': name}


def _gpu_trace() -> dict:
  events = [
    {'ph': 'M', 'pid': 1, 'name': 'process_name', 'args': {'name': '/device:GPU:0'}},
    {'ph': 'M', 'pid': 7, 'name': 'process_name', 'args': {'name': '/host:CPU'}},
  ]
  for t in (0.0, 100.0):
    events += [
      _event(7, t, 90.0, '[0] GpuExecutable::ExecuteThunks'),
      _event(7, t, 50.0, 'cuGraphLaunch'),
      _event(1, t, 30.0, 'nvjet_sm90_tst_128x128_NNT'),
      _event(1, t + 30, 10.0, 'loop_multiply_fusion_7'),
      _event(1, t + 40, 20.0, 'cudnn_generated_fort_native_sdpa_sm90_flash_fprop'),
    ]
  return {'traceEvents': events}


def test_a_gpu_trace(tmp_path):
  (tmp_path / 'train_step.hlo.txt').write_text(_HLO)
  with gzip.open(tmp_path / 'host.trace.json.gz', 'wt') as f:
    json.dump(_gpu_trace(), f)
  lines = _summary(tmp_path).splitlines()
  # 60 us of kernels per step in a traced span of 160 us (two steps of 60, 40 apart).
  assert lines[0] == (
    '2 steps traced; 0.1 ms of kernels per step, 3 kernels per step (median 20.0 us), '
    'the GPU busy 75% of the traced span'
  )
  categories = {line.split('%  ')[1]: line.split()[0] for line in lines[1:4]}
  assert categories == {
    'matmuls': '0.03',
    'attention (cuDNN kernels)': '0.02',
    'dropout (random bits and masks)': '0.01',
  }
  # The fusion's kernel is named from its instruction, '_' for the last '.'.
  assert any('loop_multiply_fusion_7' in line and 'f32[8]{0}' in line for line in lines)
