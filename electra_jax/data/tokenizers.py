"""Tokenizers behind one interface: sentencepiece and WordPiece, trained or loaded.

Every tokenizer maps lines of text to token ids and knows its special ids
([PAD], [UNK], [CLS], [SEP], [MASK]). Special-token strings in the text are
ordinary text, as in the original BERT/ELECTRA tokenizer: a literal "[MASK]"
in the corpus never becomes the mask id.

A trained sentencepiece model reserves [PAD]=0 and [UNK]=1, and [CLS], [SEP],
[MASK] as control symbols (2, 3, 4). The WordPiece tokenizer reproduces
BERT's FullTokenizer (and so `transformers.BertTokenizer`) id for id. It is
written here, not run through HF `tokenizers` (whose pipeline export.py builds
with the same ids), because on one core it encoded 8,473 Wikipedia lines 2.8
times as fast: data preparation's workers each tokenize on one core, and HF's
pipeline also tracks character offsets that nothing here reads.
"""

import abc
import collections
from collections.abc import Iterable
import dataclasses
import functools
import hashlib
import itertools
import multiprocessing
import os
import tempfile
import time
from typing import Any
import unicodedata

from absl import logging
from etils import epath
import numpy as np
import sentencepiece as spm

from electra_jax import errors, storage


@dataclasses.dataclass(frozen=True)
class SpecialIds:
  """The ids of the special tokens that packing and masking write or skip."""

  pad: int
  cls: int
  sep: int
  mask: int


SPECIAL_TOKENS = ('[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]')
# The ids `train_sentencepiece` gives the special tokens ([UNK] is 1).
TRAINED_SPECIAL_IDS = SpecialIds(pad=0, cls=2, sep=3, mask=4)


class TokenizerError(errors.UserError):
  """A tokenizer file is unusable; the message names it and the fix."""


class Tokenizer(abc.ABC):
  """Text -> ids, with ELECTRA's special ids."""

  file_path: str  # The vocabulary or model file, local or a URL.
  pad_id: int
  unk_id: int
  cls_id: int
  sep_id: int
  mask_id: int

  @property
  @abc.abstractmethod
  def vocab_size(self) -> int: ...

  @abc.abstractmethod
  def encode(self, texts: list[str]) -> list[list[int]]:
    """Token ids of each text, without special tokens."""

  @abc.abstractmethod
  def spec(self) -> dict[str, Any]:
    """A JSON description from which `load_tokenizer` rebuilds this tokenizer."""

  @abc.abstractmethod
  def prepare_flags(self) -> list[str]:
    """The prepare_data flags that tokenize text as this tokenizer does."""

  @abc.abstractmethod
  def tokens(self, ids: Iterable[int]) -> list[str]:
    """The vocabulary strings of `ids` (WordPiece '##' continuations, sentencepiece '▁')."""

  @abc.abstractmethod
  def continues_word(self) -> np.ndarray:
    """bool [vocab_size]: whether each id continues the word before it
    (whole-word masking's table)."""

  @property
  def special_ids(self) -> SpecialIds:
    return SpecialIds(pad=self.pad_id, cls=self.cls_id, sep=self.sep_id, mask=self.mask_id)

  def _set_special_ids(self, ids: dict[str, int], path: str) -> None:
    missing = [token for token in SPECIAL_TOKENS if token not in ids]
    if missing:
      raise TokenizerError(
        f'{path}: lacks the special tokens {missing}; ELECTRA needs all of '
        f'{list(SPECIAL_TOKENS)} in the vocabulary'
      )
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
      ids[t] for t in SPECIAL_TOKENS
    )


def file_sha256(path: str) -> str:
  return hashlib.sha256(epath.Path(path).read_bytes()).hexdigest()


# --- Sentencepiece --------------------------------------------------------------


