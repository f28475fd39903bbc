"""Ahead-of-time compilation for Cloud TPU slices with libtpu, on a CPU-only machine, and
for this machine's own devices (--topology=local)."""

import os
import re
import subprocess
import sys
import types

import jax
import pytest

from electra_jax import aot
from tests.conftest import REPO, cpu_env, require


@pytest.mark.parametrize(
  'name, chips, topology',
  [
    ('v4-8', 4, 'v4:2x2x1'),
    ('v4-32', 16, 'v4:2x2x4'),
    ('v5p-64', 32, 'v5p:2x4x4'),
    ('v5p-1024', 512, 'v5p:8x8x8'),
    ('v5e-1', 1, 'v5e:1x1'),
    ('v5e-8', 8, 'v5e:2x4'),
    ('v5e-32', 32, 'v5e:4x8'),
    ('v6e-256', 256, 'v6e:16x16'),
  ],
)
def test_cloud_slice_names(name, chips, topology):
  tpu = aot.parse_slice(name)
  assert (tpu.chips, tpu.topology) == (chips, topology)


@pytest.mark.parametrize('name', ['v3-8', 'v4-6', 'v4-4', 'v5e', 'tpu-8'])
def test_bad_slice_names_are_refused(name):
  with pytest.raises(aot.TopologyError, match=f'--topology={name}'):
    aot.parse_slice(name)


def _memory_model(fixed: int, per_unit: float, power: float = 1.0, refuse_above: int = 0):
  """Memory of a compile at n units, like XLA's plan: fixed + per_unit * n**power. With
  refuse_above, a compile over that many bytes fails without a figure (None)."""
  probes = []

  def measure(n: int) -> int | None:
    probes.append(n)
    memory = fixed + per_unit * n**power
    return None if refuse_above and memory > refuse_above else memory

  return measure, probes


@pytest.mark.parametrize(
  'fixed, per_unit, power, refuse_above',
  [
    (100, 3.0, 1.0, 0),
    (100, 0.5, 1.0, 0),
    (600, 60.0, 1.0, 0),
    (999, 1.0, 1.0, 0),
    (10, 1.0, 1.3, 0),
    (10, 200.0, 0.7, 0),
    (100, 3.0, 1.0, 1000),
    (10, 1.0, 1.3, 1000),
  ],
)
def test_largest_fitting_batch_matches_exhaustive_search(fixed, per_unit, power, refuse_above):
  limit = 1000
  measure, probes = _memory_model(fixed, per_unit, power, refuse_above)
  found = aot.largest_fitting(measure, limit)
  memory = _memory_model(fixed, per_unit, power)[0]
  exhaustive = max((n for n in range(1, 5000) if memory(n) <= limit), default=0)
  assert found == exhaustive
  # Linear memory costs four compiles (1, 8, the prediction, one more), curved memory or
  # failures without a figure a few more; doubling then bisecting costs about 2 log2(n)
  # (18 at n = 300).
  assert len(probes) <= (4 if power == 1.0 and not refuse_above else 12), probes


def test_largest_fitting_batch_when_one_unit_does_not_fit():
  measure, probes = _memory_model(1001, 1.0, refuse_above=1000)
  assert aot.largest_fitting(measure, 1000) == 0 and probes == [1]


def test_find_max_batch_counts_a_refused_compile_as_over(monkeypatch):
  # XLA:TPU may refuse a step quoting its temporaries alone, a figure under the
  # chip's HBM; the search must still take that batch as over. Here the compiler is
  # stood in for by its memory plan: 1 GiB per example after 4 GiB of state on a 32
  # GiB chip, refused over 32 GiB quoting 90% of the need as temporaries.
  from configs import tiny

  gib = 2**30

  batches = []

  def compile_step(config, devices):
    batches.append(config.batch_size)
    need = (4 + config.batch_size) * gib
    if need > 32 * gib:
      raise aot.DoesNotFit(
        'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory '
        f'required for HLO temporaries ({0.9 * need / gib:.2f}G) exceeds '
        'available HBM (31.25G)'
      )
    memory = types.SimpleNamespace(
      argument_size_in_bytes=0,
      output_size_in_bytes=0,
      alias_size_in_bytes=0,
      temp_size_in_bytes=need,
      generated_code_size_in_bytes=0,
    )
    return aot.Compiled(config.batch_size, 1.0, memory, 0.0, None)

  monkeypatch.setattr(aot, 'compile_step', compile_step)
  best = aot.find_max_batch(tiny.get_config(), jax.devices()[:1], 32 * gib)
  assert best.batch_size == 28 and best.bytes_per_device == 32 * gib
  assert batches == [1, 8, 28, 29]  # Taking 29 as fitting would have probed on upward.


