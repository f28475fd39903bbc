"""Orbax checkpoints in WORKDIR/checkpoints: what they hold, when they are kept, how runs resume.

A checkpoint `checkpoints/STEP` holds three items, none of them pickled:
  state  the train state (parameters of both networks, optimizer state, step)
         as tensorstore arrays, restorable onto any mesh;
  data   the input iterator's position (JSON);
  meta   the config that produced it, the tokenizer reference, the RNG
         recipe and the machine it ran on (JSON). Every random draw is
         fold_in(key(seed), step), so the seed and the step are the whole RNG
         state.

Saves are asynchronous: the loop blocks only while arrays are copied off the
device. Orbax writes each checkpoint to a temporary directory and renames it
when complete, so a crash mid-save leaves the previous checkpoints valid. On
restart the newest checkpoint that restores is used; unreadable ones are moved
aside with a warning, never silently replaced by a fresh start. A resume
repeats the uninterrupted run bit for bit only on the same machine setup
(`machine()`); on another one it goes on with a warning that says what changed.
"""

from collections.abc import Callable
import dataclasses
import errno
import functools
import json
import os
import re
import time
from typing import Any

from absl import logging
from etils import epath
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from orbax.checkpoint.checkpoint_managers import preservation_policy, save_decision_policy

from electra_jax import config_lib, errors

# Config keys that fix the parameters' shapes and meaning: a checkpoint from a
# config that differs in one of them cannot continue under this config.
ARCHITECTURE_KEYS = (
  'model.vocab_size',
  'model.embedding_size',
  'model.hidden_size',
  'model.attention_head_size',
  'model.num_layers',
  'model.max_position_embeddings',
  'model.type_vocab_size',
  'model.generator_hidden_fraction',
  'model.embedding_sharing',
  'model.scan_layers',
  'model.generator_layers_fraction',
  'model.tie_generator_to_discriminator',
  'objective.name',
  'objective.uniform_generator',
)


class CheckpointError(errors.UserError):
  """No usable checkpoint where one was expected, or one from another config."""


class SavesFailed(CheckpointError):
  """A run that started well could not keep its work (a full disk, lost access)."""

  exit_status = 1


def checkpoint_dir(workdir: str) -> epath.Path:
  """WORKDIR/checkpoints; local paths are made absolute, gs:// paths kept as they are."""
  path = epath.Path(workdir) / 'checkpoints'
  return path if '://' in str(workdir) else path.absolute()


def create_manager(workdir: str, config: ml_collections.ConfigDict) -> ocp.CheckpointManager:
  """Async saves every `checkpoint.every_steps`; keeps the newest `keep` and every `keep_every`."""
  c = config.checkpoint
  keep: list[Any] = [preservation_policy.LatestN(c.keep)]
  if c.keep_every_steps:
    keep.append(preservation_policy.EveryNSteps(c.keep_every_steps))
  return _manager(
    checkpoint_dir(workdir),
    save_decision_policy.FixedIntervalPolicy(c.every_steps),
    preservation_policy.AnyPreservationPolicy(keep),
  )


def create_newest_only_manager(workdir: str) -> ocp.CheckpointManager:
  """Async saves when asked (`save`'s force), keeping only the newest: for a run
  that resumes from its last save and needs no history, a fine-tuning seed."""
  return _manager(
    checkpoint_dir(workdir),
    save_decision_policy.FixedIntervalPolicy(1),
    preservation_policy.LatestN(1),
  )


def _manager(directory: epath.Path, save_policy: Any, keep_policy: Any) -> ocp.CheckpointManager:
  options = ocp.CheckpointManagerOptions(
    save_decision_policy=save_policy,
    preservation_policy=keep_policy,
    enable_async_checkpointing=True,
    cleanup_tmp_directories=True,
  )
  _save_replicated_arrays_whole_within_one_process()
  return _Manager(directory, options=options)


