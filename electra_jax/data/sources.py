"""Corpus sources: which documents a corpus spec names, and how to read them.

A corpus spec is one or more comma-separated sources, each `KIND:ARG`:

  text:GLOB    text files (optionally .gz); a blank line separates documents
  lines:GLOB   text files (optionally .gz); one document per line
  wiki:GLOB    WikiExtractor output: each <doc ...> ... </doc> is a document
  jsonl:GLOB   JSON lines (optionally .gz); the document is the `text_field` string
  tfds:NAME[@SPLIT]  a TensorFlow Datasets dataset (default split 'train'),
               read as a stream from `tfds_data_dir`; `text_field` names the text

A bare GLOB means `text:` for plain files and `wiki:` for files that start
with `<doc `. A document is a list of non-empty lines (paragraphs or
sentences). Work is cut into units, one per file or one per range of TFDS
records, so that preparation can spread them over processes and resume.
"""

from collections.abc import Iterator
import contextlib
import dataclasses
import gzip
import json
from typing import Any, BinaryIO

from etils import epath

from electra_jax import errors, storage

Document = list[str]

KINDS = ('text', 'lines', 'wiki', 'jsonl', 'tfds')
ON_INVALID_UTF8 = ('skip', 'skip_all', 'error')
# TFDS records per work unit: small enough to spread a split over processes.
TFDS_RECORDS_PER_UNIT = 50_000


class CorpusError(errors.UserError):
  """A corpus spec or file cannot be read; the message names it and the fix."""


@dataclasses.dataclass(frozen=True)
class ReadOptions:
  text_field: str = 'text'
  tfds_data_dir: str | None = None
  # 'skip': drop (and count) lines that are not valid UTF-8, but stop at a file
  # that looks binary; 'skip_all': drop them whatever their number; 'error': stop.
  on_invalid_utf8: str = 'skip'


@dataclasses.dataclass(frozen=True)
class WorkUnit:
  """One file, or records [start, stop) of a TFDS split."""

  kind: str
  path: str
  split: str = ''
  start: int = 0
  stop: int = 0

  @property
  def name(self) -> str:
    return f'{self.kind}:{self.path}' + (
      f'@{self.split}[{self.start}:{self.stop}]' if self.kind == 'tfds' else ''
    )


@dataclasses.dataclass
class ReadStats:
  """What reading a unit met besides documents."""

  invalid_utf8_lines: int = 0
  empty_files: list[str] = dataclasses.field(default_factory=list)


def _parse_source(source: str) -> tuple[str, str]:
  kind, sep, arg = source.partition(':')
  if sep and kind in KINDS:
    return kind, arg
  if sep and len(kind) > 1 and '/' not in kind and '*' not in kind:
    raise CorpusError(
      f'corpus source {source!r}: unknown kind {kind!r}; use one of '
      f'{", ".join(k + ":" for k in KINDS)} or a bare glob'
    )
  return 'auto', source


def _detect_kind(path: str) -> str:
  with _open_binary(path) as f:
    head = f.read(4096).lstrip()
  return 'wiki' if head.startswith(b'<doc ') else 'text'


def plan_units(spec: str, options: ReadOptions) -> list[WorkUnit]:
  """The work units of a corpus spec, in a fixed order; clear errors for bad specs."""
  sources = [s.strip() for s in spec.split(',') if s.strip()]
  if not sources:
    raise CorpusError('corpus: empty spec; pass e.g. --corpus=wiki:data/wikipedia/*/wiki_*')
  units: list[WorkUnit] = []
  for source in sources:
    kind, arg = _parse_source(source)
    if kind == 'tfds':
      units.extend(_tfds_units(arg, options))
      continue
    files = storage.glob(arg)
    if not files:
      raise CorpusError(
        f'corpus source {source!r}: no files match {arg!r}; check the path, '
        'and quote the glob so that the shell leaves it alone'
      )
    for path in files:
      units.append(WorkUnit(_detect_kind(path) if kind == 'auto' else kind, path))
  return units


def read_documents(
  unit: WorkUnit, options: ReadOptions, stats: ReadStats | None = None
) -> Iterator[Document]:
  """Yields the documents of one work unit, in order."""
  stats = stats if stats is not None else ReadStats()
  if unit.kind == 'tfds':
    yield from _tfds_documents(unit, options)
    return
  lines = _text_lines(unit.path, options, stats)
  if unit.kind == 'lines':
    yield from ([line] for line in lines if line)
  elif unit.kind == 'jsonl':
    yield from _jsonl_documents(unit.path, lines, options.text_field)
  else:
    # WikiExtractor documents end at </doc> (a blank line follows each
    # title); plain-text documents end at a blank line.
    wiki = unit.kind == 'wiki'
    doc: Document = []
    for line in lines:
      if wiki and (line.startswith('<doc ') or line == '</doc>') or not wiki and not line:
        if doc:
          yield doc
        doc = []
      elif line:
        doc.append(line)
    if doc:
      yield doc


# --- Files ---------------------------------------------------------------------


@contextlib.contextmanager
def _open_binary(path: str) -> Iterator[BinaryIO]:
  """The file's bytes, local or in a bucket, gunzipped when it ends in .gz."""
  with epath.Path(path).open('rb') as raw:
    if path.endswith('.gz'):
      with gzip.open(raw, 'rb') as f:
        yield f
    else:
      yield raw


