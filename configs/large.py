"""ELECTRA-Large (paper, Table 6): 335M-parameter discriminator."""

import ml_collections

from configs import common


def get_config() -> ml_collections.ConfigDict:
  config = common.get_config()
  config.model.num_layers = 24
  config.model.hidden_size = 1024
  config.model.embedding_size = 1024
  config.model.generator_hidden_fraction = 0.25  # Paper, Table 6.
  config.max_seq_length = 512
  config.batch_size = 2048
  config.learning_rate = 2e-4
  config.num_train_steps = 400_000  # The 400k-step ELECTRA-Large.
  config.objective.mask_prob = 0.25  # Paper: Large masks 25%.
  # Parameters and Adam state sharded over every device (fsdp) rather than
  # replicated: about 4.3 GB of float32 state per chip replicated, a 1/N share
  # sharded. With several slices, data parallelism spans them
  # (--config.mesh.dcn_data=SLICES); --config.mesh.tensor=K also splits
  # attention heads, FFN and vocabulary over K devices (fsdp takes the rest).
  config.mesh.data = 1
  config.mesh.fsdp = -1
  return config
