"""A tiny ELECTRA for tests and smoke runs: trains in seconds on one CPU.

Not a paper size. The vocabulary is small so that the sentencepiece model
trains quickly on a slice of text.
"""

import ml_collections

from configs import common


def get_config() -> ml_collections.ConfigDict:
  config = common.get_config()
  config.model.vocab_size = 2000
  config.model.num_layers = 2
  config.model.hidden_size = 128
  config.model.embedding_size = 64
  config.model.max_position_embeddings = 128
  config.model.generator_hidden_fraction = 0.5
  config.max_seq_length = 64
  # 16 rows keep every CLI test's steps cheap; the real-text test still learns
  # (tests/test_train.py).
  config.batch_size = 16
  config.learning_rate = 2e-3
  config.warmup_steps = 20
  config.num_train_steps = 300
  config.data.spm_sample_sentences = 50_000
  config.log_every_steps = 20
  config.checkpoint.every_steps = 100
  return config