class SentencePieceTokenizer(Tokenizer):
  """A sentencepiece model with the special pieces."""

  def __init__(self, model_path: str):
    self.file_path = model_path
    try:
      self._sp = spm.SentencePieceProcessor(model_proto=epath.Path(model_path).read_bytes())
    except (OSError, RuntimeError) as e:
      raise TokenizerError(
        f'{model_path}: not a sentencepiece model ({e}); pass a .model '
        'file, or --spm_vocab_size=N to train one'
      ) from None
    ids = {p: self._sp.piece_to_id(p) for p in SPECIAL_TOKENS}
    self._set_special_ids(
      {p: i for p, i in ids.items() if self._sp.id_to_piece(i) == p}, model_path
    )

  @property
  def vocab_size(self) -> int:
    return self._sp.get_piece_size()

  def encode(self, texts: list[str]) -> list[list[int]]:
    return self._sp.encode(texts, out_type=int)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    return [self._sp.id_to_piece(int(i)) for i in ids]

  def continues_word(self) -> np.ndarray:
    # A word starts at a piece with sentencepiece's '▁'; special pieces stand alone.
    return np.array(
      [
        not self._sp.id_to_piece(i).startswith('▁')
        and not (self._sp.is_control(i) or self._sp.is_unknown(i))
        for i in range(self.vocab_size)
      ]
    )

  def prepare_flags(self) -> list[str]:
    return [f'--spm_model={self.file_path}']

  def spec(self) -> dict[str, Any]:
    return {
      'kind': 'sentencepiece',
      'file': os.path.basename(self.file_path),
      'sha256': file_sha256(self.file_path),
      'vocab_size': self.vocab_size,
    }


_PROGRESS_SECONDS = 30  # How often a long sentencepiece training says it is alive.


def _train_sentencepiece(options: dict[str, Any], result: Any) -> None:
  """In the child process: trains, then sends '' or the error's message."""
  try:
    spm.SentencePieceTrainer.train(**options)
  except Exception as e:  # Reported by the parent, which names the input.
    result.send(str(e))
    return
  result.send('')


def train_sentencepiece(
  sentences: Iterable[str],
  model_prefix: str,
  *,
  vocab_size: int,
  model_type: str,
  max_sentences: int,
) -> str:
  """Trains a model on up to `max_sentences` lines; returns the .model path.

  The sample is written to a file with progress lines, then sentencepiece trains
  in a child process: its C++ trainer runs for minutes at large vocabularies and
  does not return to Python, so Ctrl-C could not stop it in this process; here
  it stops the child at once, and a line every 30 s says the training goes on.
  """
  os.makedirs(os.path.dirname(model_prefix) or '.', exist_ok=True)
  sample = model_prefix + '.sample.txt'
  count, last = 0, time.monotonic()
  with open(sample, 'w', encoding='utf-8') as f:
    for sentence in itertools.islice(sentences, max_sentences):
      f.write(sentence + '\n')
      count += 1
      if time.monotonic() - last >= _PROGRESS_SECONDS:
        logging.info(
          'sentencepiece: %s of up to %s sentences sampled', f'{count:,}', f'{max_sentences:,}'
        )
        last = time.monotonic()
  logging.info('sentencepiece: training %d pieces on %s sentences', vocab_size, f'{count:,}')
  options = dict(
    input=sample,
    model_prefix=model_prefix,
    vocab_size=vocab_size,
    model_type=model_type,
    pad_id=0,
    pad_piece='[PAD]',
    unk_id=1,
    unk_piece='[UNK]',
    bos_id=-1,
    eos_id=-1,
    control_symbols=['[CLS]', '[SEP]', '[MASK]'],
    character_coverage=0.9999,
    num_threads=os.cpu_count() or 1,
    minloglevel=2,
  )
  start = time.monotonic()
  # 'spawn': the parent may hold JAX's threads, which a fork would copy half-way.
  context = multiprocessing.get_context('spawn')
  receive, send = context.Pipe(duplex=False)
  trainer = context.Process(target=_train_sentencepiece, args=(options, send), daemon=True)
  trainer.start()
  try:
    trainer.join(_PROGRESS_SECONDS)
    while trainer.is_alive():
      logging.info('sentencepiece: still training (%.0f s so far)', time.monotonic() - start)
      trainer.join(_PROGRESS_SECONDS)
  finally:  # Ctrl-C, or any error here: the child goes at once; it holds nothing to keep.
    if trainer.is_alive():
      trainer.kill()
      trainer.join()
  failure = receive.recv() if receive.poll() else f'exit status {trainer.exitcode}'
  if failure:
    raise RuntimeError(failure)  # sentencepiece reports a too-small corpus this way.
  os.remove(sample)
  _forget_file_names(model_prefix + '.model')
  logging.info(
    'Trained a %d-piece %s sentencepiece model in %.0f s: %s.model',
    vocab_size,
    model_type,
    time.monotonic() - start,
    model_prefix,
  )
  return model_prefix + '.model'