def test_find_max_batch_does_not_creep_toward_the_limit(monkeypatch):
  # Small on v4-8 as XLA:TPU planned it (0.20 GiB at 4, 0.35 at 32, 31.98 at
  # 5012: slightly convex), refused with the temporaries alone quoted against the
  # HBM left after 1.25 GiB: just over the limit, that figure is under the 32 GiB
  # HBM. Taken as the step's memory, it made the search creep down one batch at a
  # time (30 refusals in the real run; 28 compiles here, 8 now).
  from configs import tiny

  gib = 2**30
  need = lambda b: (0.179 + 0.00536 * b + 1.97e-7 * b**2) * gib
  batches = []

  def compile_step(config, devices):
    batches.append(config.batch_size)
    if need(config.batch_size) > 32 * gib:
      raise aot.DoesNotFit(
        'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory '
        'required for HLO temporaries '
        f'({(need(config.batch_size) - 1.25 * gib) / gib:.2f}G) exceeds '
        'available HBM (30.75G)'
      )
    memory = types.SimpleNamespace(
      argument_size_in_bytes=0,
      output_size_in_bytes=0,
      alias_size_in_bytes=0,
      temp_size_in_bytes=need(config.batch_size),
      generated_code_size_in_bytes=0,
    )
    return aot.Compiled(config.batch_size, 1.0, memory, 0.0, None)

  monkeypatch.setattr(aot, 'compile_step', compile_step)
  best = aot.find_max_batch(tiny.get_config(), jax.devices()[:1], 32 * gib)
  assert best.batch_size == max(b for b in range(1, 10_000) if need(b) <= 32 * gib)
  assert len(batches) <= 10, batches


@pytest.mark.parametrize(
  'message, gib',
  [
    # XLA:TPU's two ways of refusing a step (the first is what small at batch 16,384 on
    # v5e-1 gets, below); the search interpolates with the figure.
    (
      'RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for HLO '
      'temporaries (365.80G) exceeds available HBM (15.75G)',
      365.80 - 15.75,
    ),
    (
      'RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm. Used 20.95G of 15.75G hbm. '
      'Exceeded hbm capacity by 5.20G',
      5.20,
    ),
    ('RESOURCE_EXHAUSTED: out of memory', None),
  ],
)
def test_how_far_over_a_refused_step_is(message, gib):
  excess = aot.DoesNotFit(message).excess_bytes
  assert excess == (None if gib is None else pytest.approx(gib * 2**30, rel=1e-6))


def _tpu_compile(*args: str) -> subprocess.Popen:
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  return subprocess.Popen(
    [sys.executable, '-m', 'electra_jax.aot', *args],
    cwd=REPO,
    env=env,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
  )


def _finish(process: subprocess.Popen) -> subprocess.CompletedProcess:
  stdout, stderr = process.communicate(timeout=900)
  return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


@pytest.fixture(scope='module')
def compiles() -> dict[str, subprocess.CompletedProcess]:
  """Two TPU compiles, started together: libtpu must allow several at once. They
  take two minutes on 2 cores, so the tests that read them are heavy."""
  require('libtpu')
  args = {
    'small_v5e_8': ['--config=configs/small.py', '--topology=v5e-8'],
    # 16,384 x 128 tokens need some 366 GiB of temporaries, against 16 GiB.
    'small_v5e_1_batch_16384': [
      '--config=configs/small.py',
      '--topology=v5e-1',
      '--config.batch_size=16384',
    ],
  }
  running = {name: _tpu_compile(*a) for name, a in args.items()}
  return {name: _finish(process) for name, process in running.items()}


