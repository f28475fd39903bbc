"""Builds a vocabulary for a corpus: WordPiece (vocab.txt) or sentencepiece (spm.model).

  python -m electra_jax.build_vocab --corpus='wiki:../shared/data/korean/kowiki/AA/wiki_*' \
      --output=/tmp/ko_vocab --vocab_size=32000 [--type=wordpiece|sentencepiece]

The corpus spec is prepare_data's. WordPiece is trained by HF `tokenizers` on
the words of our own basic tokenizer, with the same cleaning, lower-casing and
accent rule that `prepare_data --vocab` then applies, so the vocabulary is made
of exactly the words it will cut. OUTPUT/vocab.txt holds [PAD] [UNK] [CLS]
[SEP] [MASK], then --unused [unusedN] slots (room for tokens added later), then
the learned pieces. Sentencepiece writes OUTPUT/spm.model, trained as
`prepare_data --spm_vocab_size` trains one. Then prepare the corpus with
`--vocab=OUTPUT/vocab.txt` (and the same --config.data.lower_case) or
`--spm_model=OUTPUT/spm.model`.
"""

from collections.abc import Iterator
import os
import tempfile

from absl import flags, logging
from etils import epath
import tqdm

from electra_jax import cli, storage
from electra_jax.data import packing, sources, tokenizers

_CORPUS = flags.DEFINE_string(
  'corpus', None, "Corpus spec, as prepare_data's (see electra_jax/data/sources.py)."
)
_OUTPUT = flags.DEFINE_string('output', None, 'Folder for vocab.txt or spm.model.')
_VOCAB_SIZE = flags.DEFINE_integer('vocab_size', None, 'Ids in all, special and unused included.')
_TYPE = flags.DEFINE_enum('type', 'wordpiece', ['wordpiece', 'sentencepiece'], 'Which kind.')
_LOWER_CASE = flags.DEFINE_boolean('lower_case', True, 'WordPiece: lower-case the text.')
_STRIP_ACCENTS = flags.DEFINE_boolean(
  'strip_accents', None, 'WordPiece: strip accents (default: as --lower_case, as BERT).'
)
_UNUSED = flags.DEFINE_integer('unused', 0, 'WordPiece: [unusedN] slots after the special tokens.')
_LIMIT_ALPHABET = flags.DEFINE_integer(
  'limit_alphabet',
  0,
  'WordPiece: keep only the N most frequent characters as the initial alphabet (0: all). '
  "BERT's English vocabularies kept 1,000; Korean needs its syllables (a Korean vocabulary "
  'of 8,000 left 1.7% of unseen Wikipedia text [UNK] at 1,000, 0.2% at 0).',
)
_MIN_FREQUENCY = flags.DEFINE_integer('min_frequency', 2, 'WordPiece: rarer pairs never merge.')
_MAX_SENTENCES = flags.DEFINE_integer(
  'max_sentences', 1_000_000, 'sentencepiece: the sentences it trains on, at most.'
)
flags.mark_flags_as_required(['corpus', 'output', 'vocab_size'])


def _lines(spec: str) -> tuple[list[sources.WorkUnit], Iterator[str]]:
  """The corpus's work units, and its lines behind a progress bar over them."""
  units = sources.plan_units(spec, sources.ReadOptions())

  def lines():
    for unit in tqdm.tqdm(units, desc='build_vocab', unit='file'):
      for document in sources.read_documents(unit, sources.ReadOptions()):
        yield from document

  return units, lines()


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  minimum = len(tokenizers.SPECIAL_TOKENS) + _UNUSED.value + 100
  if _VOCAB_SIZE.value < minimum:
    raise tokenizers.TokenizerError(
      f'--vocab_size={_VOCAB_SIZE.value}: too small; give at least {minimum} '
      '(the special tokens, the unused slots and 100 pieces)'
    )
  name = 'vocab.txt' if _TYPE.value == 'wordpiece' else 'spm.model'
  if epath.Path(os.path.join(_OUTPUT.value, name)).exists():
    raise tokenizers.TokenizerError(
      f'--output={_OUTPUT.value}: already holds {name}; choose another folder or delete it'
    )
  epath.Path(_OUTPUT.value).mkdir(parents=True, exist_ok=True)
  units, lines = _lines(_CORPUS.value)
  logging.info(
    'Building a %d-id %s vocabulary from %d files', _VOCAB_SIZE.value, _TYPE.value, len(units)
  )
  if _TYPE.value == 'wordpiece':
    lower_case = _LOWER_CASE.value
    path = tokenizers.train_wordpiece(
      lines,
      _OUTPUT.value,
      vocab_size=_VOCAB_SIZE.value,
      lower_case=lower_case,
      strip_accents=lower_case if _STRIP_ACCENTS.value is None else _STRIP_ACCENTS.value,
      unused=_UNUSED.value,
      limit_alphabet=_LIMIT_ALPHABET.value,
      min_frequency=_MIN_FREQUENCY.value,
    )
    tokenizer: tokenizers.Tokenizer = tokenizers.WordPieceTokenizer(path, lower_case=lower_case)
    use = f'--vocab={path} --config.data.lower_case={lower_case}'
  else:
    sentences = (s for line in lines for s in packing.split_sentences(line))
    # sentencepiece writes local files: train in a temporary folder, then copy.
    with tempfile.TemporaryDirectory(prefix='electra_jax_spm_') as tmp:
      try:
        tokenizers.train_sentencepiece(
          sentences,
          os.path.join(tmp, 'spm'),
          vocab_size=_VOCAB_SIZE.value,
          model_type='unigram',
          max_sentences=_MAX_SENTENCES.value,
        )
      except RuntimeError as e:  # sentencepiece reports a size it cannot reach this way.
        raise tokenizers.TokenizerError(
          f'--vocab_size={_VOCAB_SIZE.value}: sentencepiece could not train it on this corpus '
          f'({e}); give another size, or more text'
        ) from None
      for suffix in ('.model', '.vocab'):
        storage.copy(os.path.join(tmp, 'spm' + suffix), os.path.join(_OUTPUT.value, 'spm' + suffix))
    path = os.path.join(_OUTPUT.value, 'spm.model')
    tokenizer = tokenizers.SentencePieceTokenizer(path)
    use = f'--spm_model={path}'
  print(f'{path}: {tokenizer.vocab_size} ids')
  print(f'prepare the corpus with: python -m electra_jax.prepare_data {use} ...')


if __name__ == '__main__':
  cli.run(main)
