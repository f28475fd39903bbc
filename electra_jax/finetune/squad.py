"""Extractive question answering on SQuAD-format JSON: `--task=squad` (v1.1) and
`--task=squad_v2` (2.0, with unanswerable questions).

Features, as BERT's and the released ELECTRA code's: each question (cut to
`max_query_length` pieces) is paired with windows of its context,
`[CLS] question [SEP] context window [SEP]`, `max_seq_length` pieces long,
consecutive windows `doc_stride` pieces apart. The context is cut into units
that the tokenizer never joins (words and punctuation marks for WordPiece,
whitespace-separated words for sentencepiece), each tokenized alone, so that
every piece knows the characters of its unit: an answer is read back from
the context's own characters. A training answer outside a window points at
[CLS], as does an unanswerable question.

Two heads (`head`). 'released', the default, is the released code's
(model.SpanPredictor): end scores conditioned on the start, a beam of
`beam_size` starts and of `beam_size` ends for each, and for v2.0 an
answerability classifier that reads [CLS] and the start distribution.
'independent' scores every piece as the start and as the end on their own (a
token head with two outputs), with a third output at [CLS] for v2.0's
answerability, and takes the `n_best_size` best starts and ends. Either way
the answerability loss is weighted by `answerable_weight`, an answer is at
most `max_answer_length` pieces long, each piece is judged in the window
where it has the most context on both sides, and v2.0 answers nothing when
the null odds (minus the most confident window's answerability logit) exceed
the threshold. Scores are the official scripts' (squad_metrics.py), in percent;
v2.0 also reports the best threshold on dev, as the official script does.
"""

import dataclasses
import json
import os
import re
from typing import Any

from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax import config_lib, storage
from electra_jax.config_lib import EncoderConfig
from electra_jax.data.tokenizers import Tokenizer, WordPieceTokenizer
from electra_jax.finetune import squad_metrics, tasks
from electra_jax.model import SpanPredictor, TokenClassifier

TaskDataError = tasks.TaskDataError
HEADS = ('released', 'independent')  # config.squad.head
# --task value -> the default file names in --data_dir.
FILES = {
  'squad': {'train': 'train-v1.1.json', 'dev': 'dev-v1.1.json'},
  'squad_v2': {'train': 'train-v2.0.json', 'dev': 'dev-v2.0.json'},
}


@dataclasses.dataclass
class Questions:
  """A SQuAD file's questions, each with its context and gold answers (texts, and
  the first one's start in the context, None when unanswerable)."""

  ids: list[str]
  questions: list[str]
  contexts: list[str]
  answers: list[list[str]]
  starts: list[int | None]

  def __len__(self) -> int:
    return len(self.ids)

  def subset(self, keep: np.ndarray) -> 'Questions':
    pick = lambda values: [values[i] for i in keep]
    return Questions(*(pick(v) for v in dataclasses.astuple(self)))


def read_squad(path: str, *, unanswerable: bool) -> Questions:
  """The questions of a SQuAD-format file; `unanswerable` allows v2.0's questions
  without answers. Errors name the file and the question."""
  if not epath.Path(path).exists():
    raise TaskDataError(f'{path}: no such file')
  try:
    articles = json.loads(_read_text(path))['data']
  except (ValueError, KeyError, TypeError) as e:
    raise TaskDataError(f'{path}: not SQuAD JSON ({e}); expected {{"data": [articles]}}') from None
  out = Questions([], [], [], [], [])
  for article in articles:
    for paragraph in article['paragraphs']:
      context = paragraph['context']
      for qa in paragraph['qas']:
        where = f'{path}, question {qa.get("id")!r}'
        answers = qa.get('answers') or []
        if qa.get('is_impossible') or not answers:
          if not unanswerable:
            raise TaskDataError(f'{where}: has no answer; SQuAD 2.0 files need --task=squad_v2')
          answers, start = [], None
        else:
          start = answers[0]['answer_start']
          if context[start : start + len(answers[0]['text'])] != answers[0]['text']:
            raise TaskDataError(
              f'{where}: the answer {answers[0]["text"]!r} is not at character {start} '
              'of its context'
            )
        out.ids.append(qa['id'])
        out.questions.append(qa['question'])
        out.contexts.append(context)
        out.answers.append([a['text'] for a in answers])
        out.starts.append(start)
  if not out.ids:
    raise TaskDataError(f'{path}: holds no questions')
  return out


def _read_text(path: str) -> str:
  with storage.open_text(path, encoding='utf-8-sig') as f:
    return f.read()


# --- Features ------------------------------------------------------------------------


