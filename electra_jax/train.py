"""ELECTRA pretraining: one jitted, sharded train step and the loop around it.

Sections, in the order they run: config, mesh, input, model, state and
train step, checkpoint, loop.
"""

import collections
from collections.abc import Callable, Mapping
import contextlib
import dataclasses
import functools
import time
from typing import Any

from absl import logging
from etils import epath
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import ml_collections
import numpy as np
import optax

from electra_jax import (
  checkpointing,
  config_lib,
  flops,
  hf_interop,
  loop,
  metric_writer,
  objectives,
  optim,
  pretrain_eval,
  pretrained,
  sharding,
)
from electra_jax.data import pipeline, shards, tokenizers
from electra_jax.model import ElectraPretrainingModel

Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]


# --- Model and state -----------------------------------------------------------


@flax.struct.dataclass
class TrainState:
  step: jax.Array
  params: Any
  opt_state: Any


def build_model(config: ml_collections.ConfigDict) -> ElectraPretrainingModel:
  """The networks that config.objective trains."""
  tied = config.model.tie_generator_to_discriminator
  return ElectraPretrainingModel(
    generator_cfg=(
      config_lib.generator_config(config) if objectives.has_generator_network(config) else None
    ),
    discriminator_cfg=config_lib.discriminator_config(config),
    embedding_sharing=config.model.embedding_sharing,
    main_head=objectives.main_head(config.objective.name),
    tie_generator=tied,
    cloze_generator=config.objective.name == 'electric',
  )


def _init_params(
  rng: jax.Array, model: ElectraPretrainingModel, config: ml_collections.ConfigDict
) -> Any:
  """Initial parameters, still boxed with logical axis names.

  They come from a rolled, unrematerialised layer scan: the parameters are the
  same, and an unrolled init compiles far longer (on this CPU, small with
  scan_unroll=12 initialised in 11.0 s unrolled, 4.7 s rolled).
  """
  rolled = functools.partial(dataclasses.replace, scan_unroll=1, remat_policy='none')
  model = model.clone(
    generator_cfg=model.generator_cfg and rolled(model.generator_cfg),
    discriminator_cfg=rolled(model.discriminator_cfg),
  )
  ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
  positions = jnp.zeros((1, config_lib.max_predictions_per_seq(config)), jnp.int32)
  return model.init({'params': rng}, ids, ids, jnp.ones_like(ids), positions)['params']


def _init_state(
  rng: jax.Array,
  model: ElectraPretrainingModel,
  tx: optax.GradientTransformation,
  config: ml_collections.ConfigDict,
) -> TrainState:
  """The initial state, its parameters still boxed with logical axis names."""
  params = _init_params(rng, model, config)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def param_shardings(
  config: ml_collections.ConfigDict, model: ElectraPretrainingModel, mesh: jax.sharding.Mesh
) -> Any:
  """The parameters' NamedShardings under the config's logical-axis rules."""
  rules = config.mesh.logical_axis_rules
  init = functools.partial(_init_params, model=model, config=config)
  with nn.logical_axis_rules(rules):
    return sharding.logical_to_shardings(jax.eval_shape(init, jax.random.key(0)), mesh, rules)


def create_train_state(
  config: ml_collections.ConfigDict,
  model: ElectraPretrainingModel,
  tx: optax.GradientTransformation,
  mesh: jax.sharding.Mesh,
) -> tuple[TrainState, Any]:
  """Initialises the state directly into its shardings.

  eval_shape gives the logical axes of every leaf without allocating; the
  config's rules turn them into NamedShardings; sharding.init_into
  then materialises each shard on its own device.
  """
  rules = config.mesh.logical_axis_rules
  rng = jax.random.key(config.seed)
  init = functools.partial(_init_state, model=model, tx=tx, config=config)
  _, shardings = abstract_train_state(config, model, tx, mesh)
  with nn.logical_axis_rules(rules):
    state = sharding.init_into(init, rng, shardings)
  return state, shardings


