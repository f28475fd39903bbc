"""Ahead-of-time compilation for Cloud TPU slices with libtpu, on a CPU-only machine."""

import os
import subprocess
import sys

import pytest

from electra_jax import aot
from tests.conftest import REPO, require

require('libtpu')


@pytest.mark.parametrize('name, chips, topology', [
    ('v4-8', 4, 'v4:2x2x1'), ('v4-32', 16, 'v4:2x2x4'), ('v5p-64', 32, 'v5p:2x4x4'),
    ('v5p-1024', 512, 'v5p:8x8x8'), ('v5e-1', 1, 'v5e:1x1'), ('v5e-8', 8, 'v5e:2x4'),
    ('v5e-32', 32, 'v5e:4x8'), ('v6e-256', 256, 'v6e:16x16'),
])
def test_cloud_slice_names(name, chips, topology):
  tpu = aot.parse_slice(name)
  assert (tpu.chips, tpu.topology) == (chips, topology)


@pytest.mark.parametrize('name', ['v3-8', 'v4-6', 'v4-4', 'v5e', 'tpu-8'])
def test_bad_slice_names_are_refused(name):
  with pytest.raises(aot.TopologyError, match=f'--topology={name}'):
    aot.parse_slice(name)


@pytest.fixture(scope='module')
def compiles() -> dict[str, subprocess.CompletedProcess]:
  """Both compiles of this module, started together: libtpu must allow two at once."""
  args = {'small_v5e_8': ['--config=configs/small.py', '--topology=v5e-8'],
          'base_v5e_1_batch_512': ['--config=configs/base.py', '--topology=v5e-1',
                                   '--config.batch_size=512']}
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  running = {name: subprocess.Popen([sys.executable, '-m', 'electra_jax.aot', *a], cwd=REPO,
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True) for name, a in args.items()}
  done = {}
  for name, process in running.items():
    stdout, stderr = process.communicate(timeout=600)
    done[name] = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
  return done


def test_small_compiles_and_fits_on_v5e_8(compiles):
  result = compiles['small_v5e_8']
  assert result.returncode == 0, result.stderr[-3000:]
  print(result.stdout)
  lines = result.stdout.strip().splitlines()
  assert lines[0].startswith('v5e-8 (v5e:2x4, 8 chips, 16 GiB HBM each); batch 128 x 128')
  assert lines[1].startswith('memory per chip: ')
  assert 'FLOPs per step: XLA ' in lines[2]
  assert "['embeddings']['word_embeddings']['embedding']" in result.stdout
  assert lines[-1] == 'fits'


def test_a_step_that_cannot_fit_is_reported(compiles):
  result = compiles['base_v5e_1_batch_512']
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith(
      'error: does not fit on v5e-1: RESOURCE_EXHAUSTED'), result.stderr[-3000:]
