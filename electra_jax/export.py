"""Exports a pretrained ELECTRA to HF `transformers` format.

  python -m electra_jax.export --workdir=DIR --output=OUT [--generator]

OUT receives the full-size network that pretraining kept: the discriminator
as `ElectraForPreTraining` (objectives electra and electra_15), or the masked
LM as `ElectraForMaskedLM` (mlm, replace_mlm, all_tokens_mlm; All-Tokens
MLM's copy head has no HF counterpart and is left out). Beside config.json and
model.safetensors it writes the tokenizer files: a fast tokenizer's
tokenizer.json that gives our ids for either kind of vocabulary (and for
WordPiece also vocab.txt, for the slow ElectraTokenizer), with
tokenizer_config.json and special_tokens_map.json.
So `transformers.AutoModelForPreTraining.from_pretrained(OUT)` (or
`ElectraForMaskedLM`) and `AutoTokenizer.from_pretrained(OUT)` load it.
--generator also writes the generator as `ElectraForMaskedLM` to
OUT/generator. --workdir may also be an HF directory, which is then written
back out (a lossless round trip).
"""

import json
import os

from absl import flags
from etils import epath
from sentencepiece import sentencepiece_model_pb2
import tokenizers as hf_tokenizers

from electra_jax import cli, config_lib, errors, hf_interop, objectives, pretrained, storage
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
  """The tokenizer files HF `AutoTokenizer` loads: a fast tokenizer's tokenizer.json
  that gives our ids, and for WordPiece also vocab.txt, which ElectraTokenizer (the
  slow one) reads."""
  if tokenizer is None:
    return
  special = dict(
    zip(
      ('pad_token', 'unk_token', 'cls_token', 'sep_token', 'mask_token'), tokenizers.SPECIAL_TOKENS
    )
  )
  settings = {
    'model_max_length': max_length,
    **special,
    'tokenizer_class': 'PreTrainedTokenizerFast',
    # ELECTRA reads segment ids, which the generic fast tokenizer leaves out by default.
    'model_input_names': ['input_ids', 'token_type_ids', 'attention_mask'],
  }
  if isinstance(tokenizer, tokenizers.WordPieceTokenizer):
    storage.copy(tokenizer.file_path, os.path.join(directory, 'vocab.txt'))
    settings.update(do_lower_case=tokenizer.lower_case, strip_accents=tokenizer.strip_accents)
    hf = _wordpiece_tokenizer(tokenizer)
  else:
    hf = _sentencepiece_tokenizer(tokenizer)
  hf.post_processor = hf_tokenizers.processors.TemplateProcessing(
    single='[CLS] $A:0 [SEP]',
    pair='[CLS] $A:0 [SEP] $B:1 [SEP]:1',
    special_tokens=[('[CLS]', tokenizer.cls_id), ('[SEP]', tokenizer.sep_id)],
  )
  storage.write_text(os.path.join(directory, 'tokenizer.json'), hf.to_str(pretty=True))
  for name, value in (('tokenizer_config.json', settings), ('special_tokens_map.json', special)):
    storage.write_text(os.path.join(directory, name), json.dumps(value, indent=2))


def _wordpiece_tokenizer(tokenizer: tokenizers.WordPieceTokenizer) -> hf_tokenizers.Tokenizer:
  """Our WordPiece in HF `tokenizers`: BERT's cleaning, CJK spacing and lower-casing,
  then accents stripped as tokenizers.basic_words does (NFD, combining marks dropped,
  NFC), which keeps Hangul syllables whole. BERT's own normaliser leaves them as
  jamo, so ElectraTokenizer and vocab.txt give a Korean vocabulary [UNK]s where we do
  not; tests/test_export.py checks the ids on English and Korean text."""
  hf = hf_tokenizers.Tokenizer(
    hf_tokenizers.models.WordPiece(
      tokenizer.vocab,
      unk_token=tokenizers.SPECIAL_TOKENS[1],
      max_input_chars_per_word=tokenizer.MAX_WORD_CHARS,
    )
  )
  steps = [
    hf_tokenizers.normalizers.BertNormalizer(
      clean_text=True,
      handle_chinese_chars=True,
      strip_accents=False,
      lowercase=tokenizer.lower_case,
    )
  ]
  if tokenizer.strip_accents:
    steps += [
      hf_tokenizers.normalizers.NFD(),
      hf_tokenizers.normalizers.StripAccents(),
      hf_tokenizers.normalizers.NFC(),
    ]
  hf.normalizer = hf_tokenizers.normalizers.Sequence(steps)
  hf.pre_tokenizer = hf_tokenizers.pre_tokenizers.BertPreTokenizer()
  hf.decoder = hf_tokenizers.decoders.WordPiece()
  return hf


def _sentencepiece_tokenizer(
  tokenizer: tokenizers.SentencePieceTokenizer,
) -> hf_tokenizers.Tokenizer:
  """The sentencepiece model as an HF `tokenizers` Unigram model with the same
  normalisation (its precompiled NFKC map, collapsed and stripped spaces) and
  '▁' word starts. The ids are sentencepiece's: tests/test_export.py checks them
  on Wikipedia text."""
  model = sentencepiece_model_pb2.ModelProto()
  model.ParseFromString(epath.Path(tokenizer.file_path).read_bytes())
  if model.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
    raise errors.UserError(
      f'{tokenizer.file_path}: not a unigram sentencepiece model; the HF export converts '
      'unigram models only (the default config.data.spm_model_type)'
    )
  hf = hf_tokenizers.Tokenizer(
    hf_tokenizers.models.Unigram(
      [(p.piece, p.score) for p in model.pieces],
      model.trainer_spec.unk_id,
      model.trainer_spec.byte_fallback,
    )
  )
  steps = []
  if model.normalizer_spec.precompiled_charsmap:
    steps.append(hf_tokenizers.normalizers.Precompiled(model.normalizer_spec.precompiled_charsmap))
  if model.normalizer_spec.remove_extra_whitespaces:
    steps += [
      hf_tokenizers.normalizers.Strip(),
      hf_tokenizers.normalizers.Replace(hf_tokenizers.Regex(' {2,}'), ' '),
    ]
  hf.normalizer = hf_tokenizers.normalizers.Sequence(steps)
  scheme = 'always' if model.normalizer_spec.add_dummy_prefix else 'never'
  hf.pre_tokenizer = hf_tokenizers.pre_tokenizers.Metaspace(prepend_scheme=scheme)
  hf.decoder = hf_tokenizers.decoders.Metaspace(prepend_scheme=scheme)
  return hf


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
    if 'generator_ltr' in source.params:
      raise config_lib.ConfigError(
        f"--generator: {source.source} holds Electric's two-tower cloze generator, "
        'which no HF class holds; export the discriminator alone'
      )
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
