"""Scalars to the console and to TensorBoard event files, from process 0 only."""

from collections.abc import Mapping
import sys

from absl import logging
import jax


def _import_tensorboardx():
  """Imports tensorboardX without letting it import torch.

  tensorboardX imports torch whenever it is installed, only to accept torch
  tensors; we write floats, and the import costs every run about 3 s of
  startup. torch is hidden for that one import and importable again after it.
  """
  if 'torch' in sys.modules:
    import tensorboardX  # pylint: disable=g-import-not-at-top
    return tensorboardX
  sys.modules['torch'] = None  # `import torch` raises ImportError.
  try:
    import tensorboardX  # pylint: disable=g-import-not-at-top
  finally:
    del sys.modules['torch']
  return tensorboardX


tensorboardX = _import_tensorboardx()


class MetricWriter:
  """Writes `prefix/name` scalars; a no-op on processes other than 0."""

  def __init__(self, logdir: str):
    self._writer = tensorboardX.SummaryWriter(logdir) if jax.process_index() == 0 else None

  def write(self, step: int, scalars: Mapping[str, float], prefix: str = 'train') -> None:
    if self._writer is None:
      return
    logging.info('[%d] %s', step, ', '.join(f'{k}={v:.5g}' for k, v in sorted(scalars.items())))
    for name, value in scalars.items():
      self._writer.add_scalar(f'{prefix}/{name}', value, step)
    self._writer.flush()

  def close(self) -> None:
    if self._writer is not None:
      self._writer.close()
