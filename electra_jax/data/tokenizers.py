"""Sentencepiece tokenizer with ELECTRA's special tokens.

The trained model reserves [PAD]=0 and [UNK]=1, and [CLS], [SEP], [MASK] as
control symbols (2, 3, 4): they never come out of encoding text, so a literal
"[MASK]" in the corpus stays ordinary text.
"""

from collections.abc import Iterable, Iterator
import itertools
import os

from absl import logging
import sentencepiece as spm

from electra_jax.objective import SpecialIds

SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# The ids `train_sentencepiece` gives the special tokens ([UNK] is 1).
TRAINED_SPECIAL_IDS = SpecialIds(pad=0, cls=2, sep=3, mask=4)


class SentencePieceTokenizer:
  """Text -> ids with a sentencepiece model, plus the special token ids."""

  def __init__(self, model_path: str):
    self.model_path = model_path
    self._sp = spm.SentencePieceProcessor(model_file=model_path)
    ids = {piece: self._sp.piece_to_id(piece) for piece in SPECIAL_TOKENS}
    missing = [p for p, i in ids.items() if self._sp.id_to_piece(i) != p]
    if missing:
      raise ValueError(f'{model_path}: sentencepiece model lacks the special pieces {missing}; '
                       'train it with electra_jax (or with these as pad/unk/control symbols)')
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        ids[p] for p in SPECIAL_TOKENS)

  @property
  def special_ids(self) -> SpecialIds:
    return SpecialIds(pad=self.pad_id, cls=self.cls_id, sep=self.sep_id, mask=self.mask_id)

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, texts: list[str]) -> list[list[int]]:
    return self._sp.encode(texts, out_type=int)


def train_sentencepiece(sentences: Iterable[str], model_prefix: str, *, vocab_size: int,
                        model_type: str, max_sentences: int) -> str:
  """Trains a model on up to `max_sentences` lines; returns the .model path."""
  os.makedirs(os.path.dirname(model_prefix) or '.', exist_ok=True)
  sample: Iterator[str] = itertools.islice(sentences, max_sentences)
  spm.SentencePieceTrainer.train(
      sentence_iterator=sample,
      model_prefix=model_prefix,
      vocab_size=vocab_size,
      model_type=model_type,
      pad_id=0, pad_piece='[PAD]',
      unk_id=1, unk_piece='[UNK]',
      bos_id=-1, eos_id=-1,
      control_symbols=['[CLS]', '[SEP]', '[MASK]'],
      character_coverage=0.9999,
      num_threads=os.cpu_count() or 1,
      minloglevel=2,
  )
  logging.info('Trained a %d-piece %s sentencepiece model: %s.model', vocab_size,
               model_type, model_prefix)
  return model_prefix + '.model'
