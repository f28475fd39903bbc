"""launch/ scripts: the recommended flags are ones the installed XLA knows."""

import os
import subprocess

import pytest

from tests.conftest import REPO


def _sourced(platform: str) -> dict[str, str]:
  """The environment after `source launch/xla_flags.sh PLATFORM`."""
  result = subprocess.run(
      ['bash', '-c', f'source launch/xla_flags.sh {platform} && env -0'], cwd=REPO,
      capture_output=True, text=True, check=True,
      env={k: v for k, v in os.environ.items() if k not in ('XLA_FLAGS', 'LIBTPU_INIT_ARGS')})
  return dict(item.split('=', 1) for item in result.stdout.split('\0') if '=' in item)


def test_gpu_flags_parse_in_the_installed_jaxlib():
  env = _sourced('gpu')
  assert '--xla_gpu_enable_latency_hiding_scheduler=true' in env['XLA_FLAGS']
  # XLA parses XLA_FLAGS for every backend and aborts on a name it does not know.
  result = subprocess.run(['python', '-c', 'import jax; jax.numpy.ones(2).block_until_ready()'],
                          env={**env, 'JAX_PLATFORMS': 'cpu'}, capture_output=True, text=True,
                          timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]


@pytest.mark.parametrize('platform, expected', [
    ('v5p', '--xla_tpu_enable_async_collective_fusion=true'),
    ('v6e', '--xla_tpu_scoped_vmem_limit_kib=98304'),
])
def test_tpu_flags_are_set(platform, expected):
  env = _sourced(platform)
  assert expected in env['LIBTPU_INIT_ARGS'] and 'XLA_FLAGS' not in env
  assert env['JAX_COMPILATION_CACHE_DIR']


def test_unknown_platform_is_refused():
  result = subprocess.run(['bash', '-c', 'source launch/xla_flags.sh v9x'], cwd=REPO,
                          capture_output=True, text=True)
  assert result.returncode == 2 and 'usage: source launch/xla_flags.sh' in result.stderr
