"""Token tagging (NER, chunking) from CoNLL-format files: `--task=tagging`.

Files hold one token a line in whitespace-separated columns, the tag in the
last column (or `--label_column`), a blank line between sentences; `-DOCSTART-`
lines are skipped. Each word is cut into the tokenizer's pieces, and the
model tags a word at its first piece, as BERT and the released ELECTRA code do.
A sentence longer than the model's input is cut into windows of whole words,
so every word is tagged exactly once.

Scores are conlleval's: an entity counts only when its type and both of its
boundaries are right. Chunks are read with conlleval's rules, extended to
IOBES as seqeval's port does, so IOB1, IOB2 and IOBES tags all work.
"""

import collections
import dataclasses
import os
from typing import Any

from absl import logging
from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from electra_jax import storage
from electra_jax.config_lib import EncoderConfig
from electra_jax.data.tokenizers import Tokenizer
from electra_jax.finetune import tasks
from electra_jax.model import TokenClassifier

TaskDataError = tasks.TaskDataError
# --task values that mean tagging; conll2003 is the NER data set's name for it.
TASK_NAMES = ('tagging', 'conll2003')
# Files looked for in --data_dir: train, then the first of these for evaluation.
TRAIN_FILE = 'train.txt'
DEV_FILES = ('dev.txt', 'valid.txt', 'test.txt')


@dataclasses.dataclass
class Sentences:
  """Tagged sentences; `tags` is None for a file read without tags."""

  words: list[list[str]]
  tags: list[list[str]] | None

  def __len__(self) -> int:
    return len(self.words)

  def subset(self, keep: np.ndarray) -> 'Sentences':
    return Sentences([self.words[i] for i in keep], [self.tags[i] for i in keep])


