"""Corpus specs and readers: every source kind, on real Wikipedia text, and bad input."""

import glob
import gzip
import json

import pytest

from electra_jax.data import sources
from tests.conftest import data_dir

OPTIONS = sources.ReadOptions()


def _wiki_docs(count: int) -> list[list[str]]:
  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_02'))
  docs = []
  for doc in sources.read_documents(unit, OPTIONS):
    docs.append(doc)
    if len(docs) == count:
      return docs
  raise AssertionError('wiki_02 has too few documents')


def _read_all(spec: str, options: sources.ReadOptions = OPTIONS) -> list[list[str]]:
  return [
    doc
    for unit in sources.plan_units(spec, options)
    for doc in sources.read_documents(unit, options)
  ]


def test_wikiextractor_documents_drop_the_tags(wiki_glob):
  docs = _read_all(f'wiki:{wiki_glob}')
  # One document per article: the blank line after each title does not split it.
  articles = sum(open(p).read().count('<doc ') for p in glob.glob(wiki_glob))
  assert len(docs) == articles > 50
  assert not any(line.startswith('<doc') or line == '</doc>' for d in docs for line in d)
  # A bare glob detects the WikiExtractor layout itself.
  assert _read_all(wiki_glob) == docs


def test_text_lines_jsonl_and_gzip_give_the_same_documents(tmp_path):
  docs = _wiki_docs(5)
  (tmp_path / 'a.txt').write_text('\n\n'.join('\n'.join(d) for d in docs) + '\n')
  with gzip.open(tmp_path / 'b.txt.gz', 'wt') as f:
    f.write('\n\n\n'.join('\n'.join(d) for d in docs))
  with gzip.open(tmp_path / 'c.jsonl.gz', 'wt') as f:
    f.writelines(json.dumps({'body': '\n'.join(d), 'id': i}) + '\n' for i, d in enumerate(docs))
  (tmp_path / 'd.txt').write_text('\n'.join(' '.join(d) for d in docs) + '\n')

  assert _read_all(f'text:{tmp_path}/a.txt') == docs
  assert _read_all(f'{tmp_path}/b.txt.gz') == docs  # Bare glob: plain text.
  assert _read_all(f'jsonl:{tmp_path}/*.jsonl.gz', sources.ReadOptions(text_field='body')) == docs
  assert _read_all(f'lines:{tmp_path}/d.txt') == [[' '.join(d)] for d in docs]
  combined = sources.plan_units(f'text:{tmp_path}/a.txt, lines:{tmp_path}/d.txt', OPTIONS)
  assert [(u.kind, u.path) for u in combined] == [
    ('text', f'{tmp_path}/a.txt'),
    ('lines', f'{tmp_path}/d.txt'),
  ]


def test_bad_specs_name_the_source(tmp_path):
  with pytest.raises(sources.CorpusError, match=r"no files match '.*/none/\*\.txt'"):
    sources.plan_units(f'text:{tmp_path}/none/*.txt', OPTIONS)
  with pytest.raises(sources.CorpusError, match="unknown kind 'parquet'"):
    sources.plan_units('parquet:x', OPTIONS)
  with pytest.raises(sources.CorpusError, match='empty spec'):
    sources.plan_units(' , ', OPTIONS)
  (tmp_path / 'x.jsonl').write_text('{"text": "fine"}\n{"body": "no text field"}\n')
  with pytest.raises(sources.CorpusError, match=r"x.jsonl, line 2: no string field 'text'"):
    _read_all(f'jsonl:{tmp_path}/x.jsonl')


def test_invalid_utf8_is_counted_and_skipped_or_stops(tmp_path):
  path = tmp_path / 'mixed.txt'
  path.write_bytes(b'good line\nbad \xff\xfe line\nanother good line\n')
  stats = sources.ReadStats()
  unit = sources.WorkUnit('text', str(path))
  assert list(sources.read_documents(unit, OPTIONS, stats)) == [['good line', 'another good line']]
  assert stats.invalid_utf8_lines == 1
  strict = sources.ReadOptions(on_invalid_utf8='error')
  with pytest.raises(sources.CorpusError, match=r'mixed.txt, line 2: not valid UTF-8'):
    list(sources.read_documents(unit, strict))


def test_a_file_that_looks_binary_is_refused_unless_skip_all(tmp_path):
  unit = lambda name: sources.WorkUnit('text', str(tmp_path / name))
  (tmp_path / 'nul.txt').write_bytes(b'text\nan \x00 archive\nmore text\n')
  mostly_bad = b''.join(b'line %d\n' % i if i % 50 else b'\xff\xfe\n' for i in range(1, 201))
  (tmp_path / 'bad.txt').write_bytes(mostly_bad)  # 4 of 200 lines: 2% not UTF-8.
  (tmp_path / 'fine.txt').write_bytes(
    mostly_bad[: mostly_bad.index(b'line 51')] + b''.join(b'ok %d\n' % i for i in range(200))
  )
  with pytest.raises(
    sources.CorpusError,
    match=r'nul.txt: does not look like text \(line 2 '
    r'holds a NUL byte\); .* --on_invalid_utf8=skip_all',
  ):
    list(sources.read_documents(unit('nul.txt'), OPTIONS))
  with pytest.raises(sources.CorpusError, match=r'bad.txt: .*\(4 of its 200 lines are not '):
    list(sources.read_documents(unit('bad.txt'), OPTIONS))
  stats = sources.ReadStats()  # 1 of 250 lines: occasional, so skipped and counted.
  assert len(list(sources.read_documents(unit('fine.txt'), OPTIONS, stats))) == 1
  assert stats.invalid_utf8_lines == 1
  stats = sources.ReadStats()
  anything = sources.ReadOptions(on_invalid_utf8='skip_all')
  assert list(sources.read_documents(unit('nul.txt'), anything, stats)) == [['text', 'more text']]
  list(sources.read_documents(unit('bad.txt'), anything, stats))
  assert stats.invalid_utf8_lines == 5


def test_empty_files_are_reported(tmp_path):
  (tmp_path / 'empty.txt').write_text('\n  \n')
  stats = sources.ReadStats()
  assert not list(
    sources.read_documents(sources.WorkUnit('text', str(tmp_path / 'empty.txt')), OPTIONS, stats)
  )
  assert stats.empty_files == [str(tmp_path / 'empty.txt')]