def abstract_train_state(
  config: ml_collections.ConfigDict,
  model: ElectraPretrainingModel,
  tx: optax.GradientTransformation,
  mesh: jax.sharding.Mesh,
) -> tuple[Any, Any]:
  """(the state as ShapeDtypeStructs carrying their shardings, the shardings),
  allocating nothing: enough to compile for devices this process cannot run."""
  rules = config.mesh.logical_axis_rules
  init = functools.partial(_init_state, model=model, tx=tx, config=config)
  with nn.logical_axis_rules(rules):
    # The key is made inside eval_shape too: nothing touches a device.
    boxed = jax.eval_shape(lambda: init(jax.random.key(config.seed)))
  shardings = sharding.logical_to_shardings(boxed, mesh, rules)
  abstract = jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), nn.meta.unbox(boxed), shardings
  )
  return abstract, shardings


def parameter_counts(params: Any) -> dict[str, int]:
  """Parameter counts per top-level module (embeddings, generator, ...)."""
  return {
    name: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(sub)) for name, sub in params.items()
  }


# --- Train step ----------------------------------------------------------------


def make_train_step(
  config: ml_collections.ConfigDict,
  model: ElectraPretrainingModel,
  tx: optax.GradientTransformation,
  obj: objectives.Settings,
) -> Callable[[TrainState, Batch], tuple[TrainState, Metrics]]:
  """The whole update of config.objective as one function of (state, batch)."""
  schedule = optim.learning_rate_schedule(config)
  rules = config.mesh.logical_axis_rules

  def train_step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
    # Every draw (masking, dropout, sampling) derives from (seed, step), so a
    # resumed run repeats the uninterrupted one exactly.
    rng = jax.random.fold_in(jax.random.key(config.seed), state.step)
    with nn.logical_axis_rules(rules):
      grads, metrics = objectives.pretraining_gradients(
        state.params, batch, rng, model=model, obj=obj
      )
    grad_norm = optax.tree.norm(grads)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    # A non-finite loss or gradient leaves parameters and optimizer state as
    # they were; the step still counts, so the next one sees new data and RNG.
    finite = jnp.isfinite(metrics['loss']) & jnp.isfinite(grad_norm)
    keep_if_finite = lambda new, old: jax.tree.map(lambda n, o: jnp.where(finite, n, o), new, old)
    metrics['grad_norm'] = grad_norm
    metrics['learning_rate'] = optim.applied_learning_rate(schedule, state.opt_state)
    metrics['nonfinite_loss'] = (~jnp.isfinite(metrics['loss'])).astype(jnp.float32)
    metrics['nonfinite_grads'] = (~jnp.isfinite(grad_norm)).astype(jnp.float32)
    return TrainState(
      step=state.step + 1,
      params=keep_if_finite(params, state.params),
      opt_state=keep_if_finite(opt_state, state.opt_state),
    ), metrics

  return train_step


def lower_train_step(
  train_step: Callable,
  state: TrainState,
  state_shardings: Any,
  batch_sharding: NamedSharding,
  config: ml_collections.ConfigDict,
):
  """jit with explicit shardings and a donated state, lowered for the config's batch."""
  replicated = NamedSharding(batch_sharding.mesh, PartitionSpec())
  jitted = jax.jit(
    train_step,
    in_shardings=(state_shardings, batch_sharding),
    out_shardings=(state_shardings, replicated),
    donate_argnums=(0,),
  )
  batch_shape = jax.ShapeDtypeStruct(
    (config.batch_size, config.max_seq_length), jnp.int32, sharding=batch_sharding
  )
  abstract_batch = {k: batch_shape for k in ('input_ids', 'attention_mask', 'token_type_ids')}
  return jitted.lower(state, abstract_batch)


def compile_train_step(
  train_step: Callable,
  state: TrainState,
  state_shardings: Any,
  batch_sharding: NamedSharding,
  config: ml_collections.ConfigDict,
):
  """lower_train_step, compiled ahead of time."""
  return lower_train_step(train_step, state, state_shardings, batch_sharding, config).compile()