def _forget_file_names(model_file: str) -> None:
  """Clears the file names that sentencepiece keeps in the model's trainer spec (the
  sample and the output prefix), so that the same sentences and options give the
  same bytes, and the same sha256, in any folder."""
  from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top

  proto = sentencepiece_model_pb2.ModelProto()
  with open(model_file, 'rb') as f:
    proto.ParseFromString(f.read())
  del proto.trainer_spec.input[:]
  proto.trainer_spec.model_prefix = ''
  with open(model_file, 'wb') as f:
    f.write(proto.SerializeToString())


# --- WordPiece ------------------------------------------------------------------


def _is_punctuation(char: str) -> bool:
  # BERT treats every non-alphanumeric ASCII symbol as punctuation, plus the
  # Unicode P* categories.
  cp = ord(char)
  return (
    33 <= cp <= 47
    or 58 <= cp <= 64
    or 91 <= cp <= 96
    or 123 <= cp <= 126
    or unicodedata.category(char).startswith('P')
  )


def _is_control(char: str) -> bool:
  return char not in '\t\n\r' and unicodedata.category(char).startswith('C')


def _is_whitespace(char: str) -> bool:
  return char in ' \t\n\r' or unicodedata.category(char) == 'Zs'


def _is_cjk(cp: int) -> bool:
  return (
    0x4E00 <= cp <= 0x9FFF
    or 0x3400 <= cp <= 0x4DBF
    or 0x20000 <= cp <= 0x2A6DF
    or 0x2A700 <= cp <= 0x2B73F
    or 0x2B740 <= cp <= 0x2B81F
    or 0x2B820 <= cp <= 0x2CEAF
    or 0xF900 <= cp <= 0xFAFF
    or 0x2F800 <= cp <= 0x2FA1F
  )


class _CharMap(dict):
  """A str.translate table that decides each code point once, on first sight."""

  def __init__(self, decide):
    super().__init__()
    self._decide = decide

  def __missing__(self, cp: int) -> str:
    self[cp] = value = self._decide(chr(cp))
    return value


def _clean(char: str) -> str:
  """BERT's text cleaning: drop controls, unify whitespace, space out CJK characters."""
  if char in '\x00\ufffd' or _is_control(char):
    return ''
  if _is_whitespace(char):
    return ' '
  return f' {char} ' if _is_cjk(ord(char)) else char


def _split_punctuation(char: str) -> str:
  return f' {char} ' if _is_punctuation(char) else char


def _strip_accent_and_split_punctuation(char: str) -> str:
  return '' if unicodedata.category(char) == 'Mn' else _split_punctuation(char)


_CLEAN = _CharMap(_clean)
_SPLIT = _CharMap(_split_punctuation)
_STRIP_AND_SPLIT = _CharMap(_strip_accent_and_split_punctuation)


def basic_words(text: str, *, lower_case: bool, strip_accents: bool) -> list[str]:
  """BERT's BasicTokenizer, before WordPiece: the words of a text, cleaned,
  lower-cased and stripped of accents as asked, and split at punctuation and CJK
  characters. Three str.translate passes, which run in C."""
  text = text.translate(_CLEAN)
  if lower_case:
    # Σ -> σ first: str.lower() alone would give word-final ς, but
    # transformers' BertTokenizer lower-cases character by character.
    text = text.replace('Σ', 'σ').lower()
  if strip_accents and not text.isascii():
    # NFD then dropping combining marks (category Mn) removes accents; NFC
    # then puts back together what NFD split that was not a mark: a Hangul
    # syllable's jamo (letters, not marks), which BERT leaves decomposed and
    # so turns every Korean word into pieces no Korean vocabulary holds.
    text = unicodedata.normalize('NFD', text).translate(_STRIP_AND_SPLIT)
    return unicodedata.normalize('NFC', text).split()
  return text.translate(_SPLIT).split()


