"""Files on a local disk or in a bucket: every path a user passes may be a
local path or a URL such as gs://bucket/dir.

Everything goes through etils.epath. Orbax already writes checkpoints
through it, so the workdir's other files use the same layer and the same
credentials. epath reaches gs:// through fsspec's gcsfs, or through
tf.io.gfile when TensorFlow is installed (EPATH_USE_TF=false picks gcsfs).
Local paths stay plain `os` calls underneath.

A bucket has no rename, and its objects appear whole when their upload
finishes. So a write that must never be seen half-done renames a temporary
file on a local disk, and uploads in one piece to a bucket.
"""

from collections.abc import Iterator
import contextlib
import glob as glob_lib
import io
import json
import os
import shutil
import tempfile
from typing import Any, TextIO

from etils import epath

PathLike = str | os.PathLike


def is_url(path: PathLike) -> bool:
  """True for gs://, s3:// and other URLs; False for local paths."""
  return '://' in os.fspath(path)


def glob(pattern: str) -> list[str]:
  """The sorted matches of a shell glob (`*`, `?`, `[...]`), local or in a bucket."""
  if not is_url(pattern):
    return sorted(glob_lib.glob(pattern))
  parts = pattern.split('/')
  first = next((i for i, part in enumerate(parts) if any(c in part for c in '*?[')), None)
  if first is None:
    return [pattern] if epath.Path(pattern).exists() else []
  base = epath.Path('/'.join(parts[:first]))
  return sorted(str(p) for p in base.glob('/'.join(parts[first:])))


def open_text(
  path: PathLike, mode: str = 'r', *, encoding: str = 'utf-8', newline: str | None = None
) -> TextIO:
  """open() for text, local or in a bucket (where a written file appears on close)."""
  if not is_url(path):
    return open(path, mode, encoding=encoding, newline=newline)
  return io.TextIOWrapper(epath.Path(path).open(mode + 'b'), encoding=encoding, newline=newline)


def read_json(path: PathLike) -> Any:
  return json.loads(epath.Path(path).read_text())


def write_json(path: PathLike, value: Any) -> None:
  """Writes `value` as JSON so that readers see the old file or the new one, never a part."""
  write_text(path, json.dumps(value, indent=1, sort_keys=True))


def write_text(path: PathLike, text: str) -> None:
  """Writes `text` whole (see write_json)."""
  with staged(path) as local:
    with open(local, 'w', encoding='utf-8') as f:
      f.write(text)


@contextlib.contextmanager
def staged(path: PathLike) -> Iterator[str]:
  """A local file to write `path`'s new content into; it becomes `path` when
  the block ends without an error (renamed, or uploaded to a bucket), and is
  removed otherwise."""
  if not is_url(path):
    local = f'{os.fspath(path)}.tmp-{os.getpid()}'
    try:
      yield local
      os.replace(local, path)
    finally:
      if os.path.exists(local):
        os.remove(local)
    return
  with tempfile.TemporaryDirectory(prefix='electra_jax_upload_') as tmp:
    local = os.path.join(tmp, epath.Path(path).name)
    yield local
    copy(local, path)


def copy(source: PathLike, target: PathLike) -> None:
  """Copies one file, between any two of local disk and buckets."""
  with epath.Path(source).open('rb') as src, epath.Path(target).open('wb') as dst:
    shutil.copyfileobj(src, dst, length=8 << 20)
