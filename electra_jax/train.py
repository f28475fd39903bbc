"""ELECTRA pretraining: one jitted, sharded train step and the loop around it.

Sections, in the order they run: config, mesh, input, model, state and
train step, checkpoint, loop.
"""

from collections.abc import Callable, Mapping
import dataclasses
import functools
import os
import time
from typing import Any

from absl import logging
import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import ml_collections
import numpy as np
import optax

from electra_jax import checkpointing, config_lib, metric_writer, objective, optim, sharding
from electra_jax.data import pipeline
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
  return ElectraPretrainingModel(
      generator_cfg=config_lib.generator_config(config),
      discriminator_cfg=config_lib.discriminator_config(config),
      untie_embeddings=config.model.untie_embeddings)


def _init_state(rng: jax.Array, model: ElectraPretrainingModel,
                tx: optax.GradientTransformation, config: ml_collections.ConfigDict) -> TrainState:
  """The initial state, its parameters still boxed with logical axis names."""
  ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
  positions = jnp.zeros((1, config_lib.max_predictions_per_seq(config)), jnp.int32)
  params = model.init({'params': rng}, ids, ids, jnp.ones_like(ids), positions)['params']
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))


def create_train_state(config: ml_collections.ConfigDict, model: ElectraPretrainingModel,
                       tx: optax.GradientTransformation,
                       mesh: jax.sharding.Mesh) -> tuple[TrainState, Any]:
  """Initialises the state directly into its shardings.

  eval_shape gives the logical axes of every leaf without allocating; the
  config's rules turn them into NamedShardings; jit(init, out_shardings=...)
  then materialises each shard on its own device.
  """
  rules = config.mesh.logical_axis_rules
  rng = jax.random.key(config.seed)
  init = functools.partial(_init_state, model=model, tx=tx, config=config)
  with nn.logical_axis_rules(rules):
    shardings = sharding.logical_to_shardings(jax.eval_shape(init, rng), mesh, rules)
    state = jax.jit(lambda r: nn.meta.unbox(init(r)), out_shardings=shardings)(rng)
  return state, shardings


def parameter_counts(params: Any) -> dict[str, int]:
  """Parameter counts per top-level module (embeddings, generator, ...)."""
  return {name: sum(int(np.prod(x.shape)) for x in jax.tree.leaves(sub))
          for name, sub in params.items()}


# --- Train step ----------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Objective:
  """What the step needs besides the model: token ids and objective settings."""
  special: objective.SpecialIds
  mask_prob: float
  mask_token_prob: float
  max_predictions: int
  temperature: float
  gen_weight: float
  disc_weight: float

  @classmethod
  def from_config(cls, config: ml_collections.ConfigDict,
                  special: objective.SpecialIds) -> 'Objective':
    o = config.objective
    return cls(special=special, mask_prob=o.mask_prob, mask_token_prob=o.mask_token_prob,
               max_predictions=config_lib.max_predictions_per_seq(config),
               temperature=o.temperature, gen_weight=o.gen_weight, disc_weight=o.disc_weight)


def pretraining_losses(params: Any, batch: Batch, rng: jax.Array, *,
                       model: ElectraPretrainingModel, obj: Objective,
                       deterministic: bool = False) -> tuple[jax.Array, jax.Array, Metrics]:
  """Masks, runs the generator, samples, corrupts, runs the discriminator.

  Returns (MLM loss, discriminator loss, metrics).
  """
  mask_rng, gen_rng, sample_rng, disc_rng = jax.random.split(rng, 4)
  variables = {'params': params}
  masked = objective.mask_tokens(
      mask_rng, batch['input_ids'], batch['attention_mask'], obj.special,
      mask_prob=obj.mask_prob, mask_token_prob=obj.mask_token_prob,
      max_predictions=obj.max_predictions)
  gen_logits = model.apply(variables, masked.input_ids, batch['token_type_ids'],
                           batch['attention_mask'], masked.positions, deterministic,
                           rngs={'dropout': gen_rng}, method=model.generator_logits)
  mlm_loss, mlm_metrics = objective.mlm_loss(gen_logits, masked)

  sampled = objective.sample_tokens(sample_rng, gen_logits, obj.temperature)
  corrupted, is_replaced = objective.corrupt(batch['input_ids'], masked, sampled)
  disc_logits = model.apply(variables, corrupted, batch['token_type_ids'],
                            batch['attention_mask'], deterministic,
                            rngs={'dropout': disc_rng}, method=model.discriminator_logits)
  disc_loss, disc_metrics = objective.discriminator_loss(disc_logits, is_replaced,
                                                         batch['attention_mask'])
  metrics = {**mlm_metrics, **disc_metrics,
             'sampled_accuracy': objective.sampled_accuracy(sampled, masked)}
  return mlm_loss, disc_loss, metrics


def make_train_step(config: ml_collections.ConfigDict, model: ElectraPretrainingModel,
                    tx: optax.GradientTransformation,
                    obj: Objective) -> Callable[[TrainState, Batch], tuple[TrainState, Metrics]]:
  """The whole replaced-token-detection update as one function of (state, batch)."""
  schedule = optim.learning_rate_schedule(config)
  rules = config.mesh.logical_axis_rules

  def loss_fn(params, batch, rng):
    mlm_loss, disc_loss, metrics = pretraining_losses(params, batch, rng, model=model, obj=obj)
    loss = obj.gen_weight * mlm_loss + obj.disc_weight * disc_loss
    return loss, {**metrics, 'loss': loss}

  def train_step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
    # Every draw (masking, dropout, sampling) derives from (seed, step), so a
    # resumed run repeats the uninterrupted one exactly.
    rng = jax.random.fold_in(jax.random.key(config.seed), state.step)
    with nn.logical_axis_rules(rules):
      grads, metrics = jax.grad(loss_fn, has_aux=True)(state.params, batch, rng)
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics['grad_norm'] = optax.tree.norm(grads)
    metrics['learning_rate'] = schedule(state.step)
    return TrainState(step=state.step + 1, params=params, opt_state=opt_state), metrics

  return train_step