class _Manager(ocp.CheckpointManager):
  """Orbax's manager, kept off JAX's preemption sync point.

  The sync protocol reads one counter per process: the step of the newest call
  to reached_preemption_sync_point, from any thread. Orbax asks it too, and
  from its finalize thread with the step being saved, after the loop has moved
  on; a notice that arrives then gets a sync step that one process has passed
  and another has not, and the two hang in their next collective (seen in the
  two-process SIGTERM test). loop.Preemption alone asks, once per step from the
  loop, and the loop forces the save itself.
  """

  def reached_preemption(self, step: int) -> bool:
    del step
    return False


@functools.cache
def _save_replicated_arrays_whole_within_one_process() -> None:
  """Replica-parallel saving splits each replicated array into one slice per
  replica so that several hosts share its write. Within one process it only
  adds an eager slice per shard, each compiled at the first save: 12.2 s of
  the first save's 12.3 s for configs/tiny.py on 8 CPU devices (0.05 s without)."""
  verbosity = logging.get_verbosity()
  logging.set_verbosity(logging.ERROR)  # Orbax warns that the jax.Array handler is replaced.
  try:
    ocp.type_handlers.register_type_handler(
      jax.Array,
      ocp.type_handlers.ArrayHandler(use_replica_parallel=jax.process_count() > 1),
      override=True,
    )
  finally:
    logging.set_verbosity(verbosity)


@dataclasses.dataclass
class Restored:
  step: int
  state: Any
  data: dict[str, Any] | None
  meta: dict[str, Any]
  seconds: float


def machine() -> dict[str, Any]:
  """What a run's floating-point results depend on besides its config and step.

  XLA compiles for the device kind and count, a JAX release may compile the
  same step differently, and on a CPU the cores a process may use set how many
  threads share each sum: a run pinned to one core and the same run on two
  differ in the last bits after 40 steps, and the difference grows
  (docs/checkpoints.md).
  """
  devices = jax.devices()
  setup = {
    'jax': jax.__version__,
    'device_kind': devices[0].device_kind,
    'devices': len(devices),
    'processes': jax.process_count(),
  }
  if devices[0].platform == 'cpu':
    setup['cpu_threads'] = (
      len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()
    )
  return setup


def _warn_if_other_machine(path: epath.Path, meta: dict[str, Any]) -> None:
  saved = meta.get('machine')
  if saved is None:  # Saved before checkpoints recorded it.
    return
  changes = [
    f'{key} {then} -> {now}' for key, (then, now) in _differences(saved, machine()).items()
  ]
  if changes:
    logging.warning(
      '%s was saved on another machine setup (%s): the run goes on, but not bit for bit '
      'as an uninterrupted run would; resume on the saving setup to repeat it exactly',
      path,
      ', '.join(changes),
    )


def _restore_meta(manager: ocp.CheckpointManager, step: int) -> dict[str, Any]:
  return manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())).meta


def _restore(
  manager: ocp.CheckpointManager, step: int, abstract_state: Any, with_data: bool
) -> Restored:
  start = time.perf_counter()
  items = {'state': ocp.args.StandardRestore(abstract_state), 'meta': ocp.args.JsonRestore()}
  if with_data:
    items['data'] = ocp.args.JsonRestore()
  restored = manager.restore(step, args=ocp.args.Composite(**items))
  return Restored(
    step, restored.state, restored.get('data'), restored.meta, time.perf_counter() - start
  )