def read_conll(path: str, label_column: int = -1, *, tagged: bool = True) -> Sentences:
  """The sentences of a CoNLL file (`tagged` False: words only, which a test file
  may hold alone); errors name the file and line."""
  if not epath.Path(path).exists():
    raise TaskDataError(f'{path}: no such file')
  words, tags, sentence_words, sentence_tags = [], [], [], []

  def end_sentence():
    if sentence_words:
      words.append(sentence_words[:])
      tags.append(sentence_tags[:])
      sentence_words.clear()
      sentence_tags.clear()

  try:
    with storage.open_text(path, encoding='utf-8-sig') as f:
      for line, text in enumerate(f, 1):
        columns = text.split()
        if not columns or columns[0] == '-DOCSTART-':
          end_sentence()
          continue
        if not tagged:
          sentence_words.append(columns[0])
          continue
        if len(columns) < 2 or not -len(columns) <= label_column < len(columns):
          raise TaskDataError(
            f'{path}:{line}: {len(columns)} column(s), but the tag is read from column '
            f'{label_column}; a CoNLL line is a token then its columns, tag last '
            '(or say which with --label_column)'
          )
        sentence_words.append(columns[0])
        sentence_tags.append(columns[label_column])
  except UnicodeDecodeError as e:
    raise TaskDataError(f'{path}: not UTF-8 ({e}); save the file as UTF-8 text') from None
  end_sentence()
  if not words:
    raise TaskDataError(f'{path}: no sentences; the file is empty')
  return Sentences(words, tags if tagged else None)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaggingTask(tasks.Task):
  """A tagging task: its tags (the training file's, sorted) are its labels, and
  the model tags every word at its first piece."""

  metrics: tuple[str, ...] = ('f1', 'precision', 'recall', 'accuracy')

  def head(self, cfg: EncoderConfig, dropout_rate: float) -> nn.Module:
    return TokenClassifier(cfg, self.num_outputs, dropout_rate)

  def encode(
    self, examples: 'Sentences', tokenizer: Tokenizer, max_seq_length: int, swap: bool = False
  ) -> tasks.Features:
    del swap  # One text: nothing to swap.
    return encode(examples, tokenizer, self.labels, max_seq_length)

  def reference(self, examples: 'Sentences') -> 'Sentences':
    return examples

  def loss(self, outputs: jax.Array, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Cross-entropy over the words' first pieces (targets -1 elsewhere)."""
    del mask
    counted = targets >= 0
    losses = optax.softmax_cross_entropy_with_integer_labels(outputs, jnp.maximum(targets, 0))
    return jnp.sum(jnp.where(counted, losses, 0.0)) / jnp.maximum(jnp.sum(counted), 1)

  def tags(
    self, outputs: np.ndarray, encoded: tasks.Features, sentences: 'Sentences'
  ) -> list[list[str]]:
    """Each sentence's tags, read at its words' first pieces: windows are in
    sentence order, so the first pieces are the words in order."""
    ids = outputs.argmax(-1)[encoded['word_starts'].astype(bool)]
    bounds = np.cumsum([len(words) for words in sentences.words])[:-1]
    return [[self.labels[i] for i in sentence] for sentence in np.split(ids, bounds)]

  def evaluate(
    self, outputs: np.ndarray, encoded: tasks.Features, reference: 'Sentences'
  ) -> dict[str, float]:
    return score(reference.tags, self.tags(outputs, encoded, reference))

  def write_predictions(
    self, path: str, outputs: np.ndarray, encoded: tasks.Features, examples: 'Sentences'
  ) -> None:
    """CoNLL lines at `path`.tsv."""
    write_predictions(f'{path}.tsv', examples, self.tags(outputs, encoded, examples))

  def constant_baseline(self, train: 'Sentences', dev: dict[str, 'Sentences']) -> dict[str, Any]:
    tags = [tag for sentence in train.tags for tag in sentence]
    answer = max(sorted(set(tags)), key=tags.count)
    return {
      'answer': answer,
      'dev': {
        split: score(sentences.tags, [[answer] * len(s) for s in sentences.tags])
        for split, sentences in dev.items()
      },
    }


def task_files(
  name: str, data_dir: str | None, files: dict[str, str], label_column: int
) -> tasks.TaskFiles:
  """The tagging task of CoNLL files: `files` ('train', 'dev', 'test') name them,
  else train.txt and the first of DEV_FILES in data_dir; the test file is optional."""
  paths = {}
  for split, defaults in (('train', (TRAIN_FILE,)), ('dev', DEV_FILES)):
    if split in files:
      paths[split] = files[split]
      continue
    found = [os.path.join(data_dir, f) for f in defaults if data_dir is not None]
    found = [path for path in found if epath.Path(path).exists()]
    if not found:
      raise TaskDataError(
        f'--task={name} needs a {split} file: name it with --{split}_file, or give --data_dir '
        f'holding {" or ".join(defaults)}'
      )
    paths[split] = found[0]
  if 'test' in files:
    paths['test'] = files['test']
  train = read_conll(paths['train'], label_column)
  labels = tuple(sorted({tag for tags in train.tags for tag in tags}))
  task = TaggingTask(
    name=name,
    labels=labels,
    test_splits=(('test', 'predictions'),) if 'test' in paths else (),
  )

  def read(split: str, path: str) -> Sentences:
    if split == 'train':
      return train
    if split == 'test':
      return read_conll(path, label_column, tagged=False)
    sentences = read_conll(path, label_column)
    counts = collections.Counter(tag for tags in sentences.tags for tag in tags)
    unknown = {tag: n for tag, n in sorted(counts.items()) if tag not in labels}
    if len(unknown) == len(counts):
      raise TaskDataError(
        f"{path}: none of its tags {list(unknown)[:10]} is among the training file's "
        f'{list(labels)[:10]}; read the same column of both (--label_column)'
      )
    if unknown:
      # CoNLL-2003's chunk tags: valid.txt has two I-PRT, train.txt none. conlleval
      # scores such words as the model's errors, and so does score().
      logging.warning(
        '%s: %d of its %d words carry tags the training file lacks (%s); the model cannot '
        'predict them, so they count as errors',
        path,
        sum(unknown.values()),
        counts.total(),
        ', '.join(f'{tag}: {n}' for tag, n in unknown.items()),
      )
    return sentences

  return tasks.TaskFiles(task, paths, read)


def write_predictions(path: str, sentences: Sentences, predicted: list[list[str]]) -> None:
  """CoNLL lines `word<TAB>predicted tag`, a blank line after each sentence."""
  with storage.open_text(path, 'w') as f:
    for words, tags in zip(sentences.words, predicted, strict=True):
      f.writelines(f'{word}\t{tag}\n' for word, tag in zip(words, tags, strict=True))
      f.write('\n')


# --- Entities, as conlleval reads them ----------------------------------------------


def _split(tag: str) -> tuple[str, str]:
  """('B', 'PER') from 'B-PER'; ('O', '') from 'O'; a bare 'B' or 'I' has no type."""
  if tag == 'O':
    return 'O', ''
  prefix, _, kind = tag.partition('-')
  return prefix, kind


def _ends(prev: str, prev_kind: str, tag: str, kind: str) -> bool:
  """Whether a chunk ends at the previous token, seeing this one."""
  return (
    prev in ('E', 'S')
    or (prev in ('B', 'I') and tag in ('B', 'S', 'O'))
    or (prev != 'O' and prev_kind != kind)
  )


def _starts(prev: str, prev_kind: str, tag: str, kind: str) -> bool:
  """Whether a chunk starts at this token, after the previous one."""
  return (
    tag in ('B', 'S')
    or (prev in ('E', 'S', 'O') and tag in ('E', 'I'))
    or (tag != 'O' and prev_kind != kind)
  )


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
  """(type, first, last) of each chunk in one sentence's tags."""
  found, start = set(), None
  prev, prev_kind = 'O', ''
  for i, tag in enumerate([*tags, 'O']):  # A last 'O' closes the final chunk.
    prefix, kind = _split(tag)
    if start is not None and _ends(prev, prev_kind, prefix, kind):
      found.add((prev_kind, start, i - 1))
      start = None
    if _starts(prev, prev_kind, prefix, kind):
      start = i
    prev, prev_kind = prefix, kind
  return found


def score(gold: list[list[str]], predicted: list[list[str]]) -> dict[str, float]:
  """Entity precision, recall and F1 (conlleval), and token accuracy."""
  right = guessed = present = correct_tokens = tokens = 0
  for gold_tags, predicted_tags in zip(gold, predicted, strict=True):
    gold_entities, predicted_entities = entities(gold_tags), entities(predicted_tags)
    right += len(gold_entities & predicted_entities)
    guessed += len(predicted_entities)
    present += len(gold_entities)
    correct_tokens += sum(g == p for g, p in zip(gold_tags, predicted_tags, strict=True))
    tokens += len(gold_tags)
  precision = right / guessed if guessed else 0.0
  recall = right / present if present else 0.0
  f1 = 2 * precision * recall / (precision + recall) if right else 0.0
  return {'f1': f1, 'precision': precision, 'recall': recall, 'accuracy': correct_tokens / tokens}


# --- Model inputs -------------------------------------------------------------------


def encode(
  sentences: Sentences, tokenizer: Tokenizer, labels: tuple[str, ...], max_seq_length: int
) -> dict[str, np.ndarray]:
  """int32 [W, max_seq_length] arrays for W windows of whole words, in sentence
  order: input_ids, attention_mask, token_type_ids, `word_starts` (1 at each
  word's first piece) and `targets` (the word's tag id there, -1 elsewhere, at a
  tag not in `labels`, which no loss counts, and throughout a file without tags)."""
  vocabulary = sorted({word for sentence in sentences.words for word in sentence})
  # A word that the tokenizer drops (a lone control character) is tagged at [UNK].
  pieces = {
    word: ids or [tokenizer.unk_id] for word, ids in zip(vocabulary, tokenizer.encode(vocabulary))
  }
  budget = max_seq_length - 2  # [CLS] and [SEP].
  ids = {tag: i for i, tag in enumerate(labels)}
  rows = []
  for s, words in enumerate(sentences.words):
    tag_ids = (
      [ids.get(tag, -1) for tag in sentences.tags[s]] if sentences.tags else [-1] * len(words)
    )
    window, window_tags = [], []
    for word, tag in zip(words, tag_ids, strict=True):
      word_pieces = pieces[word][:budget]
      if len(window) + len(word_pieces) > budget:
        rows.append((window, window_tags))
        window, window_tags = [], []
      window_tags.extend([tag] + [None] * (len(word_pieces) - 1))
      window.extend(word_pieces)
    rows.append((window, window_tags))
  n = len(rows)
  arrays = {
    'input_ids': np.full((n, max_seq_length), tokenizer.pad_id, np.int32),
    'attention_mask': np.zeros((n, max_seq_length), np.int32),
    'token_type_ids': np.zeros((n, max_seq_length), np.int32),
    'word_starts': np.zeros((n, max_seq_length), np.int32),
    'targets': np.full((n, max_seq_length), -1, np.int32),
  }
  for i, (window, window_tags) in enumerate(rows):
    length = len(window) + 2
    arrays['input_ids'][i, :length] = [tokenizer.cls_id, *window, tokenizer.sep_id]
    arrays['attention_mask'][i, :length] = 1
    for position, tag in enumerate(window_tags, start=1):
      if tag is not None:
        arrays['word_starts'][i, position] = 1
        arrays['targets'][i, position] = tag
  return arrays
