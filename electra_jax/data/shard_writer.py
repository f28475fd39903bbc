"""Corpus -> tokenizer -> pretraining examples -> ArrayRecord shards.

`prepare(options, output_dir)` plans the work units of the corpus, sets up
the tokenizer (a WordPiece vocab, a sentencepiece model, or a new
sentencepiece model trained on a sample), then turns every unit into one
shard in a pool of worker processes. Each shard appears only when complete
(renamed from a temporary name, or uploaded whole to a bucket), and its counts
file after it, so a killed run resumes where it stopped and a rerun never
touches finished shards. `output_dir` may be local or a gs:// URL. See
`shards.py` for the layout.
"""

from collections.abc import Iterator
import dataclasses
import functools
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from typing import Any

from absl import logging
from array_record.python import array_record_module
from etils import epath
import ml_collections
import numpy as np
import tqdm

from electra_jax import errors, storage
from electra_jax.data import packing, shards, sources, tokenizers


class PrepareError(errors.UserError):
  """Preparation cannot go on; the message names the input and the fix."""


@dataclasses.dataclass(frozen=True)
class PrepareOptions:
  """Everything that determines the prepared examples (and nothing else)."""

  corpus: str
  max_seq_length: int
  # Exactly one tokenizer source: a WordPiece vocab, a sentencepiece model,
  # or the size of a sentencepiece model to train on the corpus.
  vocab: str = ''
  spm_model: str = ''
  spm_vocab_size: int = 0
  spm_model_type: str = 'unigram'
  spm_sample_sentences: int = 1_000_000
  lower_case: bool = True
  strip_accents: bool | None = None
  split_sentences: bool = True
  single_segment_prob: float = 0.1
  short_seq_prob: float = 0.05
  seed: int = 0
  read: sources.ReadOptions = sources.ReadOptions()

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict) -> 'PrepareOptions':
    """Options from a training config; the sentencepiece size is model.vocab_size."""
    d = config.data
    return cls(
      corpus=d.corpus,
      max_seq_length=config.max_seq_length,
      vocab=d.vocab,
      spm_model=d.spm_model,
      spm_vocab_size=0 if d.vocab or d.spm_model else config.model.vocab_size,
      spm_model_type=d.spm_model_type,
      spm_sample_sentences=d.spm_sample_sentences,
      lower_case=d.lower_case,
      strip_accents=d.strip_accents,
      split_sentences=d.split_sentences,
      single_segment_prob=d.single_segment_prob,
      short_seq_prob=d.short_seq_prob,
      seed=config.seed,
      read=sources.ReadOptions(
        text_field=d.text_field, tfds_data_dir=d.tfds_data_dir, on_invalid_utf8=d.on_invalid_utf8
      ),
    )

  def validate(self, max_position_embeddings: int) -> None:
    chosen = [name for name in ('vocab', 'spm_model', 'spm_vocab_size') if getattr(self, name)]
    if len(chosen) != 1:
      raise PrepareError(
        f'choose exactly one tokenizer: --vocab=vocab.txt (WordPiece), '
        f'--spm_model=PATH or --spm_vocab_size=N (got {chosen or "none"})'
      )
    if not 8 <= self.max_seq_length <= max_position_embeddings:
      raise PrepareError(
        f'max_seq_length={self.max_seq_length}: must be in [8, '
        f"{max_position_embeddings}], the model's position embeddings; "
        'raise model.max_position_embeddings to go longer'
      )
    if self.read.on_invalid_utf8 not in sources.ON_INVALID_UTF8:
      raise PrepareError(
        f'on_invalid_utf8={self.read.on_invalid_utf8!r}: use one of '
        f'{", ".join(sources.ON_INVALID_UTF8)}'
      )
    for name in ('single_segment_prob', 'short_seq_prob'):
      if not 0 <= getattr(self, name) <= 1:
        raise PrepareError(f'{name}={getattr(self, name)}: must be a probability in [0, 1]')

  def as_json(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


# --- Tokenizer -----------------------------------------------------------------


def _sample_sentences(units: list[sources.WorkUnit], options: PrepareOptions) -> Iterator[str]:
  """Sentences from the units in a seeded random order, for sentencepiece training."""
  for i in np.random.default_rng(options.seed).permutation(len(units)):
    for doc in sources.read_documents(units[i], options.read):
      for line in doc:
        yield from (packing.split_sentences(line) if options.split_sentences else [line])


def _setup_tokenizer(
  options: PrepareOptions, units: list[sources.WorkUnit], directory: str
) -> tokenizers.Tokenizer:
  """The tokenizer, its file copied (or trained) into `directory`."""
  if options.vocab:
    tokenizer: tokenizers.Tokenizer = tokenizers.WordPieceTokenizer(
      options.vocab, lower_case=options.lower_case, strip_accents=options.strip_accents
    )
  elif options.spm_model:
    tokenizer = tokenizers.SentencePieceTokenizer(options.spm_model)
  else:
    model = os.path.join(directory, 'spm.model')
    if not epath.Path(model).exists():
      logging.info(
        'Training a %d-piece sentencepiece model on up to %d sentences',
        options.spm_vocab_size,
        options.spm_sample_sentences,
      )
      with tempfile.TemporaryDirectory(prefix='electra_jax_spm_') as tmp:
        try:
          trained = tokenizers.train_sentencepiece(
            _sample_sentences(units, options),
            os.path.join(tmp, 'spm'),
            vocab_size=options.spm_vocab_size,
            model_type=options.spm_model_type,
            max_sentences=options.spm_sample_sentences,
          )
        except RuntimeError as e:  # sentencepiece reports a too-small corpus this way.
          raise PrepareError(
            f'training a {options.spm_vocab_size}-piece sentencepiece model on '
            f'{options.corpus!r} failed ({e}); use a smaller --spm_vocab_size '
            'or more text'
          ) from None
        epath.Path(directory).mkdir(parents=True, exist_ok=True)
        with storage.staged(model) as local:
          shutil.copyfile(trained, local)
    return tokenizers.SentencePieceTokenizer(model)
  return tokenizers.copy_tokenizer_file(tokenizer, directory)


# --- One work unit -----------------------------------------------------------------


@functools.cache
def _worker_tokenizer(spec_items: tuple, directory: str) -> tokenizers.Tokenizer:
  return tokenizers.load_tokenizer(dict(spec_items), directory)


def _prepare_unit(
  task: tuple[int, sources.WorkUnit, PrepareOptions, str, dict[str, Any]],
) -> dict[str, Any]:
  """Tokenizes and packs one unit into its shard; returns the shard's counts."""
  index, unit, options, output_dir, tokenizer_spec = task
  try:
    return _write_shard(index, unit, options, output_dir, tokenizer_spec)
  except (sources.CorpusError, tokenizers.TokenizerError):
    raise
  except Exception as e:  # An unexpected failure still names its input.
    raise PrepareError(f'{unit.name}: {type(e).__name__}: {e}') from e


def _write_shard(
  index: int,
  unit: sources.WorkUnit,
  options: PrepareOptions,
  output_dir: str,
  tokenizer_spec: dict[str, Any],
) -> dict[str, Any]:
  start = time.perf_counter()
  tokenizer = _worker_tokenizer(
    tuple(sorted(tokenizer_spec.items())), os.path.join(output_dir, 'tokenizer')
  )
  builder = packing.ExampleBuilder(
    options.max_seq_length,
    tokenizer.special_ids,
    np.random.default_rng([options.seed, index]),
    single_segment_prob=options.single_segment_prob,
    short_seq_prob=options.short_seq_prob,
  )
  dtype = shards.record_dtype(tokenizer.vocab_size, options.max_seq_length)
  read_stats = sources.ReadStats()
  documents = text_bytes = unknown = 0
  # ArrayRecord writes local files only: a shard for a bucket is uploaded when complete.
  with storage.staged(shards.shard_path(output_dir, index)) as local:
    writer = array_record_module.ArrayRecordWriter(local, 'group_size:1')
    try:
      for doc in sources.read_documents(unit, options.read, read_stats):
        documents += 1
        text_bytes += sum(len(line.encode('utf-8')) + 1 for line in doc)
        lines = (
          [s for line in doc for s in packing.split_sentences(line)]
          if options.split_sentences
          else doc
        )
        sentences = tokenizer.encode(lines)
        unknown += sum(ids.count(tokenizer.unk_id) for ids in sentences)
        for record in builder.add_document(sentences):
          writer.write(record.astype(dtype).tobytes())
    finally:
      writer.close()
  stats = {
    'source': unit.name,
    'documents': documents,
    'text_bytes': text_bytes,
    'unknown_tokens': unknown,
    'invalid_utf8_lines': read_stats.invalid_utf8_lines,
    'empty_files': read_stats.empty_files,
    'seconds': time.perf_counter() - start,
    **dataclasses.asdict(builder.stats),
  }
  storage.write_json(shards.shard_stats_path(output_dir, index), stats)
  return stats


# --- The whole corpus -------------------------------------------------------------------


def _check_plan(output_dir: str, plan: dict[str, Any]) -> None:
  """Refuses to continue an output directory that another plan started."""
  path = os.path.join(output_dir, 'plan.json')
  if not epath.Path(path).exists():
    return
  previous = storage.read_json(path)
  if previous != json.loads(json.dumps(plan)):
    differing = sorted(
      k
      for k in set(previous['options']) | set(plan['options'])
      if previous['options'].get(k) != plan['options'].get(k)
    )
    what = f'options {differing}' if differing else 'corpus files'
    raise PrepareError(
      f'{output_dir} holds data prepared with different {what}; choose a new '
      '--output_dir, or delete the old one to start over'
    )


def _summarize(per_shard: list[dict[str, Any]]) -> dict[str, Any]:
  counts: dict[str, Any] = {}
  for stats in per_shard:
    for key, value in stats.items():
      if isinstance(value, (int, float)) and key != 'seconds':
        counts[key] = counts.get(key, 0) + value
  counts['empty_files'] = [f for s in per_shard for f in s['empty_files']]
  return counts


def prepare(
  options: PrepareOptions,
  output_dir: str,
  *,
  num_workers: int = 0,
  max_position_embeddings: int = 512,
  progress: bool = True,
) -> shards.PreparedData:
  """Prepares (or finishes preparing) `output_dir`; returns the complete directory."""
  options.validate(max_position_embeddings)
  units = sources.plan_units(options.corpus, options.read)
  plan = {'options': options.as_json(), 'units': [dataclasses.asdict(u) for u in units]}
  if epath.Path(output_dir, 'metadata.json').exists():
    _check_plan(output_dir, plan)
    logging.info('%s is already prepared', output_dir)
    return shards.PreparedData.load(output_dir)
  _check_plan(output_dir, plan)
  epath.Path(output_dir, 'shards').mkdir(parents=True, exist_ok=True)
  storage.write_json(os.path.join(output_dir, 'plan.json'), plan)
  tokenizer = _setup_tokenizer(options, units, os.path.join(output_dir, 'tokenizer'))
  spec = tokenizer.spec()

  done = {
    i for i in range(len(units)) if epath.Path(shards.shard_stats_path(output_dir, i)).exists()
  }
  todo = [(i, unit, options, output_dir, spec) for i, unit in enumerate(units) if i not in done]
  if done:
    logging.info('Resuming: %d of %d shards are already written', len(done), len(units))
  workers = min(num_workers or os.cpu_count() or 1, max(1, len(todo)))
  start = time.perf_counter()
  bar = tqdm.tqdm(
    total=len(units),
    initial=len(done),
    unit='shard',
    disable=not progress,
    desc=f'Preparing {output_dir}',
  )
  with bar:
    if workers == 1:
      results = map(_prepare_unit, todo)
    else:
      # spawn: forking a process that has started JAX's threads is unsafe.
      pool = multiprocessing.get_context('spawn').Pool(workers)
      results = pool.imap_unordered(_prepare_unit, todo)
    try:
      for stats in results:
        bar.update(1)
        bar.set_postfix(examples=stats['examples'], refresh=False)
        for empty in stats['empty_files']:
          logging.warning(
            '%s is empty and was skipped; remove it from the corpus to silence this warning', empty
          )
    finally:
      if workers > 1:
        pool.terminate()
  seconds = time.perf_counter() - start

  per_shard = []
  for i in range(len(units)):
    per_shard.append(storage.read_json(shards.shard_stats_path(output_dir, i)))
  counts = _summarize(per_shard)
  if not counts['examples']:
    raise PrepareError(
      f'corpus {options.corpus!r} holds no text (every file is empty); point --corpus at the text'
    )
  metadata = {
    'format': shards.FORMAT,
    'format_version': shards.FORMAT_VERSION,
    'max_seq_length': options.max_seq_length,
    'record_dtype': shards.record_dtype(tokenizer.vocab_size, options.max_seq_length),
    'tokenizer': spec,
    'special_ids': dataclasses.asdict(tokenizer.special_ids),
    'corpus': options.corpus,
    'options': options.as_json(),
    'counts': counts,
    'shards': [
      {
        'file': shards.shard_file(i),
        'examples': s['examples'],
        'source': s['source'],
      }
      for i, s in enumerate(per_shard)
    ],
    'seconds_this_run': seconds,
  }
  storage.write_json(os.path.join(output_dir, 'metadata.json'), metadata)
  return shards.PreparedData(output_dir, metadata)


# Above this share of [UNK] tokens, the vocabulary does not fit the corpus.
UNKNOWN_RATE_WARNING = 0.01


def unknown_rate_warning(data: shards.PreparedData) -> str | None:
  """What to do when the tokenizer maps more than UNKNOWN_RATE_WARNING of the
  tokens to [UNK] (a vocabulary of another language or script); else None."""
  c = data.metadata['counts']
  rate = c['unknown_tokens'] / max(1, c['tokens'])
  if rate <= UNKNOWN_RATE_WARNING:
    return None
  return (
    f'{rate:.1%} of the tokens are [UNK]: the vocabulary does not cover this corpus. '
    'Train one on it (--spm_vocab_size=N instead of --vocab), or check '
    '--config.data.lower_case and --config.data.strip_accents'
  )


def summary(data: shards.PreparedData) -> str:
  """A readable account of a prepared directory."""
  c = data.metadata['counts']
  tokens = max(1, c['tokens'])
  seconds = data.metadata['seconds_this_run']
  lines = [
    f'prepared: {data.directory}',
    f'  tokenizer: {data.metadata["tokenizer"]["kind"]} '
    f'{data.metadata["tokenizer"]["file"]} ({data.vocab_size} ids)',
    f'  documents: {c["documents"]:,}   text: {c["text_bytes"] / 1e6:,.1f} MB',
    f'  tokens: {c["tokens"]:,}   unknown-token rate: {c["unknown_tokens"] / tokens:.4%}',
    f'  examples: {c["examples"]:,} of {data.max_seq_length} tokens '
    f'({c["single_segment"] / max(1, c["examples"]):.1%} single-segment) in '
    f'{len(data.metadata["shards"])} shards',
    f'  truncated tokens: {c["truncated_tokens"]:,} ({c["truncated_tokens"] / tokens:.2%})',
    f'  invalid UTF-8 lines skipped: {c["invalid_utf8_lines"]:,}   empty files: '
    f'{len(c["empty_files"])}',
  ]
  if seconds > 0:
    lines.append(f'  this run: {seconds:.1f} s')
  warning = unknown_rate_warning(data)
  if warning:
    lines.append(f'  WARNING: {warning}')
  return '\n'.join(lines)