def _check_fits(result: subprocess.CompletedProcess, header: str) -> None:
  assert result.returncode == 0, result.stderr[-3000:]
  print(result.stdout)
  lines = result.stdout.strip().splitlines()
  assert lines[0].startswith(header)
  used, hbm = re.match(r'memory per chip: ([0-9.]+) GiB of ([0-9]+) GiB', lines[1]).groups()
  assert float(used) <= float(hbm)
  assert 'FLOPs per step: XLA ' in lines[2]
  assert "['embeddings']['word_embeddings']['embedding']" in result.stdout
  assert lines[-1] == 'fits'


@pytest.mark.heavy
def test_small_compiles_and_fits_on_v5e_8(compiles):
  _check_fits(compiles['small_v5e_8'], 'v5e-8 (v5e:2x4, 8 chips, 16 GiB HBM each); batch 128 x 128')


@pytest.mark.heavy
def test_base_compiles_and_fits_on_v4_8():
  """Base at its paper batch (256 x 512) on a v4-8, with remat for a margin: without it
  the plan leaves 0.3 GiB of the 32 GiB (docs/experiments/2026-11-23_tpu_compile_and_memory.md).
  About 3 minutes on 2 cores."""
  require('libtpu')
  result = _finish(
    _tpu_compile(
      '--config=configs/base.py', '--topology=v4-8', '--config.model.remat_policy=dots_saveable'
    )
  )
  _check_fits(result, 'v4-8 (v4:2x2x1, 4 chips, 32 GiB HBM each); batch 256 x 512')


@pytest.mark.heavy
def test_a_step_that_cannot_fit_is_reported(compiles):
  result = compiles['small_v5e_1_batch_16384']
  assert result.returncode == 2
  assert (
    result.stderr.strip()
    .splitlines()[-1]
    .startswith('error: does not fit on v5e-1: RESOURCE_EXHAUSTED')
  ), result.stderr[-3000:]


def _local_aot(*args: str) -> subprocess.CompletedProcess:
  return subprocess.run(
    [
      sys.executable,
      '-m',
      'electra_jax.aot',
      '--config=configs/tiny.py',
      '--topology=local',
      *args,
    ],
    cwd=REPO,
    # It only compiles: without LLVM's optimisations, 25 s of CPU instead of 38, and the
    # same memory and FLOP figures.
    env=cpu_env(8, optimize=False),
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_local_devices_compile_against_the_memory_given():
  result = _local_aot('--device_memory_gib=1')
  assert result.returncode == 0, result.stderr[-3000:]
  lines = result.stdout.strip().splitlines()
  assert lines[0].startswith('local (8 x cpu, 1 GiB memory each); batch 16 x 64')
  used = float(re.match(r'memory per device: ([0-9.]+) GiB of 1 GiB', lines[1])[1])
  assert 0 < used <= 1
  assert lines[-1] == 'fits'


def test_local_devices_that_report_no_memory_need_a_figure():
  result = _local_aot()  # A CPU reports no memory limit; a GPU's is its allocator's.
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == (
    'error: --topology=local: the cpu devices report no memory limit; give one with '
    '--device_memory_gib=N'
  )


# Half a minute; test_local_devices_compile_against_the_memory_given compiles against
# a memory figure the same way.
@pytest.mark.heavy
def test_local_search_reports_when_no_batch_fits():
  # 5 MiB per device: less than tiny's replicated parameters and Adam state (0.01 GiB).
  result = _local_aot('--device_memory_gib=0.005', '--find_max_batch')
  assert result.returncode == 2
  assert (
    result.stderr.strip()
    .splitlines()[-1]
    .startswith('error: 64-token examples do not fit on local at any batch size')
  ), result.stderr[-3000:]