def _text_lines(path: str, options: ReadOptions, stats: ReadStats) -> Iterator[str]:
  """Stripped lines of a file, decoded strictly as UTF-8 line by line.

  A line that is not UTF-8 text is skipped and counted, stops the run, or (under
  'skip') stops it when the file looks binary: NUL bytes, or over 1% of its lines
  not UTF-8 once it has 100 lines (a mistyped glob that caught an archive or a
  program would otherwise yield a few "examples" of noise and exit 0).
  """
  seen_bytes, invalid, number = False, 0, 0
  try:
    with _open_binary(path) as f:
      for number, raw in enumerate(f, start=1):
        seen_bytes = seen_bytes or bool(raw.strip())
        try:
          if b'\0' in raw:
            raise UnicodeDecodeError(
              'utf-8', raw, raw.index(b'\0'), raw.index(b'\0') + 1, 'NUL byte'
            )
          yield raw.decode('utf-8').strip()
          continue
        except UnicodeDecodeError as e:
          reason = f'{e.reason} at byte {e.start}'
        if options.on_invalid_utf8 == 'error':
          raise CorpusError(
            f'{path}, line {number}: not valid UTF-8 ({reason}); fix the file, or pass '
            '--on_invalid_utf8=skip to drop such lines'
          )
        if options.on_invalid_utf8 == 'skip' and 'NUL' in reason:
          raise CorpusError(_looks_binary(path, f'line {number} holds a NUL byte'))
        invalid += 1
        stats.invalid_utf8_lines += 1
  except (OSError, EOFError) as e:  # Unreadable or truncated .gz files.
    raise CorpusError(f'{path}: cannot be read ({e}); fix or remove the file') from None
  if options.on_invalid_utf8 == 'skip' and number >= 100 and invalid > 0.01 * number:
    raise CorpusError(_looks_binary(path, f'{invalid:,} of its {number:,} lines are not UTF-8'))
  if not seen_bytes:
    stats.empty_files.append(path)


def _looks_binary(path: str, why: str) -> str:
  return (
    f'{path}: does not look like text ({why}); check the corpus glob, or pass '
    '--on_invalid_utf8=skip_all to drop every line that is not UTF-8 text'
  )


def _jsonl_documents(path: str, lines: Iterator[str], field: str) -> Iterator[Document]:
  for number, line in enumerate(lines, start=1):
    if not line:
      continue
    try:
      record = json.loads(line)
    except json.JSONDecodeError as e:
      raise CorpusError(
        f'{path}, line {number}: not JSON ({e.msg}); each line must be one JSON object'
      ) from None
    text = record.get(field) if isinstance(record, dict) else None
    if not isinstance(text, str):
      raise CorpusError(
        f'{path}, line {number}: no string field {field!r}; set '
        f'--text_field (config.data.text_field) to the field holding the text'
      )
    doc = [p.strip() for p in text.splitlines() if p.strip()]
    if doc:
      yield doc


# --- TensorFlow Datasets ---------------------------------------------------------


def _parse_tfds(arg: str) -> tuple[str, str]:
  name, _, split = arg.partition('@')
  return name, split or 'train'


def _tfds_source(name: str, split: str, options: ReadOptions) -> Any:
  """A lazy random-access view of a prepared TFDS split (ArrayRecord files).

  Records are read on demand, so a huge split streams through without being
  loaded. Splits stored as TFRecord go through tf.data instead.
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

  try:
    builder = tfds.builder(name, data_dir=options.tfds_data_dir)
  except Exception as e:  # tfds raises several types for unknown or unprepared names.
    raise CorpusError(
      f'corpus source tfds:{name}: {e}; prepare it with `tfds build` or set '
      'config.data.tfds_data_dir to where it is'
    ) from None
  if split not in builder.info.splits:
    raise CorpusError(
      f'corpus source tfds:{name}@{split}: no split {split!r}; it has {sorted(builder.info.splits)}'
    )
  if builder.info.file_format.value == 'array_record':
    return builder.as_data_source(split=split)
  return _TfRecordSplit(builder, split)


class _TfRecordSplit:
  """Records [start, stop) of a TFRecord-format split, streamed with tf.data."""

  def __init__(self, builder: Any, split: str):
    self._builder, self._split = builder, split
    self._length = builder.info.splits[split].num_examples

  def __len__(self) -> int:
    return self._length

  def read(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top

    try:
      dataset = self._builder.as_dataset(
        split=f'{self._split}[{start}:{stop}]', shuffle_files=False
      )
    except ImportError as e:
      raise CorpusError(
        f'{self._builder.name} is stored as TFRecord, which needs TensorFlow '
        f'({e}); pip install tensorflow-cpu, or rebuild the dataset with '
        "file_format='array_record'"
      ) from None
    yield from tfds.as_numpy(dataset)


def _tfds_units(arg: str, options: ReadOptions) -> list[WorkUnit]:
  name, split = _parse_tfds(arg)
  total = len(_tfds_source(name, split, options))
  return [
    WorkUnit('tfds', name, split, start, min(start + TFDS_RECORDS_PER_UNIT, total))
    for start in range(0, total, TFDS_RECORDS_PER_UNIT)
  ]


def _tfds_documents(unit: WorkUnit, options: ReadOptions) -> Iterator[Document]:
  source = _tfds_source(unit.path, unit.split, options)
  if isinstance(source, _TfRecordSplit):
    records = source.read(unit.start, unit.stop)
  else:
    records = (source[i] for i in range(unit.start, unit.stop))
  for record in records:
    if options.text_field not in record:
      raise CorpusError(
        f'tfds:{unit.path}: records have no field {options.text_field!r} '
        f'(fields: {sorted(record)}); set config.data.text_field'
      )
    text = record[options.text_field]
    text = text.decode('utf-8', errors='replace') if isinstance(text, bytes) else str(text)
    doc = [p.strip() for p in text.splitlines() if p.strip()]
    if doc:
      yield doc