def lower_abstract_train_step(
  config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh, special: tokenizers.SpecialIds
) -> tuple[jax.stages.Lowered, Any]:
  """(the train step lowered for `mesh`, the abstract state it takes), under `mesh`,
  allocating nothing: for compiling to devices this process cannot run, or reading
  the program."""
  model, tx = build_model(config), optim.create_optimizer(config)
  abstract, shardings = abstract_train_state(config, model, tx, mesh)
  train_step = make_train_step(config, model, tx, objectives.Settings.from_config(config, special))
  lowered = lower_train_step(
    train_step,
    abstract,
    shardings,
    sharding.batch_sharding(mesh, config.mesh.logical_axis_rules),
    config,
  )
  return lowered, abstract


def setup_train_step(
  config: ml_collections.ConfigDict,
  mesh: jax.sharding.Mesh,
  special: tokenizers.SpecialIds,
  tokenizer: tokenizers.Tokenizer | None = None,
) -> tuple[TrainState, Any, NamedSharding, float]:
  """Model, optimizer, sharded initial state and the compiled step, under `mesh`.
  `tokenizer` gives whole-word masking its table.

  Returns (state, compiled train step, batch sharding, compile seconds).
  """
  model = build_model(config)
  tx = optim.create_optimizer(config)
  state, state_shardings = create_train_state(config, model, tx, mesh)
  batch_sharding = sharding.batch_sharding(mesh, config.mesh.logical_axis_rules)
  start = time.perf_counter()
  obj = objectives.Settings.from_config(config, special, tokenizer)
  train_step = make_train_step(config, model, tx, obj)
  step = compile_train_step(train_step, state, state_shardings, batch_sharding, config)
  return state, step, batch_sharding, time.perf_counter() - start


# --- The run: train_and_evaluate, after the helpers it calls, in their order ------


def _record_config(config: ml_collections.ConfigDict, workdir: str) -> None:
  """Writes the config to WORKDIR/config.json and logs one line about it; the
  whole config is logged with --verbosity=1."""
  path = epath.Path(workdir) / 'config.json'
  if jax.process_index() == 0:
    path.write_text(config.to_json_best_effort(indent=2, sort_keys=True) + '\n')
  m = config.model
  logging.info(
    'Config: objective %s; %d layers of width %d; batch %d x %d; %s steps at '
    'learning rate %g; all of it in %s',
    config.objective.name,
    m.num_layers,
    m.hidden_size,
    config.batch_size,
    config.max_seq_length,
    f'{config.num_train_steps:,}',
    config.learning_rate,
    path,
  )
  logging.debug('Config:\n%s', config)


def _keep_tokenizer(data: shards.PreparedData, workdir: str) -> None:
  """Copies the tokenizer file into WORKDIR/tokenizer, so that fine-tuning,
  export and prediction need only the workdir."""
  source = epath.Path(data.directory) / 'tokenizer' / data.metadata['tokenizer']['file']
  target = epath.Path(workdir) / 'tokenizer'
  target.mkdir(parents=True, exist_ok=True)
  source.copy(target / source.name, overwrite=True)


