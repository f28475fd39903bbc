"""Exports a pretrained ELECTRA to HF `transformers` format.

  python -m electra_jax.export --workdir=DIR --output=OUT [--generator]

OUT receives the full-size network that pretraining kept: the discriminator
as `ElectraForPreTraining` (objectives electra and electra_15), or the masked
LM as `ElectraForMaskedLM` (mlm, replace_mlm, all_tokens_mlm; All-Tokens
MLM's copy head has no HF counterpart and is left out). Beside config.json and
model.safetensors it writes, with a WordPiece vocabulary, the tokenizer files
(vocab.txt, tokenizer_config.json, special_tokens_map.json), so that
`transformers.AutoModelForPreTraining.from_pretrained(OUT)` (or
`ElectraForMaskedLM`) and `ElectraTokenizer.from_pretrained(OUT)` load it.
--generator also writes the generator as `ElectraForMaskedLM` to
OUT/generator. --workdir may also be an HF directory, which is then written
back out (a lossless round trip).
"""

import json
import os

from absl import flags, logging

from electra_jax import cli, config_lib, hf_interop, objectives, pretrained, storage
from electra_jax.data import tokenizers

_WORKDIR = flags.DEFINE_string('workdir', None, 'A pretraining workdir (or an HF directory).')
_OUTPUT = flags.DEFINE_string('output', None, 'Folder to write the HF model to.')
_GENERATOR = flags.DEFINE_boolean(
  'generator', False, 'Also export the generator to OUTPUT/generator as ElectraForMaskedLM.'
)
flags.mark_flags_as_required(['workdir', 'output'])


def _write_tokenizer(
  tokenizer: tokenizers.Tokenizer | None, directory: str, max_length: int
) -> None:
  if not isinstance(tokenizer, tokenizers.WordPieceTokenizer):
    logging.warning(
      'The model uses a sentencepiece tokenizer, which HF ElectraTokenizer '
      'cannot read; %s gets the model only',
      directory,
    )
    return
  storage.copy(tokenizer.file_path, os.path.join(directory, 'vocab.txt'))
  special = dict(
    zip(
      ('pad_token', 'unk_token', 'cls_token', 'sep_token', 'mask_token'), tokenizers.SPECIAL_TOKENS
    )
  )
  settings = {
    'tokenizer_class': 'ElectraTokenizer',
    'do_lower_case': tokenizer.lower_case,
    'strip_accents': tokenizer.strip_accents,
    'model_max_length': max_length,
    **special,
  }
  for name, value in (('tokenizer_config.json', settings), ('special_tokens_map.json', special)):
    storage.write_text(os.path.join(directory, name), json.dumps(value, indent=2))


def export(source: pretrained.Pretrained, output: str, *, generator: bool = False) -> list[str]:
  """Writes the HF directories; returns their paths."""
  pad = source.tokenizer.pad_id if source.tokenizer else 0
  cfg = source.discriminator_cfg
  if source.objective in objectives.RTD_OBJECTIVES:
    if 'discriminator_head' not in source.params:
      raise config_lib.ConfigError(
        f'{source.source}: has no discriminator head to export as ElectraForPreTraining'
      )
    hf_interop.write_hf_dir(
      output,
      hf_interop.hf_config(cfg, 'ElectraForPreTraining', pad),
      hf_interop.discriminator_to_hf(source.params, cfg),
    )
  else:
    hf_interop.write_hf_dir(
      output,
      hf_interop.hf_config(cfg, 'ElectraForMaskedLM', pad),
      hf_interop.masked_lm_to_hf(source.params, cfg, encoder='discriminator', head='mlm_head'),
    )
  _write_tokenizer(source.tokenizer, output, cfg.max_position_embeddings)
  written = [output]
  if generator:
    if 'generator_head' not in source.params:
      raise config_lib.ConfigError(f'--generator: {source.source} holds no generator')
    directory = os.path.join(output, 'generator')
    gen = source.generator_cfg
    tied = 'generator' not in source.params  # model.tie_generator_to_discriminator
    hf_interop.write_hf_dir(
      directory,
      hf_interop.hf_config(gen, 'ElectraForMaskedLM', pad),
      hf_interop.masked_lm_to_hf(
        source.params, gen, encoder='discriminator' if tied else 'generator'
      ),
    )
    _write_tokenizer(source.tokenizer, directory, gen.max_position_embeddings)
    written.append(directory)
  return written


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  source = pretrained.load(_WORKDIR.value)
  written = export(source, _OUTPUT.value, generator=_GENERATOR.value)
  step = f' (step {source.step})' if source.step is not None else ''
  for directory in written:
    print(f'wrote {directory}{step}')


if __name__ == '__main__':
  cli.run(main)