def restore_latest(
  manager: ocp.CheckpointManager,
  abstract_state: Any,
  check_meta: Callable[[int, dict[str, Any]], bool],
) -> Restored | None:
  """The newest checkpoint that restores, laid out as `abstract_state` (shapes and
  shardings, so a different mesh works); None when the workdir has none.

  `check_meta(step, meta)` runs on each candidate's metadata before its arrays
  are read: it raises to refuse the checkpoint, and returns whether the
  checkpoint's model matches this config.

  A read that fails for a reason outside the checkpoint (lost access, a
  storage outage, out of memory: `_is_trouble`) is retried with backoff, then
  stops the run with CheckpointError, leaving the checkpoint in place. Any
  other failure means the checkpoint itself is damaged: once every process
  agrees, process 0 renames it `STEP.unreadable-TIME` with a warning and the
  next older one is tried; if every one fails, CheckpointError. One from a
  changed model that fails to restore is left alone.
  """
  try:
    steps = _read(manager.all_steps, manager.directory)
  except _Damaged as e:
    raise CheckpointError(f'{manager.directory} cannot be listed ({_brief(e.error)})') from None
  failures = []
  for step in sorted(steps, reverse=True):
    path = manager.directory / str(step)
    restored, damage, stop, matches = None, None, None, True
    try:
      meta = _read(lambda: _restore_meta(manager, step), path)
      matches = check_meta(step, meta)
      restored = _read(lambda: _restore(manager, step, abstract_state, with_data=True), path)
    except _Damaged as e:
      damage = e.error
    except CheckpointError as e:  # Trouble, or check_meta's refusal.
      stop = e
    agreed = _agree(manager, step, 'stop' if stop else 'damaged' if damage else 'ok')
    if stop is not None:
      raise stop
    if agreed == 'stop':
      raise CheckpointError(f'{path}: another process could not read it; its log says why')
    if agreed == 'ok':
      _warn_if_other_machine(path, restored.meta)
      return restored
    if not matches:
      raise CheckpointError(
        f'{path} does not restore under the changed config '
        f'({_brief(damage) if damage else "damaged where another process read it"}); use a '
        'new workdir, or config.checkpoint.init_from'
      )
    failures.append(_set_aside(manager, step, damage))
  if failures:
    raise CheckpointError(
      f'{manager.directory}: no checkpoint could be restored '
      f'({"; ".join(failures)}); fix or remove them, or use a new workdir'
    )
  return None


# How often a read that failed for a passing reason is tried again, and after
# how long: 1 + 2 + 4 + 8 s.
READ_RETRY_DELAYS = (1, 2, 4, 8)

# Errors that say the storage or the machine could not serve a checkpoint, not
# that the checkpoint is damaged. orbax, tensorstore (absl status codes in the
# message) and gcsfs ('Forbidden', HTTP errors) raise these under many types.
_TROUBLE_TYPES = (ConnectionError, TimeoutError, MemoryError, PermissionError)
_TROUBLE_ERRNOS = {
  errno.EACCES,
  errno.EPERM,
  errno.EIO,
  errno.ENOMEM,
  errno.EAGAIN,
  errno.ETIMEDOUT,
  errno.ECONNREFUSED,
  errno.ECONNRESET,
  errno.ECONNABORTED,
  errno.ENETUNREACH,
  errno.EHOSTUNREACH,
}
_TROUBLE_TEXT = re.compile(
  r'\b(UNAVAILABLE|DEADLINE_EXCEEDED|RESOURCE_EXHAUSTED|PERMISSION_DENIED|UNAUTHENTICATED'
  r'|ABORTED|CANCELLED)\b|\b(Forbidden|Unauthorized|Too Many Requests|Service Unavailable'
  r'|Cannot connect|Connection refused|Connection reset|timed out|out of memory)',
  re.IGNORECASE,
)


def _is_trouble(error: BaseException) -> bool:
  """Whether `error`, or one that caused it, is trouble outside the checkpoint."""
  seen: BaseException | None = error
  while seen is not None:
    if isinstance(seen, _TROUBLE_TYPES) or getattr(seen, 'errno', None) in _TROUBLE_ERRNOS:
      return True
    if _TROUBLE_TEXT.search(str(seen)):
      return True
    seen = seen.__cause__ or seen.__context__
  return False


class _Damaged(Exception):
  """A checkpoint read failed for a reason inside the checkpoint."""

  def __init__(self, error: Exception):
    super().__init__(str(error))
    self.error = error


def _read(read: Callable[[], Any], path: epath.Path) -> Any:
  """read(); trouble is retried after each of READ_RETRY_DELAYS, then raised as
  CheckpointError naming `path`; any other error is raised as _Damaged."""
  for delay in (*READ_RETRY_DELAYS, None):
    try:
      return read()
    except CheckpointError:
      raise
    except Exception as e:  # Orbax and tensorstore raise many types for failed reads.
      if not _is_trouble(e):
        raise _Damaged(e) from e
      if delay is None:
        raise CheckpointError(
          f'{path} could not be read ({_brief(e)}), also after {len(READ_RETRY_DELAYS)} '
          'retries. The checkpoint was left in place: this looks like lost access, a '
          'storage outage or a lack of memory, not damage. Fix that, then rerun to resume'
        ) from None
      logging.warning('Reading %s failed (%s); trying again in %d s', path, _brief(e), delay)
      time.sleep(delay)
  raise AssertionError('unreachable')