def _resume_check(
  workdir: str, config: ml_collections.ConfigDict, data: shards.PreparedData
) -> Callable[[int, dict[str, Any]], bool]:
  """Refuses a checkpoint from a config with other architecture keys or tokenizer,
  unless allowed; says whether the model matches."""

  def check(step: int, meta: dict[str, Any]) -> bool:
    differences = checkpointing.config_differences(meta['config'], config)
    if meta['tokenizer'].get('sha256') != data.metadata['tokenizer']['sha256']:
      differences['tokenizer'] = (meta['tokenizer'].get('file'), data.metadata['tokenizer']['file'])
    if 'objective.name' in differences:
      saved, now = differences['objective.name']
      raise config_lib.ConfigError(
        f'objective.name: {workdir} holds step {step} of objective {saved!r}, which this '
        f'run of objective {now!r} cannot continue (their networks differ); use a new '
        'workdir'
      )
    blocking = {
      k: v
      for k, v in differences.items()
      if k in checkpointing.ARCHITECTURE_KEYS or k == 'tokenizer'
    }
    listed = lambda d: '; '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in d.items())
    if blocking and not config.checkpoint.allow_config_change:
      raise config_lib.ConfigError(
        f'checkpoint.allow_config_change: {workdir} holds step {step} of a different model '
        f'({listed(blocking)}); use a new workdir, or pass '
        '--config.checkpoint.allow_config_change=true to resume anyway'
      )
    if differences:
      logging.warning('Resuming step %d under a changed config: %s', step, listed(differences))
    return not blocking

  return check


def _report_end(
  state: TrainState,
  first_step: int,
  seconds: float,
  last: dict[str, float],
  checkpoints: epath.Path,
  how: str,
) -> None:
  """The closing line: how the run ended, steps, time, the last metrics and where the
  checkpoint is."""
  step = int(state.step)
  figures = ', '.join(f'{k} {last[k]:.4g}' for k in loop.LEARNING if k in last)
  logging.info(
    '%s at step %s: %s steps in %s%s; the checkpoint is in %s/%d',
    how,
    f'{step:,}',
    f'{step - first_step:,}',
    loop.duration(seconds),
    f' ({figures} over the last log window)' if figures else '',
    checkpoints,
    step,
  )


def _init_from(config: ml_collections.ConfigDict, state: TrainState, tokenizer_sha256: str):
  """`state` with the parameters of config.checkpoint.init_from: another run's
  workdir, or a released HF discriminator (with init_from_generator, its
  generator). The optimizer and the step start afresh."""
  source, generator = config.checkpoint.init_from, config.checkpoint.init_from_generator
  if pretrained.is_workdir(source):
    if generator:
      raise config_lib.ConfigError(
        'config.checkpoint.init_from_generator: goes with an HF init_from; the workdir '
        f'{source} holds its own generator'
      )
    params, step = checkpointing.restore_params(
      source, sharding.abstract(state.params), config.objective.name, tokenizer_sha256
    )
    logging.info(
      'Initialised the parameters from step %d of %s; the optimizer and the step start afresh',
      step,
      source,
    )
    return state.replace(params=params)
  if config.objective.name not in objectives.RTD_OBJECTIVES:
    raise config_lib.ConfigError(
      f'config.checkpoint.init_from: {source} is not a workdir, and an HF ELECTRA '
      f'checkpoint can start the objectives {objectives.RTD_OBJECTIVES} only'
    )
  loaded = hf_interop.pretraining_params_from_hf(
    source, generator or None, config, tokenizer_sha256
  )
  fresh = {k: v for k, v in state.params.items() if k in loaded}
  differences = checkpointing.shape_differences(loaded, fresh)
  if differences:
    raise hf_interop.HFCheckpointError(
      f'config.checkpoint.init_from: {source} does not fit this config '
      f'({"; ".join(differences[:5])})'
    )
  # Without a generator checkpoint, the generator keeps its fresh initialisation.
  params = {
    k: jax.device_put(loaded[k], jax.tree.map(lambda x: x.sharding, v)) if k in loaded else v
    for k, v in state.params.items()
  }
  logging.info(
    'Initialised the parameters from the HF checkpoint %s%s; the optimizer and the step start '
    'afresh',
    source,
    f' and {generator}' if generator else ' (the generator from random weights)',
  )
  return state.replace(params=params)