class WordPieceTokenizer(Tokenizer):
  """BERT's WordPiece: basic tokenization, then greedy longest-match subwords."""

  MAX_WORD_CHARS = 100  # Longer words become [UNK], as in BERT.

  def __init__(
    self, vocab_path: str, *, lower_case: bool = True, strip_accents: bool | None = None
  ):
    self.file_path = vocab_path
    self.lower_case = lower_case
    # As BERT: accents are stripped when lower-casing unless told otherwise.
    self.strip_accents = lower_case if strip_accents is None else strip_accents
    try:
      with storage.open_text(vocab_path) as f:
        tokens = [line.rstrip('\n') for line in f]
    except (OSError, UnicodeDecodeError) as e:
      raise TokenizerError(
        f'{vocab_path}: cannot read the WordPiece vocabulary ({e}); pass a '
        'vocab.txt with one token per line'
      ) from None
    self._vocab = {token: i for i, token in enumerate(tokens) if token}
    self._id_to_token = tokens
    self._size = len(tokens)
    self._set_special_ids(self._vocab, vocab_path)
    self._word_ids = functools.lru_cache(maxsize=1 << 20)(self._wordpiece)

  @property
  def vocab_size(self) -> int:
    return self._size

  @property
  def vocab(self) -> dict[str, int]:
    """Each piece's id (a piece listed twice keeps its last id)."""
    return dict(self._vocab)

  def tokens(self, ids: Iterable[int]) -> list[str]:
    return [self._id_to_token[int(i)] for i in ids]

  def continues_word(self) -> np.ndarray:
    return np.array([token.startswith('##') for token in self._id_to_token])

  def prepare_flags(self) -> list[str]:
    flags = [f'--vocab={self.file_path}']
    if not self.lower_case:
      flags.append('--config.data.lower_case=False')
    if self.strip_accents != self.lower_case:
      flags.append(f'--config.data.strip_accents={self.strip_accents}')
    return flags

  def spec(self) -> dict[str, Any]:
    return {
      'kind': 'wordpiece',
      'file': os.path.basename(self.file_path),
      'sha256': file_sha256(self.file_path),
      'vocab_size': self.vocab_size,
      'lower_case': self.lower_case,
      'strip_accents': self.strip_accents,
    }

  def _words(self, text: str) -> list[str]:
    return basic_words(text, lower_case=self.lower_case, strip_accents=self.strip_accents)

  def _wordpiece(self, word: str) -> tuple[int, ...]:
    if len(word) > self.MAX_WORD_CHARS:
      return (self.unk_id,)
    ids, start = [], 0
    while start < len(word):
      for end in range(len(word), start, -1):
        piece = word[start:end] if start == 0 else '##' + word[start:end]
        if piece in self._vocab:
          ids.append(self._vocab[piece])
          start = end
          break
      else:
        return (self.unk_id,)
    return tuple(ids)

  def encode(self, texts: list[str]) -> list[list[int]]:
    return [[i for word in self._words(text) for i in self._word_ids(word)] for text in texts]


