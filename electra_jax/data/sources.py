"""Reads documents from local text files.

A document is a list of non-empty lines (paragraphs or sentences). Two layouts
are recognised per file:
  * WikiExtractor output: each `<doc ...>` ... `</doc>` block is a document;
  * plain text: a blank line separates documents.
"""

from collections.abc import Iterator, Sequence
import glob

Document = list[str]


def list_files(pattern: str) -> list[str]:
  """Files matching `pattern`, sorted; a clear error when there are none."""
  files = sorted(glob.glob(pattern))
  if not files:
    raise FileNotFoundError(f"config.data.corpus: no files match {pattern!r}; pass a glob "
                            "of text files, e.g. --config.data.corpus='data/wiki/*/wiki_*'")
  return files


def read_documents(path: str) -> Iterator[Document]:
  """Yields the documents of one file, in order."""
  doc: Document = []
  with open(path, encoding='utf-8', errors='replace') as f:
    for raw in f:
      line = raw.strip()
      if line.startswith('<doc ') or line == '</doc>' or not line:
        if doc:
          yield doc
        doc = []
      else:
        doc.append(line)
  if doc:
    yield doc


def iter_documents(files: Sequence[str]) -> Iterator[Document]:
  for path in files:
    yield from read_documents(path)