def _init_generator_from(source: str, state: TrainState, tokenizer_sha256: str) -> TrainState:
  """`state` with the generator side of another run's workdir: its generator, head and
  the tables it embeds with; the rest, the optimizer and the step start afresh."""
  if not pretrained.is_workdir(source):
    raise config_lib.ConfigError(
      f'config.checkpoint.init_from_generator: {source} is not a workdir (no checkpoints/); '
      'alone it takes another run of this code, and an HF generator goes with an HF '
      'config.checkpoint.init_from'
    )
  loaded, step = checkpointing.restore_generator(
    source, sharding.abstract(state.params), tokenizer_sha256
  )
  logging.info(
    'Initialised the generator (%s) from step %d of %s; the rest, the optimizer and the '
    'step start afresh',
    ', '.join(sorted(loaded)),
    step,
    source,
  )
  return state.replace(params={**state.params, **loaded})


def train_and_evaluate(
  config: ml_collections.ConfigDict, workdir: str, stop_at_step: int | None = None
) -> TrainState:
  """Pretrains ELECTRA as `config` says; logs, TensorBoard and checkpoints go to `workdir`.

  With `stop_at_step`, the run saves and stops once that step is done, on the
  schedule of config.num_train_steps: a later call without it continues to the
  end, and the whole is the same run, bit for bit, as one that never stopped.
  """
  # --- Config
  config_lib.validate(config)
  epath.Path(workdir).mkdir(parents=True, exist_ok=True)
  _record_config(config, workdir)
  if config.compilation_cache_dir:
    jax.config.update('jax_compilation_cache_dir', config.compilation_cache_dir)

  # --- Mesh
  mesh = sharding.make_mesh(config.mesh)
  config_lib.require_backend(config)
  batch_ways = sharding.batch_ways(mesh, config.mesh.logical_axis_rules)
  if config.batch_size % batch_ways:
    raise config_lib.ConfigError(
      f'config.batch_size: {config.batch_size} does not split over the {batch_ways} '
      'data x fsdp devices; use a multiple of it'
    )
  logging.info(
    'Mesh %s over %d devices (%s), %d processes',
    dict(mesh.shape),
    jax.device_count(),
    jax.devices()[0].platform,
    jax.process_count(),
  )

  # --- Input
  data = pipeline.prepared_data(config, workdir)
  logging.info(
    'Input: %d examples of %d tokens in %s', data.num_examples, data.max_seq_length, data.directory
  )
  manager = checkpointing.create_manager(workdir, config)
  resume_check = _resume_check(workdir, config, data)
  checkpointing.check_latest(manager, resume_check)

  # Measured once the inputs are checked, so that a refused run stops at once,
  # and before the input's readers start, which would share the cores.
  peak, peak_source = flops.peak_flops(list(mesh.devices.flat))
  logging.info(
    'MFU is model FLOPs over the %s: %.3g TFLOP/s%s',
    peak_source,
    peak / 1e12,
    ''
    if peak_source.startswith('listed')
    else ' (measured now, so MFU moves with the load on this machine; '
    'model_tflops_per_s in TensorBoard does not)',
  )

  batches = pipeline.train_iterator(
    data, config, process_index=jax.process_index(), process_count=jax.process_count()
  )
  if jax.process_index() == 0:
    _keep_tokenizer(data, workdir)

  with jax.set_mesh(mesh):
    # --- Held-out evaluation (checked now, compiled at its first use)
    held_out = None
    if config.eval.prepared_dir:
      model = build_model(config)
      held_out = pretrain_eval.HeldOut(
        config,
        config.eval.prepared_dir,
        model,
        param_shardings(config, model, mesh),
        sharding.batch_sharding(mesh, config.mesh.logical_axis_rules),
        tokenizer=data.tokenizer(),
      )

    # --- Model, state and train step
    state, train_step, batch_sharding, compile_s = setup_train_step(
      config, mesh, data.special_ids, data.tokenizer()
    )
    logging.info('Parameters: %s', parameter_counts(state.params))
    logging.info('Compiled the train step in %.1f s', compile_s)

    # --- Checkpoint: resume, or start from another run's parameters
    restored = checkpointing.restore_latest(manager, sharding.abstract(state), resume_check)
    if restored is not None:
      state = restored.state
      batches.set_state(restored.data)
      logging.info(
        'Resumed at step %d from %s in %.1f s; the input continues at %s',
        restored.step,
        manager.directory,
        restored.seconds,
        restored.data,
      )
    elif config.checkpoint.init_from:
      state = _init_from(config, state, data.metadata['tokenizer']['sha256'])
    elif config.checkpoint.init_from_generator:
      state = _init_generator_from(
        config.checkpoint.init_from_generator, state, data.metadata['tokenizer']['sha256']
      )
    meta = functools.partial(
      checkpointing.checkpoint_meta,
      config,
      tokenizer=data.metadata['tokenizer'],
      data_dir=data.directory,
    )

    # --- Loop
    writer = metric_writer.MetricWriter(workdir)
    first_step = int(state.step)
    log = loop.MetricsLog(writer, loop.ThroughputMeter(first_step, config, peak), config)
    end = min(config.num_train_steps, stop_at_step or config.num_train_steps)
    progress = loop.Progress.for_pretraining(config, end)
    preemption = loop.Preemption()
    preempted, loop_start = False, time.monotonic()
    in_flight: collections.deque[jax.Array] = collections.deque()  # Dispatched steps' losses.
    saver = checkpointing.AsyncSaver(manager, config.checkpoint.max_failed_saves_in_a_row)
    timed_saves = loop.TimedSaves(config)
    try:
      for step in range(first_step, end):
        batch = sharding.make_global_batch(next(batches), batch_sharding)
        state, metrics = train_step(state, batch)
        done = step + 1
        log.add(done, metrics)
        in_flight.append(metrics['loss'])
        if len(in_flight) > config.max_steps_ahead:
          # The host stays a few steps ahead of the device: the device is never
          # idle, batches do not pile up on it, a SIGTERM is acted on within
          # those steps, and the progress line is current.
          jax.block_until_ready(in_flight.popleft())
          progress.update(done - config.max_steps_ahead)
        # Reading the windows that ended before this step lets this step run meanwhile.
        log.write(before_step=done)
        saver.report_finished()
        if held_out and (done % config.eval.every_steps == 0 or done == end):
          start = time.perf_counter()
          writer.write(done, held_out.run(state.params), prefix='eval')
          log.exclude(time.perf_counter() - start)  # Throughput counts training only.

        # Both are asked at every step by every process, which they may synchronise.
        preempted, timed = preemption.reached(done), timed_saves.due(done)
        if manager.should_save(done) or done == end or preempted or timed:
          # Metrics up to this step reach disk before its checkpoint does, so
          # a crash never loses metrics of steps that a resume will not redo.
          log.write()
          # The iterator's position is read now, before the next batch is drawn.
          # The call waits for this step to finish, and for the previous save.
          waited = saver.save(done, state, batches.get_state(), meta(done))
          logging.info(
            'Saving the checkpoint of step %d in the background (the loop waited %.2f s)',
            done,
            waited,
          )
          timed_saves.saved()
        if preempted:
          break
      log.write()
      saver.wait()  # The final checkpoint must be on disk before the run reports success.
      how = 'Finished'
      if preempted:
        how = 'Stopped for preemption'
      elif first_step > end:
        how = f'Nothing to train (restored past stop_at_step {end:,})'
      elif end < config.num_train_steps:
        how = (
          f'Stopped as asked (a rerun without stop_at_step goes on to {config.num_train_steps:,})'
        )
      _report_end(
        state, first_step, time.monotonic() - loop_start, log.last, manager.directory, how
      )
      if preempted:
        raise loop.Preempted(
          'the checkpoint of step', done, config.num_train_steps, manager.directory
        )
    finally:
      # On an error, a save in flight still completes; the saver logs a failure.
      with contextlib.suppress(checkpointing.CheckpointError):
        saver.wait()
      manager.close()
      writer.close()
      batches.close()
      preemption.close()
  return state
