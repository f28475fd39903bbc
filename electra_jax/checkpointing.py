"""Orbax checkpoints of the train state and the input position in `workdir/checkpoints`."""

import os
from typing import Any

from absl import logging
import grain
import ml_collections
import orbax.checkpoint as ocp


def create_manager(workdir: str, config: ml_collections.ConfigDict) -> ocp.CheckpointManager:
  """Async saves every `checkpoint_every_steps`, keeping the newest few."""
  options = ocp.CheckpointManagerOptions(
      save_interval_steps=config.checkpoint_every_steps,
      max_to_keep=config.max_checkpoints_to_keep,
      enable_async_checkpointing=True)
  return ocp.CheckpointManager(os.path.abspath(os.path.join(workdir, 'checkpoints')),
                               options=options)


def restore_latest(manager: ocp.CheckpointManager,
                   abstract_state: Any) -> tuple[Any, dict[str, Any]] | None:
  """(train state laid out as `abstract_state`, input iterator state) of the newest
  checkpoint, or None when there is none."""
  step = manager.latest_step()
  if step is None:
    return None
  logging.info('Restoring the train state from step %d in %s', step, manager.directory)
  restored = manager.restore(step, args=ocp.args.Composite(
      state=ocp.args.StandardRestore(abstract_state), data=ocp.args.JsonRestore()))
  return restored.state, restored.data


def save(manager: ocp.CheckpointManager, step: int, state: Any,
         batches: grain.DatasetIterator, *, force: bool = False) -> bool:
  """Starts an async save if the interval (or `force`) says so.

  The iterator's position is read now, before the loop draws the next batch.
  Every process draws one batch per step, so all processes are at the same
  position and the primary process's state stands for them all.
  """
  if not (force or manager.should_save(step)):
    return False
  args = ocp.args.Composite(state=ocp.args.StandardSave(state),
                            data=ocp.args.JsonSave(batches.get_state()))
  return manager.save(step, args=args, force=force)
