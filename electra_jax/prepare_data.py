"""Prepares pretraining data: corpus -> tokenizer -> examples -> ArrayRecord shards.

  python -m electra_jax.prepare_data --corpus='wiki:data/wikipedia/*/wiki_*' \
      --output_dir=DIR --vocab=vocab.txt --max_seq_length=128

Exactly one tokenizer: --vocab (WordPiece vocab.txt), --spm_model (an existing
sentencepiece model) or --spm_vocab_size (train one on the corpus). The other
options default to configs/common.py; pass --config=configs/small.py to use a
size's values, and --config.data.KEY=VALUE for any of them. Rerunning the same
command resumes an interrupted run; the output is complete when DIR holds
metadata.json.
"""

import dataclasses
import os

from absl import flags, logging

from configs import common
from electra_jax import cli
from electra_jax.data import shard_writer, sources

_CONFIG = cli.define_config(
  os.path.join(os.path.dirname(common.__file__), 'common.py'),
  'Config whose data options, seed and max_seq_length apply.',
)
_CORPUS = flags.DEFINE_string(
  'corpus',
  None,
  'Corpus spec: comma-separated sources, each '
  'text:GLOB, lines:GLOB, wiki:GLOB, jsonl:GLOB or '
  'tfds:NAME[@SPLIT] (see electra_jax/data/sources.py).',
)
_OUTPUT_DIR = flags.DEFINE_string('output_dir', None, 'Where the shards and metadata go.')
_VOCAB = flags.DEFINE_string('vocab', None, 'A BERT WordPiece vocab.txt.')
_SPM_MODEL = flags.DEFINE_string('spm_model', None, 'An existing sentencepiece model.')
_SPM_VOCAB_SIZE = flags.DEFINE_integer(
  'spm_vocab_size', None, 'Train a sentencepiece model of this size.'
)
_MAX_SEQ_LENGTH = flags.DEFINE_integer('max_seq_length', None, 'Tokens per example.')
_ON_INVALID_UTF8 = flags.DEFINE_enum(
  'on_invalid_utf8',
  None,
  list(sources.ON_INVALID_UTF8),
  'Lines that are not UTF-8: skip and count them, but stop at a file that looks binary '
  '(skip, the default); skip them all (skip_all); or stop at the first (error).',
)
_NUM_WORKERS = flags.DEFINE_integer('num_workers', 0, 'Worker processes (0: one per core).')
flags.mark_flags_as_required(['corpus', 'output_dir'])


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  config = _CONFIG.value
  with config.unlocked():
    config.data.corpus = _CORPUS.value
    for key, flag in (
      ('vocab', _VOCAB),
      ('spm_model', _SPM_MODEL),
      ('on_invalid_utf8', _ON_INVALID_UTF8),
    ):
      if flag.value is not None:
        config.data[key] = flag.value
    if _MAX_SEQ_LENGTH.value is not None:
      config.max_seq_length = _MAX_SEQ_LENGTH.value
  options = shard_writer.PrepareOptions.from_config(config)
  # The command line names its tokenizer explicitly; no size is implied.
  options = dataclasses.replace(options, spm_vocab_size=_SPM_VOCAB_SIZE.value or 0)
  data = shard_writer.prepare(
    options,
    _OUTPUT_DIR.value,
    num_workers=_NUM_WORKERS.value,
    max_position_embeddings=config.model.max_position_embeddings,
  )
  print(shard_writer.summary(data))
  warning = shard_writer.unknown_rate_warning(data)
  if warning:
    logging.warning(warning)


if __name__ == '__main__':
  cli.run(main)
