"""ELECTRA-Base (paper, Table 6): 110M-parameter discriminator."""

import ml_collections

from configs import common


def get_config() -> ml_collections.ConfigDict:
  config = common.get_config()
  config.model.num_layers = 12
  config.model.hidden_size = 768
  config.model.embedding_size = 768
  config.model.generator_hidden_fraction = 1 / 3  # Paper, Table 6.
  config.max_seq_length = 512
  config.batch_size = 256
  config.learning_rate = 2e-4
  config.num_train_steps = 766_000
  return config
