"""Scalars to the console and to TensorBoard event files, from process 0 only."""

from collections.abc import Mapping, Sequence
import itertools
import os
import struct
import sys
import time

from absl import logging
from etils import epath
import jax

from electra_jax import storage


def _import_tensorboardx_without_torch() -> None:
  """Imports tensorboardX without letting it import torch.

  tensorboardX imports torch whenever it is installed, only to accept torch
  tensors; we write floats, and the import costs every run about 3 s of
  startup. torch is hidden for that one import and importable again after it.
  """
  if 'torch' in sys.modules:
    return
  sys.modules['torch'] = None  # `import torch` raises ImportError.
  try:
    import tensorboardX  # noqa: F401  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    del sys.modules['torch']


_import_tensorboardx_without_torch()
# pylint: disable=g-import-not-at-top,g-bad-import-order
from tensorboardX import event_file_writer, record_writer, summary  # noqa: E402
from tensorboardX.proto import event_pb2, summary_pb2  # noqa: E402

# pylint: enable=g-import-not-at-top,g-bad-import-order


def _figure(value: float) -> str:
  """4 significant digits; large rates with thousands separators."""
  return f'{value:,.0f}' if abs(value) >= 1e4 else f'{value:.4g}'


_WRITERS = itertools.count()


class MetricWriter:
  """Writes `prefix/name` scalars; a no-op on processes other than 0.

  Each write reaches the event file before it returns. `logdir` may be a
  gs:// URL: tensorboardX then uploads the whole file at each write, which is
  small (one event per log window). tensorboardX's
  SummaryWriter hands events to a background thread, and its flush() does not
  wait for that queue, so a crash right after a checkpoint could lose the
  metrics of steps that a resume will not redo; this writes synchronously.
  """

  def __init__(self, logdir: str):
    self._events = None
    if jax.process_index() == 0:
      record_writer.directory_check(logdir)
      # tensorboardX names the file by the second and the host only; two writers in
      # one second (a restart, `evaluate` beside training) would truncate each
      # other's file, so the name also carries the process and a count.
      self._events = event_file_writer.EventsWriter(
        os.path.join(logdir, 'events'), filename_suffix=f'.{os.getpid()}.{next(_WRITERS)}'
      )

  def write(
    self,
    step: int,
    scalars: Mapping[str, float],
    prefix: str = 'train',
    headline: Sequence[str] | None = None,
  ) -> None:
    """Writes every scalar to TensorBoard; the console line shows those named in
    `headline`, in its order (all, sorted, if None)."""
    if self._events is None:
      return
    shown = [k for k in headline if k in scalars] if headline is not None else sorted(scalars)
    more = len(scalars) - len(shown)
    logging.info(
      '[%d] %s%s%s',
      step,
      '' if prefix == 'train' else f'{prefix}: ',
      '  '.join(f'{k}={_figure(scalars[k])}' for k in shown),
      f'  (+{more} more in TensorBoard)' if more else '',
    )
    values = [summary.scalar(f'{prefix}/{name}', value).value[0] for name, value in scalars.items()]
    self._events.write_event(
      event_pb2.Event(wall_time=time.time(), step=step, summary=summary_pb2.Summary(value=values))
    )
    self._events.flush()

  def close(self) -> None:
    if self._events is not None:
      self._events.close()


def read_scalars(workdir: str) -> dict[str, list[tuple[int, float]]]:
  """{tag: [(step, value), ...]} from the TFRecord event files in `workdir`."""
  scalars: dict[str, list[tuple[int, float]]] = {}
  for path in storage.glob(os.path.join(workdir, 'events.out.tfevents.*')):
    data = epath.Path(path).read_bytes()
    offset = 0
    while offset < len(data):
      (length,) = struct.unpack('<Q', data[offset : offset + 8])
      event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
      offset += 12 + length + 4  # length, its crc, payload, payload crc.
      for value in event.summary.value:
        scalars.setdefault(value.tag, []).append((event.step, value.simple_value))
  return scalars