def train_wordpiece(
  lines: Iterable[str],
  output: str,
  *,
  vocab_size: int,
  lower_case: bool,
  strip_accents: bool,
  unused: int,
  limit_alphabet: int,
  min_frequency: int,
) -> str:
  """Trains WordPiece on the basic tokenizer's words of `lines`; returns vocab.txt's path.

  The same corpus always gives the same vocab.txt. HF `tokenizers` alone does not
  promise that: its trainer numbers the continuing pieces (##c) in hash-map order,
  which differs from run to run, and breaks ties between equally frequent merges by
  those numbers (huggingface/tokenizers#1794). So the words are first written to a
  temporary file while their characters are counted, and the trainer is given the
  alphabet and its continuing pieces in sorted order; merges then break ties alike.
  """
  import tokenizers as hf_tokenizers  # pylint: disable=g-import-not-at-top

  chars: collections.Counter[str] = collections.Counter()
  first_chars: collections.Counter[str] = collections.Counter()
  with tempfile.TemporaryDirectory(prefix='electra_jax_wordpiece_') as tmp:
    words_file = os.path.join(tmp, 'words.txt')
    with open(words_file, 'w', encoding='utf-8') as f:
      for line in lines:
        words = basic_words(line, lower_case=lower_case, strip_accents=strip_accents)
        chars.update(''.join(words))
        first_chars.update(word[0] for word in words)
        f.write(' '.join(words) + '\n')
    # The most frequent characters, ties broken by the character; all with no limit.
    alphabet = sorted(chars, key=lambda c: (-chars[c], c))[: limit_alphabet or None]
    continuing = sorted(f'##{c}' for c in alphabet if chars[c] > first_chars[c])
    model = hf_tokenizers.Tokenizer(hf_tokenizers.models.WordPiece(unk_token='[UNK]'))
    # The words are ours already: the trainer only splits them at spaces.
    model.pre_tokenizer = hf_tokenizers.pre_tokenizers.WhitespaceSplit()
    trainer = hf_tokenizers.trainers.WordPieceTrainer(
      vocab_size=vocab_size - unused,
      min_frequency=min_frequency,
      # Given as special tokens, the continuing pieces get their numbers up front.
      special_tokens=[*SPECIAL_TOKENS, *continuing],
      # The initial alphabet is always kept, and the limit drops every other character.
      initial_alphabet=alphabet,
      limit_alphabet=len(alphabet),
      continuing_subword_prefix='##',
      show_progress=False,
    )
    model.train([words_file], trainer=trainer)
  ids = model.get_vocab()
  pieces = sorted(ids, key=ids.get)
  special = len(SPECIAL_TOKENS)
  characters_end = special + len(continuing) + len(alphabet)
  assert tuple(pieces[:special]) == SPECIAL_TOKENS, pieces[:special]
  assert pieces[special : special + len(continuing)] == continuing
  # Laid out as the trainer lays out a vocabulary by itself: the special tokens, then
  # the characters, their continuing pieces, and the merges in the order they were made.
  pieces = [
    *pieces[:special],
    *(f'[unused{i}]' for i in range(unused)),
    *pieces[special + len(continuing) : characters_end],
    *continuing,
    *pieces[characters_end:],
  ]
  path = os.path.join(output, 'vocab.txt')
  storage.write_text(path, ''.join(f'{piece}\n' for piece in pieces))
  if len(pieces) < vocab_size:
    logging.warning(
      'The corpus gave %d ids, not %d: it has too few distinct pieces for that size',
      len(pieces),
      vocab_size,
    )
  return path


# --- Loading ----------------------------------------------------------------------


def load_tokenizer(spec: dict[str, Any], directory: str) -> Tokenizer:
  """The tokenizer that `spec` (from Tokenizer.spec()) describes, its file in `directory`."""
  path = os.path.join(directory, spec['file'])
  if not epath.Path(path).exists():
    raise TokenizerError(f'{path} is missing; the prepared data needs its tokenizer file')
  if file_sha256(path) != spec['sha256']:
    raise TokenizerError(
      f'{path} changed since the data was prepared (sha256 differs); '
      'restore it or prepare the data again'
    )
  if spec['kind'] == 'sentencepiece':
    tokenizer: Tokenizer = SentencePieceTokenizer(path)
  elif spec['kind'] == 'wordpiece':
    tokenizer = WordPieceTokenizer(
      path, lower_case=spec['lower_case'], strip_accents=spec['strip_accents']
    )
  else:
    raise TokenizerError(f'{directory}: unknown tokenizer kind {spec["kind"]!r}')
  return tokenizer


def copy_tokenizer_file(tokenizer: Tokenizer, directory: str) -> Tokenizer:
  """Copies the tokenizer's file into `directory`, returning the tokenizer loaded from there."""
  epath.Path(directory).mkdir(parents=True, exist_ok=True)
  source = tokenizer.file_path
  target = os.path.join(directory, os.path.basename(source))
  if storage.is_url(target) or os.path.abspath(source) != os.path.abspath(target):
    storage.copy(source, target)
  return load_tokenizer(tokenizer.spec(), directory)
