"""A step sharded over 8 simulated CPU devices equals the same step on one device."""

import subprocess
import sys

import numpy as np

from tests.conftest import REPO, cpu_env


def _start(rows_path, out_path, data, fsdp, tensor) -> subprocess.Popen:
  return subprocess.Popen(
    [
      sys.executable,
      str(REPO / 'tests' / 'sharded_step.py'),
      str(rows_path),
      str(out_path),
      str(data),
      str(fsdp),
      str(tensor),
    ],
    # Two steps: compiling is most of the time, and LLVM's optimisations near half of it.
    env=cpu_env(8, optimize=False, PYTHONPATH=str(REPO)),
    cwd=REPO,
  )


def test_data_fsdp_tensor_mesh_matches_single_device(tmp_path, real_token_rows):
  rows_path = tmp_path / 'rows.npy'
  np.save(rows_path, real_token_rows)
  runs = {
    name: _start(rows_path, tmp_path / f'{name}.npz', *axes)
    for name, axes in (('single', (1, 1, 1)), ('sharded', (2, 2, 2)))
  }
  for process in runs.values():
    assert process.wait(timeout=600) == 0
  single, sharded = (dict(np.load(tmp_path / f'{name}.npz')) for name in runs)
  # The fused QKV kernel (hidden, 3, heads, head_dim) is split over fsdp on
  # its rows and over tensor on its heads.
  assert 'fsdp' in str(sharded['qkv_spec']) and 'tensor' in str(sharded['qkv_spec']), sharded[
    'qkv_spec'
  ]
  # Columns: total loss, MLM loss, discriminator loss. The total (about 40) is
  # 50 x the discriminator loss, so it is compared relatively: 1e-5 absolute is
  # a few float32 ulps there, and reduction order differs between meshes.
  np.testing.assert_allclose(sharded['losses'][:, 1:], single['losses'][:, 1:], atol=1e-5, rtol=0)
  np.testing.assert_allclose(sharded['losses'][:, 0], single['losses'][:, 0], rtol=1e-5)
  names = [k for k in single if k not in ('losses', 'qkv_spec')]
  assert len(names) > 20
  worst = max(np.abs(sharded[k] - single[k]).max() for k in names)
  print(f'max |param difference| after 2 steps: {worst:.2e}; losses {single["losses"]}')
  assert worst < 1e-5