def _agree(manager: ocp.CheckpointManager, step: int, outcome: str) -> str:
  """The outcome of reading `step` that every process acts on: 'stop' if any
  process stops, else 'damaged' if any found damage, else 'ok'."""
  if jax.process_count() == 1:
    return outcome
  codes = ('ok', 'damaged', 'stop')
  everyone = multihost_utils.process_allgather(np.int32(codes.index(outcome)))
  agreed = codes[int(np.max(everyone))]
  if agreed != outcome:
    logging.warning(
      'Checkpoint %d in %s: this process read it as %s, another as %s',
      step,
      manager.directory,
      outcome,
      agreed,
    )
  return agreed


def check_latest(
  manager: ocp.CheckpointManager, check_meta: Callable[[int, dict[str, Any]], bool]
) -> None:
  """Runs `check_meta` on the newest checkpoint's metadata, so that a config
  mismatch stops the run before anything is compiled. Unreadable metadata is
  left for `restore_latest` to handle."""
  step = manager.latest_step()
  if step is None:
    return
  try:
    meta = _restore_meta(manager, step)
  except Exception:  # Damaged: restore_latest reports it and falls back.
    return
  check_meta(step, meta)


# The OS errors a failed save usually comes down to, named in full in its
# report even when the middle of a long message is elided.
_IO_ERRORS = tuple(
  os.strerror(code)
  for code in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EIO)
)


def _brief(error: Exception, limit: int = 600) -> str:
  """`Type: message`, its middle elided when long: tensorstore puts the path
  first and the OS error (e.g. 'No space left on device') last, but an error
  that gathers several writes' failures may hold it only in the middle."""
  text = re.sub(r'\s*\n\s*', ' ', str(error))  # One line in the log.
  if len(text) > limit:
    elided = f'{text[: limit // 2]} ... {text[-limit // 2 :]}'
    causes = [e for e in _IO_ERRORS if e in text and e not in elided]
    text = elided + (f' (OS error: {", ".join(causes)})' if causes else '')
  return f'{type(error).__name__}: {text}'


def _set_aside(manager: ocp.CheckpointManager, step: int, error: Exception | None) -> str:
  """Renames a damaged checkpoint out of the way (process 0, while the others
  wait); returns a description. `error` is None on a process that read it well."""
  reason = _brief(error) if error is not None else 'damaged where another process read it'
  aside = manager.directory / f'{step}.unreadable-{int(time.time())}'
  if jax.process_index() == 0:
    (manager.directory / str(step)).rename(aside)
  if jax.process_count() > 1:
    multihost_utils.sync_global_devices(f'electra_jax:set_aside_{step}')
  manager.reload()
  logging.warning(
    'Checkpoint %d in %s cannot be restored (%s); %s, and trying the previous one',
    step,
    manager.directory,
    reason,
    f'moved it to {aside}' if jax.process_index() == 0 else 'process 0 moved it aside',
  )
  return f'{step}: {reason}'


def _reader(path: epath.Path, state_handler: Any = None) -> ocp.CheckpointManager:
  """A manager that reads the checkpoints in `path` and never writes there."""
  handlers = {
    'state': state_handler or ocp.StandardCheckpointHandler(),
    'data': ocp.JsonCheckpointHandler(),
    'meta': ocp.JsonCheckpointHandler(),
  }
  return ocp.CheckpointManager(
    path, item_handlers=handlers, options=ocp.CheckpointManagerOptions(create=False)
  )


