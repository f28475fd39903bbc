"""Saves a train state on one mesh, or restores it on another; run as a subprocess.

  python -m tests.mesh_restore save|restore WORKDIR DATA FSDP

The device count comes from XLA_FLAGS (--xla_force_host_platform_device_count).
`save` writes a real checkpoint through electra_jax.checkpointing and the
parameters as .npz; `restore` restores that checkpoint onto its own mesh and
checks every parameter against the .npz, bit for bit.
"""

import os
import sys

import jax
import numpy as np

from configs import tiny
from electra_jax import checkpointing, optim, sharding, train


def main(mode: str, workdir: str, data: int, fsdp: int) -> None:
  config = tiny.get_config()
  config.mesh.data, config.mesh.fsdp = data, fsdp
  config.seed = 1 if mode == 'save' else 2  # The restore must not re-create the same values.
  mesh = sharding.make_mesh(config.mesh)
  with jax.set_mesh(mesh):
    state, _ = train.create_train_state(
      config, train.build_model(config), optim.create_optimizer(config), mesh
    )
    manager = checkpointing.create_manager(workdir, config)
    reference = os.path.join(workdir, 'params.npz')
    leaves = lambda tree: {
      jax.tree_util.keystr(p): np.asarray(x) for p, x in jax.tree_util.tree_leaves_with_path(tree)
    }
    if mode == 'save':
      meta = checkpointing.checkpoint_meta(config, 7, {'file': 'spm.model'}, 'none')
      checkpointing.save(manager, 7, state, {'next_index': 7}, meta)
      manager.wait_until_finished()
      np.savez(reference, **leaves(state.params))
    else:
      abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), state
      )
      restored = checkpointing.restore_latest(manager, abstract, lambda step, meta: True)
      expected = np.load(reference)
      got = leaves(restored.state.params)
      assert sorted(got) == sorted(expected.files)
      for name, value in got.items():
        np.testing.assert_array_equal(value, expected[name], err_msg=name)
      shardings = {str(x.sharding.spec) for x in jax.tree.leaves(restored.state.params)}
      print(
        f'restored step {restored.step} onto {dict(mesh.shape)}: '
        f'{len(got)} parameters equal; specs {sorted(shardings)}; data {restored.data}'
      )
    manager.close()


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
