"""ELECTRA-Small (paper, Table 6): 14M-parameter discriminator.

  python -m electra_jax.main --config=configs/small.py --workdir=DIR \
      --config.data.corpus='path/to/text/*'
"""

import ml_collections

from configs import common


def get_config() -> ml_collections.ConfigDict:
  config = common.get_config()
  config.model.num_layers = 12
  config.model.hidden_size = 256
  config.model.embedding_size = 128
  config.model.generator_hidden_fraction = 0.25  # Paper; released Small: 1.0.
  config.max_seq_length = 128
  config.batch_size = 128
  config.learning_rate = 5e-4
  config.num_train_steps = 1_000_000
  return config