def _open_newest(
  workdir: str, what: str, state_handler: Any = None
) -> tuple[ocp.CheckpointManager, int]:
  """A reader of WORKDIR/checkpoints and its newest step; `what` names the input in errors."""
  path = checkpoint_dir(workdir)
  if not path.exists():
    raise CheckpointError(
      f'{what}: {workdir} has no checkpoints/ folder; point it at the workdir of a pretraining run'
    )
  manager = _reader(path, state_handler)
  step = manager.latest_step()
  if step is None:
    manager.close()
    raise CheckpointError(f'{what}: {path} holds no finished checkpoint')
  return manager, step


def shape_differences(saved: Any, wanted: Any) -> list[str]:
  """'path: (saved shape) -> (wanted shape)' for each leaf that differs or is
  missing on one side."""
  shapes = lambda tree: {
    '.'.join(str(getattr(k, 'key', k)) for k in path): tuple(leaf.shape)
    for path, leaf in jax.tree_util.tree_leaves_with_path(tree)
  }
  before, after = shapes(saved), shapes(wanted)
  return [
    f'params.{key}: {before.get(key, "absent")} -> {after.get(key, "absent")}'
    for key in sorted(before.keys() | after.keys())
    if before.get(key) != after.get(key)
  ]


def _check_tokenizer(meta: dict[str, Any], source: str, what: str, tokenizer_sha256: str) -> None:
  if meta['tokenizer'].get('sha256') != tokenizer_sha256:
    raise CheckpointError(
      f'{what}: {source} was pretrained with another tokenizer '
      f"({meta['tokenizer'].get('file')}) than this run's data; prepare the data "
      f'with its vocabulary, which is in {source}/tokenizer'
    )


def _restore_part(manager: ocp.CheckpointManager, step: int, abstract_params: Any) -> Any:
  """The saved parameters that `abstract_params` names, laid out as it says."""
  target = {'params': abstract_params}
  restored = manager.restore(
    step,
    args=ocp.args.Composite(
      state=ocp.args.PyTreeRestore(
        item=target,
        restore_args=ocp.checkpoint_utils.construct_restore_args(target),
        partial_restore=True,
      )
    ),
  )
  return restored.state['params']


def _fits(saved: Any, wanted: Any, source: str, what: str, fix: str) -> None:
  differences = shape_differences(saved, wanted)
  if differences:
    raise CheckpointError(
      f'{what}: the parameters of {source} do not fit this config '
      f'({"; ".join(differences[:5])}{"; ..." if len(differences) > 5 else ""}); {fix}'
    )


def restore_params(
  source: str, abstract_params: Any, objective: str, tokenizer_sha256: str
) -> tuple[Any, int]:
  """The parameters of the newest checkpoint in another run's workdir, and its step,
  laid out as `abstract_params`. Only the parameters are read, so the source may
  have had any optimizer. Its objective, tokenizer and parameter shapes must be
  this run's."""
  what = 'config.checkpoint.init_from'
  # The PyTree handler restores a part of the saved state; the standard one, all of it.
  manager, step = _open_newest(source, what, ocp.PyTreeCheckpointHandler())
  try:
    meta = _restore_meta(manager, step)
    saved = config_lib.with_defaults(meta['config']).objective.name
    if saved != objective:
      raise CheckpointError(
        f'{what}: {source} was pretrained with objective {saved!r}, this run with '
        f'{objective!r}; their networks differ, so start from a run of objective {objective!r}'
      )
    _check_tokenizer(meta, source, what, tokenizer_sha256)
    saved_params = manager.item_metadata(step)['state']['params']
    _fits(saved_params, abstract_params, source, what, 'use the model keys of that run')
    return _restore_part(manager, step, abstract_params), step
  finally:
    manager.close()


def _generator_parts(params: dict[str, Any]) -> dict[str, str]:
  """{role: top-level key} of the parameters a generator network reads: its
  networks and head (every key from 'generator'), and as 'tables' the word,
  position and type tables it embeds with ('embeddings' when it shares them,
  'generator_embeddings' when untied). Empty without a generator network of
  its own: BERT's 'mlm', uniform samples, or a generator tied to the
  discriminator."""
  networks = {k for k in params if k.startswith('generator') and k != 'generator_embeddings'}
  if not networks - {'generator_head'}:
    return {}
  table = 'generator_embeddings' if 'generator_embeddings' in params else 'embeddings'
  return {**{k: k for k in sorted(networks)}, 'tables': table}


