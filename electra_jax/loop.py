"""The train loop's helpers: throughput, metrics read one window late, the
non-finite guard and preemption. The trainer (train.py) and the step-time
benchmark (benchmark.py) share them."""

import signal
import time
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np

from electra_jax import errors, flops, metric_writer

Metrics = dict[str, jax.Array]

# The figures the console shows for each log window, where the objective has them:
# how the model learns, then the rates; TensorBoard gets every scalar.
LEARNING = (
  'loss',
  'mlm_loss',
  'mlm_accuracy',
  'main_mlm_loss',
  'main_mlm_accuracy',
  'disc_loss',
  'disc_recall',
  'disc_precision',
)
HEADLINE = (*LEARNING, 'learning_rate', 'tokens_per_s', 'mfu')


def throughput(
  step_seconds: float, config: ml_collections.ConfigDict, peak_flops: float
) -> dict[str, float]:
  """Step time, tokens/s, examples/s, model TFLOP/s and MFU of steps of `step_seconds`."""
  model_flops = flops.train_step_flops(config)
  return {
    'step_time_s': step_seconds,
    'tokens_per_s': config.batch_size * config.max_seq_length / step_seconds,
    'examples_per_s': config.batch_size / step_seconds,
    'model_tflops_per_s': model_flops / step_seconds / 1e12,
    'mfu': model_flops / step_seconds / peak_flops,
  }


class ThroughputMeter:
  """throughput() between two log points."""

  def __init__(self, step: int, config: ml_collections.ConfigDict, peak_flops: float):
    self._step, self._time = step, time.perf_counter()
    self._config, self._peak = config, peak_flops

  def exclude(self, seconds: float) -> None:
    """Leaves `seconds` of other work out of the current window."""
    self._time += seconds

  def measure(self, step: int) -> dict[str, float]:
    now = time.perf_counter()
    steps, seconds = step - self._step, now - self._time
    self._step, self._time = step, now
    return throughput(seconds / steps, self._config, self._peak)


def duration(seconds: float) -> str:
  """3h07m, 12m05s or 42s."""
  minutes, secs = divmod(round(seconds), 60)
  hours, minutes = divmod(minutes, 60)
  return f'{hours}h{minutes:02d}m' if hours else f'{minutes}m{secs:02d}s' if minutes else f'{secs}s'


class Progress:
  """A short line at most every `every_seconds` (0: never): LABEL step / total, steps/s,
  UNITs/s (`per_step` of them a step) and the time left, counting `later_steps` more
  after `total` (fine-tuning's later seeds). The rates are averages from the first
  update on, which leaves out what came before it (compilation, a restore)."""

  def __init__(
    self,
    total: int,
    *,
    every_seconds: float,
    per_step: int,
    unit: str,
    label: str = '',
    later_steps: int = 0,
  ):
    self._total, self._every = total, every_seconds
    self._per_step, self._unit, self._label, self._later = per_step, unit, label, later_steps
    self._first: tuple[int, float] | None = None  # (step, time) of the first update.
    self._last = 0.0

  @classmethod
  def for_pretraining(cls, config: ml_collections.ConfigDict, end: int) -> 'Progress':
    """Counts to `end`, which is config.num_train_steps unless the run stops before."""
    return cls(
      end,
      every_seconds=config.progress_every_seconds,
      per_step=config.batch_size * config.max_seq_length,
      unit='tokens',
      label=''
      if end == config.num_train_steps
      else f'to step {end:,} of {config.num_train_steps:,}',
    )

  def update(self, finished: int) -> None:
    """Steps up to `finished` (1-based) have finished on the device."""
    now = time.monotonic()
    if self._first is None:
      self._first, self._last = (finished, now), now
      return
    if not self._every or now - self._last < self._every or jax.process_index() != 0:
      return
    self._last = now
    rate = (finished - self._first[0]) / (now - self._first[1])
    left = ''
    if rate > 0:
      left = f'  {duration((self._total - finished) / rate)} left'
      if self._later:
        left += f' ({duration((self._total - finished + self._later) / rate)} in all)'
    logging.info(
      '%sstep %s/%s (%.0f%%)  %.3g steps/s  %s %s/s%s',
      f'{self._label}: ' if self._label else '',
      f'{finished:,}',
      f'{self._total:,}',
      100 * finished / self._total,
      rate,
      f'{rate * self._per_step:,.0f}',
      self._unit,
      left,
    )


class TrainingStopped(errors.UserError):
  """The run stopped early for a reason the user must see (divergence, failed saves)."""

  exit_status = 1


