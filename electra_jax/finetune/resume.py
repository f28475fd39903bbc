"""Where an interrupted fine-tuning seed goes on: OUT/seed_N/checkpoints.

A seed saves its parameters and optimizer state, with the dev results of the
epochs it has finished and the settings that made them, every
config.checkpoint.every_minutes and when SIGTERM arrives (a preemption). A rerun
of the same command restores the newest save and goes on at the next step. A
step's batch and dropout masks are drawn from the seed and the step alone, so
the resumed seed ends exactly as an uninterrupted one would. The checkpoint is
deleted once the seed's result.json is written.

The saves are pretraining's (electra_jax.checkpointing): asynchronous, and
restored the same way, so a damaged save is set aside and a storage outage is
retried, then reported, with the checkpoint left in place.
"""

import json
from typing import Any

from absl import logging
import jax
from jax.experimental import multihost_utils
import ml_collections

from electra_jax import checkpointing, loop, sharding

# A save that fails this many times in a row stops the run: its work could not be kept.
_MAX_FAILED_SAVES = 3


class Saves:
  """When seeds save: every config.checkpoint.every_minutes, and at a SIGTERM.

  One for the whole run, so that the clock and the signal handler span its seeds.
  """

  def __init__(self, config: ml_collections.ConfigDict):
    self._preemption = loop.Preemption()
    self._timed = loop.TimedSaves(config)
    # Steps over all seeds: the same on every process, and never going back,
    # as the multi-process preemption sync point needs.
    self._count = 0

  def due(self) -> tuple[bool, bool]:
    """(save now, then stop); asked after every step, by every process."""
    self._count += 1
    preempted = self._preemption.reached(self._count)
    return preempted or self._timed.due(self._count), preempted

  def saved(self) -> None:
    self._timed.saved()

  def seed_started(self) -> None:
    """A new seed has no work to lose yet: the clock starts again."""
    self._timed.saved()

  def close(self) -> None:
    self._preemption.close()


class _OtherSettings(checkpointing.CheckpointError):
  """A seed's checkpoint saved under other settings: caught here, the seed restarts."""


class SeedCheckpoint:
  """The checkpoint of one seed, in its folder OUT/seed_N.

  `settings` is what makes the seed's result what it is (the run key): a save
  made under others is deleted, and the seed trains from the start.
  """

  def __init__(self, seed_dir: str, settings: dict[str, Any], saves: Saves):
    self._dir = seed_dir
    self._settings = json.loads(json.dumps(settings, default=float))
    self._saves = saves
    saves.seed_started()
    self._open()

  def _open(self) -> None:
    self._manager = checkpointing.create_newest_only_manager(self._dir)
    self._saver = checkpointing.AsyncSaver(self._manager, _MAX_FAILED_SAVES)

  def restore(self, state: Any) -> tuple[int, Any, list[Any]] | None:
    """(step, state, per-epoch dev results) of the newest save, laid out as
    `state`; None when there is none, or when it was made under other settings."""

    def check(step: int, meta: dict[str, Any]) -> bool:
      if meta.get('settings') != self._settings:
        raise _OtherSettings(f'{self._manager.directory / str(step)}')
      return True

    try:
      restored = checkpointing.restore_latest(self._manager, sharding.abstract(state), check)
    except _OtherSettings as e:
      logging.info('%s comes from other settings; training the seed from the start', e)
      self.remove()
      self._open()
      return None
    if restored is None:
      return None
    return restored.step, restored.state, restored.data['epochs']

  def step_done(self, step: int, total: int, state: Any, epochs: list[Any]) -> None:
    """Saves `state` after `step` if a save is due; raises loop.Preempted after a SIGTERM's."""
    save, stop = self._saves.due()
    if save:
      meta = {'step': step, 'settings': self._settings}
      waited = self._saver.save(step, state, {'epochs': epochs}, meta)
      self._saves.saved()
      logging.info('Saving step %d in %s (the loop waited %.2f s)', step, self._dir, waited)
    if stop:
      self._saver.wait()
      raise loop.Preempted('this seed at step', step, total, self._manager.directory)
    self._saver.report_finished()

  def close(self) -> None:
    """Waits for a save in flight (raising SavesFailed if it failed)."""
    try:
      self._saver.wait()
    finally:
      self._manager.close()

  def remove(self) -> None:
    """Deletes the seed's checkpoints: once its result is written, they are spent."""
    self.close()
    remove(self._dir)


def remove(seed_dir: str) -> None:
  """Deletes OUT/seed_N/checkpoints, if there is one (a run killed between
  writing a seed's result and this leaves one behind)."""
  directory = checkpointing.checkpoint_dir(seed_dir)
  if jax.process_index() == 0 and directory.exists():
    directory.rmtree()
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'removed {directory}')