def compile_train_step(train_step: Callable, state: TrainState, state_shardings: Any,
                       batch_sharding: NamedSharding, config: ml_collections.ConfigDict):
  """jit with explicit shardings and a donated state, compiled ahead of time."""
  replicated = NamedSharding(batch_sharding.mesh, PartitionSpec())
  jitted = jax.jit(train_step, in_shardings=(state_shardings, batch_sharding),
                   out_shardings=(state_shardings, replicated), donate_argnums=(0,))
  batch_shape = jax.ShapeDtypeStruct((config.batch_size, config.max_seq_length), jnp.int32,
                                     sharding=batch_sharding)
  abstract_batch = {k: batch_shape for k in ('input_ids', 'attention_mask', 'token_type_ids')}
  return jitted.lower(state, abstract_batch).compile()


def setup_train_step(config: ml_collections.ConfigDict, mesh: jax.sharding.Mesh,
                     special: objective.SpecialIds) -> tuple[TrainState, Any, NamedSharding, float]:
  """Model, optimizer, sharded initial state and the compiled step, under `mesh`.

  Returns (state, compiled train step, batch sharding, compile seconds).
  """
  model = build_model(config)
  tx = optim.create_optimizer(config)
  state, state_shardings = create_train_state(config, model, tx, mesh)
  batch_sharding = sharding.batch_sharding(mesh, config.mesh.logical_axis_rules)
  start = time.perf_counter()
  train_step = make_train_step(config, model, tx, Objective.from_config(config, special))
  step = compile_train_step(train_step, state, state_shardings, batch_sharding, config)
  return state, step, batch_sharding, time.perf_counter() - start


# --- Loop ----------------------------------------------------------------------


class _ThroughputMeter:
  """Step time, tokens/s and examples/s between two log points."""

  def __init__(self, step: int, tokens_per_step: int, examples_per_step: int):
    self._step, self._time = step, time.perf_counter()
    self._tokens, self._examples = tokens_per_step, examples_per_step

  def measure(self, step: int) -> dict[str, float]:
    now = time.perf_counter()
    steps, seconds = step - self._step, now - self._time
    self._step, self._time = step, now
    return {'step_time_s': seconds / steps,
            'tokens_per_s': steps * self._tokens / seconds,
            'examples_per_s': steps * self._examples / seconds}


def _window_mean(window: list[Metrics]) -> dict[str, float]:
  fetched = jax.device_get(window)
  return {k: float(np.mean([m[k] for m in fetched])) for k in fetched[0]}


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> TrainState:
  """Pretrains ELECTRA as `config` says; logs, TensorBoard and checkpoints go to `workdir`."""
  # --- Config
  config_lib.validate(config)
  os.makedirs(workdir, exist_ok=True)
  logging.info('Config:\n%s', config)

  # --- Mesh
  mesh = sharding.make_mesh(config.mesh)
  batch_ways = mesh.shape['data'] * mesh.shape['fsdp']
  if config.batch_size % batch_ways:
    raise config_lib.ConfigError(
        f'config.batch_size: {config.batch_size} does not split over the {batch_ways} '
        'data x fsdp devices; use a multiple of it')
  logging.info('Mesh %s over %d devices (%s), %d processes', dict(mesh.shape),
               jax.device_count(), jax.devices()[0].platform, jax.process_count())

  # --- Input
  data = pipeline.prepared_data(config, workdir)
  logging.info('Input: %d examples of %d tokens in %s', data.num_examples,
               data.max_seq_length, data.directory)
  batches = pipeline.train_iterator(data, config, process_index=jax.process_index(),
                                    process_count=jax.process_count())

  with jax.set_mesh(mesh):
    # --- Model, state and train step
    state, train_step, batch_sharding, compile_s = setup_train_step(config, mesh,
                                                                    data.special_ids)
    logging.info('Parameters: %s', parameter_counts(state.params))
    logging.info('Compiled the train step in %.1f s', compile_s)

    # --- Checkpoint
    manager = checkpointing.create_manager(workdir, config)
    restored = checkpointing.restore_latest(manager, state)
    if restored is not None:
      state, input_position = restored
      batches.set_state(input_position)
      logging.info('Resumed at step %d; the input continues at %s', int(state.step),
                   input_position)

    # --- Loop
    writer = metric_writer.MetricWriter(workdir)
    first_step = int(state.step)
    meter = _ThroughputMeter(first_step, config.batch_size * config.max_seq_length,
                             config.batch_size)
    window: list[Metrics] = []
    pending: tuple[int, list[Metrics]] | None = None  # Logged one step late.
    for step in range(first_step, config.num_train_steps):
      batch = sharding.make_global_batch(next(batches), batch_sharding)
      state, metrics = train_step(state, batch)
      window.append(metrics)
      if pending is not None:
        # Reading step N-1's metrics now lets step N run meanwhile.
        writer.write(pending[0], {**_window_mean(pending[1]), **meter.measure(pending[0])})
        pending = None
      done = step + 1
      if done % config.log_every_steps == 0 or done == config.num_train_steps:
        pending, window = (done, window), []
      checkpointing.save(manager, done, state, batches, force=done == config.num_train_steps)
    if pending is not None:
      writer.write(pending[0], {**_window_mean(pending[1]), **meter.measure(pending[0])})
    manager.wait_until_finished()
    manager.close()
    writer.close()
    batches.close()
  return state