def restore_generator(
  source: str, abstract_params: dict[str, Any], tokenizer_sha256: str
) -> tuple[dict[str, Any], int]:
  """The generator side (_generator_parts) of the newest checkpoint in another run's
  workdir, under this run's names and layout in `abstract_params`, and its step.
  Either run may share its tables with its discriminator or not; the generator
  networks, their shapes and the tokenizer must be this run's."""
  what = 'config.checkpoint.init_from_generator'
  wanted = _generator_parts(abstract_params)
  if not wanted:
    raise CheckpointError(
      f'{what}: this run has no generator network of its own to start (objective '
      "'mlm', objective.uniform_generator or model.tie_generator_to_discriminator)"
    )
  manager, step = _open_newest(source, what, ocp.PyTreeCheckpointHandler())
  try:
    _check_tokenizer(_restore_meta(manager, step), source, what, tokenizer_sha256)
    saved_params = manager.item_metadata(step)['state']['params']
    saved = _generator_parts(saved_params)
    if saved.keys() != wanted.keys():
      raise CheckpointError(
        f'{what}: {source} has the generator networks {sorted(saved.keys() - {"tables"})}, '
        f'this run {sorted(wanted.keys() - {"tables"})}; start from a run whose generator '
        'is built as this one is'
      )
    # This run's abstract generator side, under the source's names.
    target = {saved[role]: abstract_params[key] for role, key in wanted.items()}
    _fits(
      {key: saved_params[key] for key in target},
      target,
      source,
      what,
      "use the generator's model keys of that run",
    )
    restored = _restore_part(manager, step, target)
  finally:
    manager.close()
  return {key: restored[saved[role]] for role, key in wanted.items()}, step


def restore_for_inference(
  workdir: str, device: jax.Device | None = None, step: int | None = None
) -> tuple[int, dict[str, Any], dict[str, Any]]:
  """(step, parameters, metadata) of a workdir's newest checkpoint, or of `step`, the
  parameters on one device. Needs no model or optimizer: the tree comes from the
  checkpoint's own metadata, so any config's checkpoint reads the same way."""
  manager, newest = _open_newest(workdir, 'pretrained model')
  if step is None:
    step = newest
  elif step not in (saved := sorted(manager.all_steps())):
    manager.close()
    raise CheckpointError(f'step {step}: {workdir} holds checkpoints at steps {saved} only')
  local = jax.sharding.SingleDeviceSharding(device or jax.local_devices()[0])
  target = jax.tree.map(
    lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=local),
    manager.item_metadata(step)['state'],
  )
  restored = manager.restore(
    step,
    args=ocp.args.Composite(state=ocp.args.StandardRestore(target), meta=ocp.args.JsonRestore()),
  )
  manager.close()
  return step, restored.state['params'], restored.meta


def _flatten(tree: dict[str, Any], prefix: str = '') -> dict[str, Any]:
  flat = {}
  for key, value in tree.items():
    if isinstance(value, dict):
      flat.update(_flatten(value, f'{prefix}{key}.'))
    else:
      flat[f'{prefix}{key}'] = value
  return flat


def config_differences(
  saved: dict[str, Any], config: ml_collections.ConfigDict
) -> dict[str, tuple[Any, Any]]:
  """{key: (saved value, current value)} for every config key that differs."""
  saved = json.loads(config_lib.with_defaults(saved).to_json_best_effort())
  return _differences(_flatten(saved), _flatten(json.loads(config.to_json_best_effort())))


