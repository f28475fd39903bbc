"""Orbax checkpoints of the train state in `workdir/checkpoints`."""

import os
from typing import Any

from absl import logging
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


def restore_latest(manager: ocp.CheckpointManager, abstract_state: Any) -> Any | None:
  """The newest checkpoint, laid out as `abstract_state` (shapes and shardings), or None."""
  step = manager.latest_step()
  if step is None:
    return None
  logging.info('Restoring the train state from step %d in %s', step, manager.directory)
  return manager.restore(step, args=ocp.args.StandardRestore(abstract_state))


def save(manager: ocp.CheckpointManager, step: int, state: Any, *, force: bool = False) -> bool:
  """Starts an async save if the interval (or `force`) says so."""
  return manager.save(step, args=ocp.args.StandardSave(state), force=force)