def _units(text: str, tokenizer: Tokenizer) -> list[tuple[int, int]]:
  """(start, end) characters of the units the tokenizer never joins: words and
  punctuation marks for WordPiece (its basic tokenizer splits there), words
  between whitespace for sentencepiece (whose pieces carry the space)."""
  pattern = r'\w+|[^\w\s]' if isinstance(tokenizer, WordPieceTokenizer) else r'\S+'
  return [m.span() for m in re.finditer(pattern, text)]


@dataclasses.dataclass
class _Context:
  pieces: list[int]
  # Per piece: its unit's first and one-past-last character in the context.
  char_start: list[int]
  char_end: list[int]


def _tokenize_context(text: str, tokenizer: Tokenizer) -> _Context:
  spans = _units(text, tokenizer)
  context = _Context([], [], [])
  for (start, end), ids in zip(spans, tokenizer.encode([text[s:e] for s, e in spans])):
    context.pieces.extend(ids)
    context.char_start.extend([start] * len(ids))
    context.char_end.extend([end] * len(ids))
  return context


@dataclasses.dataclass(frozen=True, kw_only=True)
class SquadTask(tasks.Task):
  """SQuAD v1.1 or 2.0; the settings are configs/finetune.py's `squad` keys."""

  labels: tuple[str, ...] = ('start', 'end')
  dev_predictions: tuple[tuple[str, str], ...] = (('dev', 'predictions'),)
  unanswerable: bool = False  # v2.0.
  max_seq_length: int = 384
  max_query_length: int = 64
  doc_stride: int = 128
  n_best_size: int = 20
  max_answer_length: int = 30
  answerable_weight: float = 0.5
  null_threshold: float = 0.0
  head_kind: str = 'released'  # config.squad.head
  beam_size: int = 20

  def __post_init__(self):
    if self.head_kind not in HEADS:
      raise config_lib.ConfigError(
        f'config.squad.head: {self.head_kind!r} is not one of {", ".join(HEADS)}'
      )

  @property
  def num_outputs(self) -> int:
    return 3 if self.unanswerable else 2

  def sequence_length(self, config: ml_collections.ConfigDict) -> tuple[str, int]:
    return 'config.squad.max_seq_length', self.max_seq_length

  def head(self, cfg: EncoderConfig, dropout_rate: float) -> nn.Module:
    if self.head_kind == 'released':
      return SpanPredictor(cfg, self.unanswerable, self.beam_size)
    return TokenClassifier(cfg, self.num_outputs, dropout_rate)

  def apply(
    self, model: nn.Module, params: Any, batch: dict[str, jax.Array], *, train: bool, rngs=None
  ) -> Any:
    """The released head conditions the end on the gold start in training."""
    if self.head_kind != 'released' or not train:
      return super().apply(model, params, batch, train=train, rngs=rngs)
    return super().apply(
      model, params, batch, train=True, rngs=rngs, start_positions=batch['targets'][:, 0]
    )

  def encode(
    self, examples: Questions, tokenizer: Tokenizer, max_seq_length: int, swap: bool = False
  ) -> tasks.Features:
    """int32 [W, max_seq_length] arrays for W windows (max_seq_length: this task's
    sequence_length): the model inputs;
    `char_start`/`char_end` (each context piece's unit in the context, -1
    elsewhere) and `max_context` (1 where the piece has its most context);
    [W] `example` (the question's index); [W, 2] `targets` (the answer's start
    and end positions; 0, at [CLS], when the window does not hold it)."""
    del swap  # One order of question and context.
    length = max_seq_length
    if self.doc_stride > length - self.max_query_length - 3:
      raise TaskDataError(
        f'config.squad.doc_stride: {self.doc_stride} pieces leave gaps between windows of '
        f'{length} pieces with questions of up to {self.max_query_length}; lower it below '
        f'{length - self.max_query_length - 3}'
      )
    contexts: dict[str, _Context] = {}
    queries = tokenizer.encode(examples.questions)
    rows = []
    for i, context_text in enumerate(examples.contexts):
      if context_text not in contexts:
        contexts[context_text] = _tokenize_context(context_text, tokenizer)
      context = contexts[context_text]
      query = queries[i][: self.max_query_length]
      budget = length - len(query) - 3
      if budget < 1:
        raise TaskDataError(
          f'config.squad.max_seq_length: {length} leaves no room for the context after a '
          f'{len(query)}-piece question; raise it or lower config.squad.max_query_length'
        )
      target = self._answer_pieces(examples, i, context)
      starts = [0]  # Windows doc_stride apart until one reaches the context's end.
      while starts[-1] + budget < len(context.pieces):
        starts.append(starts[-1] + self.doc_stride)
      owner = _max_context_windows(starts, budget, len(context.pieces))
      for window, first in enumerate(starts):
        count = min(budget, len(context.pieces) - first)
        rows.append(
          (i, query, context, first, count, target, owner[first : first + count] == window)
        )
    return self._arrays(rows, tokenizer, length)

  def _answer_pieces(
    self, examples: Questions, i: int, context: _Context
  ) -> tuple[int, int] | None:
    """The first and last context pieces of question i's first answer; None if none."""
    start = examples.starts[i]
    if start is None:
      return None
    end = start + len(examples.answers[i][0])
    inside = [
      p
      for p, (s, e) in enumerate(zip(context.char_start, context.char_end, strict=True))
      if e > start and s < end
    ]
    return (inside[0], inside[-1]) if inside else None

  def _arrays(self, rows, tokenizer: Tokenizer, length: int) -> tasks.Features:
    n = len(rows)
    arrays = {
      'input_ids': np.full((n, length), tokenizer.pad_id, np.int32),
      'attention_mask': np.zeros((n, length), np.int32),
      'token_type_ids': np.zeros((n, length), np.int32),
      'char_start': np.full((n, length), -1, np.int32),
      'char_end': np.full((n, length), -1, np.int32),
      'max_context': np.zeros((n, length), np.int32),
      'example': np.zeros(n, np.int32),
      'targets': np.zeros((n, 2), np.int32),
    }
    for w, (i, query, context, first, count, target, max_context) in enumerate(rows):
      offset = len(query) + 2  # [CLS] query [SEP]
      window = context.pieces[first : first + count]
      ids = [tokenizer.cls_id, *query, tokenizer.sep_id, *window, tokenizer.sep_id]
      arrays['input_ids'][w, : len(ids)] = ids
      arrays['attention_mask'][w, : len(ids)] = 1
      arrays['token_type_ids'][w, offset : len(ids)] = 1
      span = slice(offset, offset + count)
      arrays['char_start'][w, span] = context.char_start[first : first + count]
      arrays['char_end'][w, span] = context.char_end[first : first + count]
      arrays['max_context'][w, span] = max_context
      arrays['example'][w] = i
      if target is not None and first <= target[0] and target[1] < first + count:
        arrays['targets'][w] = (offset + target[0] - first, offset + target[1] - first)
    return arrays

  def reference(self, examples: Questions) -> Questions:
    return examples

  def loss(self, outputs: Any, targets: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean cross-entropy of the start and of the end (the released head's logits
    are already confined to the answer's places; the independent head's to the
    window's pieces); v2.0 adds the answerability classifier's."""
    if self.head_kind == 'released':
      start, end, answerable = outputs['start'], outputs['end'], outputs.get('answerable')
    else:
      logits = jnp.where(mask[..., None] > 0, outputs.astype(jnp.float32), -1e30)
      start, end = logits[..., 0], logits[..., 1]
      answerable = outputs[:, 0, 2] if self.unanswerable else None
    ce = optax.softmax_cross_entropy_with_integer_labels
    loss = jnp.mean(ce(start, targets[:, 0]) + ce(end, targets[:, 1])) / 2
    if self.unanswerable:
      holds_answer = (targets[:, 0] > 0).astype(jnp.float32)
      loss += self.answerable_weight * jnp.mean(
        optax.sigmoid_binary_cross_entropy(answerable.astype(jnp.float32), holds_answer)
      )
    return loss

  def answers(
    self, outputs: Any, encoded: tasks.Features, questions: Questions
  ) -> tuple[dict[str, str], dict[str, float]]:
    """(question id -> best answer text, question id -> null odds)."""
    best: dict[int, tuple[float, str]] = {}
    null_odds: dict[int, float] = {}
    if self.head_kind == 'released':
      spans, answerable = self._beam_spans, outputs.get('answerable')
    else:
      spans = self._independent_spans
      answerable = outputs[:, 0, 2] if self.unanswerable else None
    for w in range(len(encoded['example'])):
      i = int(encoded['example'][w])
      valid = encoded['char_start'][w] >= 0
      starts_ok = valid & (encoded['max_context'][w] > 0)
      for s, e, score in spans(outputs, w, starts_ok, valid):
        if not (starts_ok[s] and valid[e]) or e < s or e - s + 1 > self.max_answer_length:
          continue
        if i not in best or score > best[i][0]:
          text = questions.contexts[i][encoded['char_start'][w][s] : encoded['char_end'][w][e]]
          best[i] = (score, text)
      if self.unanswerable:
        # The windows' most confident answerability decides.
        null_odds[i] = min(null_odds.get(i, np.inf), -float(answerable[w]))
    ids = questions.ids
    return (
      {ids[i]: best[i][1] if i in best else '' for i in range(len(ids))},
      {ids[i]: null_odds.get(i, 0.0) for i in range(len(ids))},
    )

  def _beam_spans(self, outputs: dict[str, np.ndarray], w: int, *_):
    """(start, end, score) of window w's beam: each start with each of its ends,
    scored by the sum of their log-probabilities, as the released code."""
    for a, s in enumerate(outputs['starts'][w]):
      for b, e in enumerate(outputs['ends'][w, a]):
        yield s, e, float(outputs['start_log_probs'][w, a] + outputs['end_log_probs'][w, a, b])

  def _independent_spans(
    self, outputs: np.ndarray, w: int, starts_ok: np.ndarray, valid: np.ndarray
  ):
    """(start, end, score) of the n_best_size best of window w's possible starts and
    of its possible ends, scored by the sum of their logits."""
    start_logits, end_logits = outputs[w, :, 0], outputs[w, :, 1]
    top = lambda logits, ok: [p for p in np.argsort(-np.where(ok, logits, -np.inf)) if ok[p]][
      : self.n_best_size
    ]
    for s in top(start_logits, starts_ok):
      for e in top(end_logits, valid):
        yield s, e, float(start_logits[s] + end_logits[e])

  def evaluate(
    self, outputs: np.ndarray, encoded: tasks.Features, reference: Questions
  ) -> dict[str, float]:
    return self._score(reference, *self.answers(outputs, encoded, reference))

  def _score(
    self, reference: Questions, predicted: dict[str, str], null_odds: dict[str, float]
  ) -> dict[str, float]:
    golds = dict(zip(reference.ids, reference.answers, strict=True))
    if not self.unanswerable:
      return squad_metrics.evaluate(golds, predicted)
    result = squad_metrics.evaluate(
      golds, squad_metrics.apply_null_threshold(predicted, null_odds, self.null_threshold)
    )
    for metric in ('exact_match', 'f1'):
      score, threshold = squad_metrics.best_null_threshold(golds, predicted, null_odds, metric)
      result[f'best_{metric}'], result[f'best_{metric}_threshold'] = score, threshold
    return result

  def write_predictions(
    self, path: str, outputs: np.ndarray, encoded: tasks.Features, examples: Questions
  ) -> None:
    """`path`.json (question id -> answer text), and for v2.0 null_odds.json beside
    it: the official evaluation scripts' input."""
    predicted, null_odds = self.answers(outputs, encoded, examples)
    if self.unanswerable:
      storage.write_json(os.path.join(os.path.dirname(path), 'null_odds.json'), null_odds)
      predicted = squad_metrics.apply_null_threshold(predicted, null_odds, self.null_threshold)
    storage.write_json(f'{path}.json', predicted)

  def constant_baseline(self, train: Questions, dev: dict[str, Questions]) -> dict[str, Any]:
    """What answering nothing scores: 0 on v1.1, the unanswerable share on 2.0."""
    return {
      'answer': '(no answer)',
      'dev': {
        split: self._score(q, dict.fromkeys(q.ids, ''), dict.fromkeys(q.ids, 0.0))
        for split, q in dev.items()
      },
    }


def _max_context_windows(starts: list[int], budget: int, total: int) -> np.ndarray:
  """For each of `total` context pieces, the index of the window that gives it the
  most context: the most pieces on its shorter side, plus 0.01 per piece of the
  window, the first such window on a tie (as BERT)."""
  pieces = np.arange(total)
  scores = np.full((len(starts), total), -np.inf)
  for window, start in enumerate(starts):
    end = min(start + budget, total)
    inside = pieces[start:end]
    scores[window, start:end] = np.minimum(inside - start, end - 1 - inside) + 0.01 * (end - start)
  return scores.argmax(axis=0)


def task_files(
  name: str, data_dir: str | None, files: dict[str, str], settings: ml_collections.ConfigDict
) -> tasks.TaskFiles:
  """The SQuAD task `name` and its files: `files` ('train', 'dev') name them,
  else FILES[name] in data_dir."""
  paths = {}
  for split, default in FILES[name].items():
    if split in files:
      paths[split] = files[split]
    elif data_dir is not None:
      paths[split] = os.path.join(data_dir, default)
    else:
      raise TaskDataError(
        f'--task={name} needs a {split} file: name it with --{split}_file, or give --data_dir '
        f'holding {default}'
      )
  if 'test' in files:
    raise TaskDataError(
      f'--test_file: --task={name} writes predictions.json for the dev file, which the '
      'official evaluation script reads; pass the file to score as --dev_file'
    )
  v2 = name == 'squad_v2'
  metrics = ('f1', 'exact_match')
  if v2:
    metrics += ('has_ans_f1', 'no_ans_f1', 'best_f1', 'best_f1_threshold')
  settings = settings.to_dict()
  task = SquadTask(
    name=name, metrics=metrics, unanswerable=v2, head_kind=settings.pop('head'), **settings
  )
  return tasks.TaskFiles(
    task, paths, lambda split, path: read_squad(path, unanswerable=task.unanswerable)
  )