def _differences(before: dict[str, Any], now: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
  """{key: (value before, value now)} for every key whose value differs, in key order."""
  return {
    k: (before.get(k), now.get(k))
    for k in sorted(before.keys() | now.keys())
    if before.get(k) != now.get(k)
  }


def checkpoint_meta(
  config: ml_collections.ConfigDict, step: int, tokenizer: dict[str, Any], data_dir: str
) -> dict[str, Any]:
  """What a checkpoint records besides arrays: config, tokenizer, RNG recipe."""
  return {
    'step': step,
    'config': json.loads(config.to_json_best_effort()),
    'tokenizer': tokenizer,
    'data_dir': data_dir,
    'rng': {'seed': config.seed, 'draws': 'jax.random.fold_in(jax.random.key(seed), step)'},
  }


def save(
  manager: ocp.CheckpointManager,
  step: int,
  state: Any,
  data_state: dict[str, Any],
  meta: dict[str, Any],
) -> None:
  """Starts an async save of `state`, the input iterator's position and `meta`,
  to which the machine setup is added.

  Every process draws one batch per step, so all processes' iterators are at
  the same position and the primary process's JSON stands for them all.
  """
  args = ocp.args.Composite(
    state=ocp.args.StandardSave(state),
    data=ocp.args.JsonSave(data_state),
    meta=ocp.args.JsonSave({**meta, 'machine': machine()}),
  )
  manager.save(step, args=args, force=True)


class AsyncSaver:
  """Starts async saves for the train loop and reports each one's outcome.

  Orbax raises a background write's error (a full disk, a lost bucket) only
  when it is next waited for; this class waits for the previous save before
  starting the next, so an error is reported against the step it belongs to.
  `report_finished`, called from the loop, logs a save when it is on disk rather
  than when the next one starts.
  A failed save leaves the older checkpoints valid and training goes on, in
  case the failure is passing; `max_failures_in_a_row` failures stop the run,
  since work that cannot be saved would be lost anyway.
  """

  def __init__(self, manager: ocp.CheckpointManager, max_failures_in_a_row: int):
    self._manager = manager
    self._max_failures = max_failures_in_a_row
    self._pending: int | None = None
    self._checked = self._reported = False
    self._failures = 0
    self.last_failure: str | None = None

  def save(self, step: int, state: Any, data_state: dict[str, Any], meta: dict[str, Any]) -> float:
    """Starts saving `step`; returns the seconds the caller was blocked."""
    start = time.perf_counter()
    self._collect()
    try:
      save(self._manager, step, state, data_state, meta)
      self._pending, self._checked, self._reported = step, False, False
    except Exception as e:  # Orbax and tensorstore raise many types for failed I/O.
      self._failed(step, e)
    return time.perf_counter() - start

  def report_finished(self) -> None:
    """Logs the save in flight once it is on disk; never blocks.

    Its errors still surface in the next `save` or `wait`, which every process
    reaches at the same step.
    """
    if self._pending is None or self._checked or self._manager.is_saving_in_progress():
      return
    self._checked = True  # Once: a bucket lookup at every step would cost.
    # A failed write also ends "in progress"; only a finalized step was saved.
    if ocp.step.is_path_finalized(self._manager.directory / str(self._pending)):
      self._report_saved(self._pending)

  def wait(self) -> None:
    """Waits for the save in flight; raises CheckpointError if it failed."""
    self._collect()
    if self.last_failure is not None:
      raise SavesFailed(self.last_failure)

  def _collect(self) -> None:
    if self._pending is None:
      return
    step, self._pending = self._pending, None
    try:
      self._manager.wait_until_finished()
    except Exception as e:
      self._failed(step, e)
    else:
      self._failures, self.last_failure = 0, None
      if not self._reported:
        self._report_saved(step)

  def _report_saved(self, step: int) -> None:
    self._reported = True
    logging.info('Saved the checkpoint of step %d in %s', step, self._manager.directory)

  def _failed(self, step: int, error: Exception) -> None:
    self._failures += 1
    self.last_failure = (
      f'saving the checkpoint of step {step} in {self._manager.directory} failed '
      f'({_brief(error)}); the newest valid checkpoint is step '
      f'{self._manager.latest_step()}. Free space or fix access to the workdir, then rerun '
      'to resume from it'
    )
    logging.error('%s', self.last_failure)
    if self._failures >= self._max_failures:
      raise SavesFailed(
        f'{self._failures} saves in a row failed; stopping, since the '
        f'work done could not be kept. Last: {self.last_failure}'
      )