class _NonfiniteStreak:
  """Logs the steps whose loss or gradients were NaN or Inf (the train step did not
  apply their updates) as their metrics are read; `limit` in a row stop the run."""

  def __init__(self, limit: int):
    self._limit, self._in_a_row = limit, 0

  def check(self, steps: range, fetched: list[dict[str, Any]]) -> None:
    for step, metrics in zip(steps, fetched, strict=True):
      bad = [
        name
        for name, key in (('loss', 'nonfinite_loss'), ('gradients', 'nonfinite_grads'))
        if metrics[key]
      ]
      if not bad:
        self._in_a_row = 0
        continue
      logging.error(
        'Step %d: non-finite %s (loss %s, grad_norm %s); the update was skipped',
        step,
        ' and '.join(bad),
        float(metrics['loss']),
        float(metrics['grad_norm']),
      )
      self._in_a_row += 1
      if self._in_a_row >= self._limit:
        raise TrainingStopped(
          f'{self._in_a_row} non-finite steps in a row up to step {step}; stopping. No '
          'non-finite update was applied, so the last checkpoint holds the last good '
          'state; lower the learning rate or check the data, then restart'
        )


class MetricsLog:
  """Per-step metrics, averaged over each window of `log_every_steps` and written
  one step late, so that reading them never stalls the device. Non-finite steps
  are counted as their window is read: the loop never waits for a step's
  results between log steps, and every process stops at the same step."""

  def __init__(
    self,
    writer: metric_writer.MetricWriter,
    meter: ThroughputMeter,
    config: ml_collections.ConfigDict,
  ):
    self._writer, self._meter, self._config = writer, meter, config
    self._nonfinite = _NonfiniteStreak(config.max_consecutive_nonfinite_steps)
    self._window: list[Metrics] = []
    self._ready: list[tuple[int, list[Metrics]]] = []
    self.last: dict[str, float] = {}  # The newest window's scalars.

  def add(self, step: int, metrics: Metrics) -> None:
    """Step `step` (1-based: steps done) produced `metrics`."""
    self._window.append(metrics)
    if step % self._config.log_every_steps == 0 or step == self._config.num_train_steps:
      self._ready.append((step, self._window))
      self._window = []

  def exclude(self, seconds: float) -> None:
    self._meter.exclude(seconds)

  def write(self, before_step: int | None = None) -> None:
    """Writes the finished windows that end before `before_step` (all if None)."""
    while self._ready and (before_step is None or self._ready[0][0] < before_step):
      step, window = self._ready.pop(0)
      fetched = jax.device_get(window)
      means = {k: float(np.mean([m[k] for m in fetched])) for k in fetched[0]}
      self.last = {**means, **self._meter.measure(step)}
      self._writer.write(step, self.last, headline=HEADLINE)  # Flushed to disk.
      self._nonfinite.check(range(step - len(fetched) + 1, step + 1), fetched)


class Preempted(errors.UserError):
  """SIGTERM arrived; the run was saved, and a rerun goes on from there."""

  # The shell's status for a process that SIGTERM ended: a script under `set -e`
  # stops rather than use a half-trained checkpoint, and a requeueing one can
  # tell a preemption (rerun) from a failure (status 1 or 2).
  exit_status = 128 + signal.SIGTERM

  def __init__(self, saved: str, step: int, total: int, directory: object):
    super().__init__(
      f'SIGTERM: saved {saved} {step} of {total} in {directory}; '
      'rerun the same command to go on from there'
    )


class Preemption:
  """Notices SIGTERM, which TPU VMs and SLURM send before they preempt a job.

  One process handles it itself. Several leave SIGTERM to JAX's preemption
  notifier (set up by jax.distributed.initialize): a notice to any process
  reaches all of them, and they agree on one step at which every process
  saves and stops. A Python handler would replace the notifier's.
  """

  def __init__(self):
    self._received = False
    self._single = jax.process_count() == 1
    if self._single:
      self._previous = signal.signal(signal.SIGTERM, self._handle)

  def _handle(self, signum, frame) -> None:
    del signum, frame
    logging.warning('Received SIGTERM: finishing this step, then saving a checkpoint')
    self._received = True

  def reached(self, step: int) -> bool:
    """True at the step where every process should save and stop; to be asked
    at every step, by every process."""
    if self._single:
      return self._received
    if multihost_utils.reached_preemption_sync_point(step):
      logging.warning(
        'Preemption notice: every process saves a checkpoint at step %d, then stops', step
      )
      return True
    return False

  def close(self) -> None:
    if self._single:
      signal.signal(signal.SIGTERM, self._previous)


class TimedSaves:
  """config.checkpoint.every_minutes, decided on the same steps by every process.

  With several processes, process 0's clock decides at each log step and
  tells the others: processes that disagreed would enter the collective save
  at different steps and hang.
  """

  def __init__(self, config: ml_collections.ConfigDict):
    self._seconds = 60 * config.checkpoint.every_minutes
    self._every = config.log_every_steps
    self._last = time.monotonic()

  def due(self, step: int) -> bool:
    if not self._seconds:
      return False
    if jax.process_count() == 1:
      return time.monotonic() - self._last >= self._seconds
    if step % self._every:
      return False
    wanted = jax.process_index() == 0 and time.monotonic() - self._last >= self._seconds
    return bool(multihost_utils.broadcast_one_to_all(np.bool_(wanted)))

  def saved(self) -> None:
    self._last = time.monotonic()
