"""Runs two train steps of the tiny model on a given mesh; prints loss and parameters.

Used by test_sharding.py in a subprocess with 8 simulated CPU devices:
  python tests/sharded_step.py ROWS.npy OUT.npz DATA FSDP TENSOR
"""

import sys

import jax
import numpy as np

from configs import tiny
from electra_jax import sharding, train
from electra_jax.data import tokenizers


def main(rows_path: str, out_path: str, data: int, fsdp: int, tensor: int) -> None:
  config = tiny.get_config()
  config.batch_size = 16
  config.warmup_steps = 0  # A non-zero learning rate from the first step.
  config.mesh.data, config.mesh.fsdp, config.mesh.tensor = data, fsdp, tensor
  devices = jax.devices()[: data * fsdp * tensor]
  mesh = sharding.make_mesh(config.mesh, devices)
  rows = np.load(rows_path)[: config.batch_size]
  with jax.set_mesh(mesh):
    state, step, batch_sharding, _ = train.setup_train_step(
      config, mesh, tokenizers.TRAINED_SPECIAL_IDS
    )
    batch = sharding.make_global_batch(
      {
        'input_ids': rows,
        'attention_mask': (rows != 0).astype(np.int32),
        'token_type_ids': np.zeros_like(rows),
      },
      batch_sharding,
    )
    losses = []
    for _ in range(2):
      state, metrics = step(state, batch)
      losses.append([float(metrics[k]) for k in ('loss', 'mlm_loss', 'disc_loss')])
    qkv = state.params['discriminator']['layers']['attention']['qkv']['kernel']
    print('qkv kernel sharding:', qkv.sharding.spec, 'devices:', len(qkv.sharding.device_set))
    flat = {
      '/'.join(str(k.key) for k in path): np.asarray(v)
      for path, v in jax.tree_util.tree_flatten_with_path(jax.device_get(state.params))[0]
    }
  np.savez(out_path, losses=np.array(losses), qkv_spec=str(qkv.sharding.spec), **flat)


if __name__ == '__main__':
  main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]))
