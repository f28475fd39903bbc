"""Fine-tuning a pretrained network on one task, over several seeds. The network is
the one a pretraining objective keeps (objectives.py): ELECTRA's discriminator, or
the MLM family's full-size network.

Sections, in the order they run: config, model and data, then per seed:
state, train step, loop with per-epoch dev evaluation, test predictions; last,
the summary over seeds (each seed and the median, as the paper reports, beside
what a constant answer scores).
"""

from collections.abc import Callable
import dataclasses
import json
import os
import statistics
import time
from typing import Any

from absl import logging
from etils import epath
import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import ml_collections
import numpy as np
import optax

from configs import finetune as finetune_configs
from electra_jax import (
  config_lib,
  errors,
  loop,
  metric_writer,
  optim,
  pretrained,
  sharding,
  storage,
)
from electra_jax.finetune import features, resume, tasks

Features = features.Features
# What the predict step reads; the train step also reads 'targets'. A task's
# other features (tagging's word starts, SQuAD's character offsets) are for
# decoding on the host and never go to the devices.
MODEL_INPUTS = ('input_ids', 'token_type_ids', 'attention_mask')


class FinetuneError(errors.UserError):
  """The request cannot be carried out; the message names the input and the fix."""


# --- Config ---------------------------------------------------------------------------


def validate(config: ml_collections.ConfigDict) -> None:
  """Raises ConfigError naming the first bad key."""
  for key in ('batch_size', 'eval_batch_size', 'max_seq_length', 'num_seeds', 'log_every_steps'):
    config_lib.require(
      isinstance(config[key], int) and config[key] > 0,
      key,
      f'must be a positive integer, got {config[key]!r}',
    )
  checks = (
    ('learning_rate', config.learning_rate > 0, 'must be > 0'),
    ('layerwise_lr_decay', 0 < config.layerwise_lr_decay <= 1, 'must be in (0, 1]'),
    ('weight_decay', config.weight_decay >= 0, 'must be >= 0'),
    ('warmup_fraction', 0 <= config.warmup_fraction < 1, 'must be in [0, 1)'),
    ('max_train_examples', config.max_train_examples >= 0, 'must be >= 0 (0: all)'),
    (
      'num_train_epochs',
      config.num_train_epochs is None or config.num_train_epochs > 0,
      'must be > 0, or None for the task default',
    ),
    ('max_seq_length', config.max_seq_length >= 8, 'must be >= 8'),
    (
      'length_grouped_batches',
      isinstance(config.length_grouped_batches, int) and config.length_grouped_batches >= 0,
      'must be an integer >= 0 (0: off)',
    ),
    (
      'length_grouped_batches',
      not config.length_grouped_batches or config.trim_padding,
      'saves time only with trim_padding=True, which is off; set both, or 0',
    ),
    ('checkpoint.every_minutes', config.checkpoint.every_minutes >= 0, 'must be >= 0 (0: off)'),
    (
      'model.scan_unroll',
      isinstance(config.model.scan_unroll, int) and config.model.scan_unroll >= 1,
      'must be a positive integer',
    ),
  )
  for key, ok, message in checks:
    config_lib.require(ok, key, f'{message}, got {config[key]!r}')


def epochs_for(config: ml_collections.ConfigDict, task: tasks.Task) -> float:
  if config.num_train_epochs is not None:
    return config.num_train_epochs
  return config.task_epochs.get(task.name, config.default_epochs)


def train_steps(epochs: float, num_train: int, batch_size: int) -> tuple[int, int]:
  """(steps per epoch, steps in all). An epoch is one pass over a fresh permutation
  in full batches (the last num_train % batch_size examples of each sit it out), so
  that whole epochs end on an evaluation and no step spills into one more."""
  per_epoch = num_train // batch_size
  return per_epoch, max(1, int(epochs * per_epoch))


# --- Data -----------------------------------------------------------------------------


def load_source(config: ml_collections.ConfigDict, init: str) -> pretrained.Pretrained:
  """The model in `init`, with config.model's runtime settings, checked to have a
  tokenizer of its own vocabulary size (check_length checks its positions)."""
  source = pretrained.load(
    init,
    dtype=config.model.dtype,
    dropout_rate=config.model.dropout_rate,
    attention_dropout_rate=config.model.attention_dropout_rate,
    attention_impl=config.model.attention_impl,
    remat_policy=config.model.remat_policy,
    scan_unroll=config.model.scan_unroll,
  )
  cfg = source.discriminator_cfg
  if source.tokenizer is None:
    raise FinetuneError(f'--init={init}: has no tokenizer (an HF directory needs vocab.txt)')
  if source.tokenizer.vocab_size != cfg.vocab_size:
    raise FinetuneError(
      f'--init={init}: the tokenizer has {source.tokenizer.vocab_size} ids '
      f'but the model {cfg.vocab_size}; the checkpoint and its vocabulary '
      'do not belong together'
    )
  return source


def check_length(task: tasks.Task, config: ml_collections.ConfigDict, cfg) -> None:
  """Refuses inputs longer than the model's position embeddings."""
  key, length = task.sequence_length(config)
  if length > cfg.max_position_embeddings:
    raise config_lib.ConfigError(
      f"{key}: {length} exceeds the model's {cfg.max_position_embeddings} positions"
    )


@dataclasses.dataclass
class TaskData:
  train: Features  # With 'targets': what the task's loss compares the outputs with.
  train_reference: Any  # The training examples as the task scores them (labels, sentences).
  dev: dict[str, tuple[Features, Any]]  # split -> (features, task.reference of its examples)
  test: dict[str, tuple[Features, Any]]  # split -> (features, its examples)


def load_task_data(
  files: tasks.TaskFiles, tokenizer, config, *, with_test: bool = True
) -> TaskData:
  """Reads and encodes the task's splits; a missing test file only skips predictions."""
  task = files.task
  _, length = task.sequence_length(config)
  train = files.read('train')
  if config.max_train_examples and len(train) > config.max_train_examples:
    # A seeded subset, so that every run with this config trains on the same one.
    train = train.subset(
      np.sort(
        np.random.default_rng(config.seed).permutation(len(train))[: config.max_train_examples]
      )
    )
  train_features, train_reference = task.encode(train, tokenizer, length), task.reference(train)
  if task.symmetric and config.double_unordered:
    swapped = task.encode(train, tokenizer, length, swap=True)
    train_features = {k: np.concatenate([v, swapped[k]]) for k, v in train_features.items()}
    train_reference = np.concatenate([train_reference, train_reference])
  dev = {}
  for split in task.dev_splits:
    examples = files.read(split)
    dev[split] = (task.encode(examples, tokenizer, length), task.reference(examples))
  test = {}
  for split, _ in task.test_splits if with_test else ():
    if not epath.Path(files.paths[split]).exists():
      logging.warning('%s is missing: no test predictions for it', files.paths[split])
      continue
    examples = files.read(split)
    test[split] = (task.encode(examples, tokenizer, length), examples)
  return TaskData(train_features, train_reference, dev, test)


# --- Model and state --------------------------------------------------------------------


@dataclasses.dataclass
class _Programs:
  """What every seed shares: the model, shardings, optimizer and compiled steps."""

  model: nn.Module
  shardings: Any
  batch_sharding: NamedSharding
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  steps_per_epoch: int
  num_steps: int
  train: Callable | None = None  # Compiled on first use (needs the optimizer state's layout).
  predict: Callable | None = None


def _programs(
  config, task: tasks.Task, source: pretrained.Pretrained, mesh, num_train: int
) -> _Programs:
  model = task.head(source.discriminator_cfg, config.model.head_dropout_rate)
  rules = config.mesh.logical_axis_rules
  with nn.logical_axis_rules(rules):
    boxed = jax.eval_shape(_init_fn(model, config), jax.random.key(0))
  shardings = sharding.logical_to_shardings(boxed, mesh, rules)
  per_epoch, num_steps = train_steps(epochs_for(config, task), num_train, config.batch_size)
  schedule = optim.linear_warmup_decay(
    config.learning_rate, int(config.warmup_fraction * num_steps), num_steps
  )
  scales = optim.layerwise_lr_scales(
    nn.meta.unbox(boxed),
    source.discriminator_cfg.num_layers,
    config.layerwise_lr_decay,
    released_off_by_one=config.layerwise_decay_released_off_by_one,
  )
  tx = optim.create_optimizer(config, schedule=schedule, lr_scales=scales)
  return _Programs(
    model, shardings, sharding.batch_sharding(mesh, rules), tx, schedule, per_epoch, num_steps
  )


def _init_fn(model: nn.Module, config) -> Callable:
  ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
  return lambda rng: model.init({'params': rng}, ids, ids, ids + 1)['params']


def _init_params(config, programs: _Programs, source: pretrained.Pretrained, seed: int) -> Any:
  """The pretrained encoder (unless random_init) and a freshly drawn head, in
  their shardings."""
  init = _init_fn(programs.model, config)
  with nn.logical_axis_rules(config.mesh.logical_axis_rules):
    params = sharding.init_into(init, jax.random.key(seed), programs.shardings)
  if not config.random_init:
    encoder = source.discriminator_params()
    params = {**params, **jax.device_put(encoder, {k: programs.shardings[k] for k in encoder})}
  return params


# --- Steps --------------------------------------------------------------------------------


def _compile_steps(config, task: tasks.Task, programs: _Programs, opt_shardings: Any) -> None:
  model, tx, rules = programs.model, programs.tx, config.mesh.logical_axis_rules
  replicated = NamedSharding(programs.batch_sharding.mesh, PartitionSpec())

  def train_step(params, opt_state, batch, seed, step):
    # Dropout: a new draw at every step of every seed.
    rng = jax.random.fold_in(jax.random.key(seed), step)

    def loss_fn(p):
      with nn.logical_axis_rules(rules):
        outputs = task.apply(model, p, batch, train=True, rngs={'dropout': rng})
      return task.loss(outputs, batch['targets'], batch['attention_mask'])

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  def predict_step(params, batch):
    with nn.logical_axis_rules(rules):
      return task.apply(model, params, batch, train=False)

  programs.train = jax.jit(
    train_step,
    donate_argnums=(0, 1),
    in_shardings=(
      programs.shardings,
      opt_shardings,
      programs.batch_sharding,
      replicated,
      replicated,
    ),
    out_shardings=(programs.shardings, opt_shardings, replicated),
  )
  programs.predict = jax.jit(
    predict_step,
    in_shardings=(programs.shardings, programs.batch_sharding),
    out_shardings=replicated,
  )


def predict_outputs(
  predict: Callable,
  params: Any,
  data: Features,
  batch_size: int,
  batch_sharding: NamedSharding,
  trim: bool = False,
) -> Any:
  """Model outputs for every row (an array, or a tree of them); the last batch is
  padded to full size and cut. `trim` cuts each batch's padding
  (features.trim_padding)."""
  outputs = []
  n, length = data['input_ids'].shape
  for start in range(0, n, batch_size):
    rows = {k: data[k][start : start + batch_size] for k in MODEL_INPUTS}
    pad = batch_size - len(rows['input_ids'])
    rows = {k: np.pad(v, [(0, pad)] + [(0, 0)] * (v.ndim - 1)) for k, v in rows.items()}
    if trim:
      rows = features.trim_padding(rows)
    out = jax.device_get(predict(params, sharding.make_global_batch(rows, batch_sharding)))
    if isinstance(out, np.ndarray) and out.ndim == 3:
      # Per-token outputs of a trimmed batch: padded back to full length.
      out = np.pad(out, ((0, 0), (0, length - out.shape[1]), (0, 0)))
    outputs.append(out)
  return jax.tree.map(lambda *batches: np.concatenate(batches)[:n], *outputs)


# --- One seed -------------------------------------------------------------------------------


def run_seed(
  config,
  task: tasks.Task,
  source: pretrained.Pretrained,
  data: TaskData,
  programs: _Programs,
  seed: int,
  workdir: str,
  checkpoint: resume.SeedCheckpoint,
  progress: loop.Progress,
) -> dict[str, Any]:
  """Trains from `source` with `seed`, or goes on from `checkpoint`; returns dev
  metrics per split (and per epoch), and writes the test predictions files (the
  task's write_predictions). `progress` hears of each log step."""
  params = _init_params(config, programs, source, seed)
  opt_state = jax.jit(programs.tx.init)(params)
  if programs.train is None:
    _compile_steps(config, task, programs, jax.tree.map(lambda x: x.sharding, opt_state))
  step, history = 0, []  # history: the dev results of each finished epoch.
  restored = checkpoint.restore({'params': params, 'opt_state': opt_state})
  if restored is not None:
    step, state, history = restored
    params, opt_state = state['params'], state['opt_state']
    logging.info('seed %d: resumed at step %d of %d', seed, step, programs.num_steps)
  batch_size = config.batch_size
  out_dir = _seed_dir(workdir, seed)
  writer = metric_writer.MetricWriter(out_dir)

  def outputs(feats: Features) -> Any:
    return predict_outputs(
      programs.predict,
      params,
      feats,
      config.eval_batch_size,
      programs.batch_sharding,
      config.trim_padding,
    )

  dev_outputs = {}

  def evaluate() -> dict[str, dict[str, float]]:
    dev_outputs.update({split: outputs(feats) for split, (feats, _) in data.dev.items()})
    return {
      split: task.evaluate(dev_outputs[split], feats, reference)
      for split, (feats, reference) in data.dev.items()
    }

  per_epoch, losses, start = programs.steps_per_epoch, [], time.perf_counter()
  lengths = data.train['attention_mask'].sum(axis=-1)
  try:
    for epoch in range(len(history), -(-programs.num_steps // per_epoch)):
      order = features.epoch_order(seed, epoch, lengths, batch_size, config.length_grouped_batches)
      first = epoch * per_epoch  # A resumed seed starts mid-epoch.
      while step < min(first + per_epoch, programs.num_steps):
        rows = order[(step - first) * batch_size :][:batch_size]
        batch = {k: data.train[k][rows] for k in (*MODEL_INPUTS, 'targets')}
        if config.trim_padding:
          batch = features.trim_padding(batch)
        params, opt_state, loss = programs.train(
          params,
          opt_state,
          sharding.make_global_batch(batch, programs.batch_sharding),
          np.int32(seed),
          np.int32(step),
        )
        losses.append(loss)
        step += 1
        if step % config.log_every_steps == 0 or step == programs.num_steps:
          mean_loss = float(np.mean(jax.device_get(losses)))  # Waits for the steps.
          seconds = time.perf_counter() - start
          writer.write(
            step,
            {
              'loss': mean_loss,
              'learning_rate': float(programs.schedule(step)),
              'examples_per_s': len(losses) * batch_size / seconds,
            },
            prefix='finetune',
          )
          progress.update(step)
          losses, start = [], time.perf_counter()
        checkpoint.step_done(
          step, programs.num_steps, {'params': params, 'opt_state': opt_state}, history
        )
      history.append(evaluate())
      for split, values in history[-1].items():
        writer.write(step, values, prefix=f'dev/{split}')
  finally:
    writer.close()

  for split, name in task.dev_predictions:
    feats, reference = data.dev[split]
    task.write_predictions(os.path.join(out_dir, name), dev_outputs[split], feats, reference)
  for split, submission_name in task.test_splits:
    if split in data.test:
      feats, examples = data.test[split]
      task.write_predictions(
        os.path.join(out_dir, submission_name), outputs(feats), feats, examples
      )
  return {'dev': history[-1], 'dev_per_epoch': history, 'steps': programs.num_steps}


# --- All seeds -------------------------------------------------------------------------------


def finetune(
  config: ml_collections.ConfigDict, files: tasks.TaskFiles, init: str, workdir: str
) -> dict[str, Any]:
  """Fine-tunes `init` on the task for config.num_seeds seeds; writes
  WORKDIR/results.json, per-seed TensorBoard logs and submission files, and
  returns the results."""
  validate(config)
  task = files.task
  source = load_source(config, init)
  check_length(task, config, source.discriminator_cfg)
  hidden_size = source.discriminator_cfg.hidden_size
  if hidden_size != finetune_configs.HIDDEN_SIZE[config.size]:
    logging.warning(
      'The model has hidden size %d, but the %s hyperparameters are for %d; '
      'pass --config=configs/finetune.py:SIZE for the matching size',
      hidden_size,
      config.size,
      finetune_configs.HIDDEN_SIZE[config.size],
    )
  epath.Path(workdir).mkdir(parents=True, exist_ok=True)
  data = load_task_data(files, source.tokenizer, config)
  n = len(data.train['input_ids'])
  if n < config.batch_size:
    raise FinetuneError(
      f'config.batch_size: {config.batch_size} exceeds the {n} training examples; lower it'
    )
  mesh = sharding.make_mesh(config.mesh)
  config_lib.require_backend(config)
  logging.info(
    '%s: %d training examples, %s epochs, from %s%s',
    task.name,
    n,
    epochs_for(config, task),
    init,
    ' (random initialisation)' if config.random_init else '',
  )

  run_key = _run_key(config, files, init, source)
  per_seed = {}
  saves = resume.Saves(config)
  try:
    with jax.set_mesh(mesh):
      programs = _programs(config, task, source, mesh, n)
      seeds = range(config.seed, config.seed + config.num_seeds)
      for seed in seeds:
        per_seed[seed] = _finished_seed(workdir, seed, run_key)
        if per_seed[seed] is not None:
          resume.remove(_seed_dir(workdir, seed))
      to_train = [seed for seed in seeds if per_seed[seed] is None]
      for i, seed in enumerate(to_train):
        seed_dir = _seed_dir(workdir, seed)
        checkpoint = resume.SeedCheckpoint(seed_dir, run_key, saves)
        progress = loop.Progress(
          programs.num_steps,
          every_seconds=config.progress_every_seconds,
          per_step=config.batch_size,
          unit='examples',
          label=f'seed {seed}',
          later_steps=(len(to_train) - 1 - i) * programs.num_steps,
        )
        try:
          per_seed[seed] = run_seed(
            config, task, source, data, programs, seed, workdir, checkpoint, progress
          )
        finally:
          checkpoint.close()
        _write_json(_seed_file(workdir, seed), {**run_key, 'result': per_seed[seed]})
        resume.remove(seed_dir)
        logging.info('seed %d: %s', seed, dev_summary(per_seed[seed]['dev']))
  finally:
    saves.close()
  median = {
    split: {
      metric: statistics.median(r['dev'][split][metric] for r in per_seed.values())
      for metric in task.metrics
    }
    for split in task.dev_splits
  }
  # The line a model must clear to have learned anything from its input: on a task
  # as skewed as CoLA or MRPC, the majority label already scores MCC 0 or F1 0.81.
  constant = task.constant_baseline(
    data.train_reference, {split: reference for split, (_, reference) in data.dev.items()}
  )
  results = {
    'task': task.name,
    'data': files.paths,
    'init': init,
    'random_init': config.random_init,
    'pretraining_step': source.step,
    'seeds': per_seed,
    'median': median,
    'constant_baseline': constant,
    'config': json.loads(config.to_json_best_effort()),
  }
  _write_json(os.path.join(workdir, 'results.json'), results)
  return results


def _run_key(
  config: ml_collections.ConfigDict,
  files: tasks.TaskFiles,
  init: str,
  source: pretrained.Pretrained,
) -> dict[str, Any]:
  """What makes a seed's result, or its checkpoint, reusable by a rerun: the same
  data, model and settings, but for settings that do not change a seed's result."""
  if config.random_init:
    # Only the checkpoint's shapes and vocabulary reach a random initialisation, so
    # any checkpoint of the same architecture and tokenizer may supply them.
    model = {
      'architecture': dataclasses.asdict(source.discriminator_cfg),
      'tokenizer': source.tokenizer.spec(),
    }
  else:
    model = {'init': init, 'pretraining_step': source.step}
  return {
    'data': files.paths,
    **model,
    'config': _result_settings(json.loads(config.to_json_best_effort())),
  }


# Settings that change how a run goes but not what a seed learns: a rerun that
# changes only these reuses the finished seeds and resumes an unfinished one.
_RESULT_NEUTRAL_KEYS = ('num_seeds', 'log_every_steps', 'progress_every_seconds', 'checkpoint')


def _result_settings(config: dict[str, Any]) -> dict[str, Any]:
  """The config as a seed's result depends on it (a JSON dict)."""
  return {k: v for k, v in config.items() if k not in _RESULT_NEUTRAL_KEYS}


def _seed_dir(workdir: str, seed: int) -> str:
  return os.path.join(workdir, f'seed_{seed}')


def _seed_file(workdir: str, seed: int) -> str:
  return os.path.join(_seed_dir(workdir, seed), 'result.json')


def _write_json(path: str, value: Any) -> None:
  # Written whole: a run killed mid-write leaves no half a file.
  storage.write_text(path, json.dumps(value, indent=1, default=float))


def _finished_seed(workdir: str, seed: int, run_key: dict[str, Any]) -> dict[str, Any] | None:
  """The result of `seed` from an earlier run of the same model and settings in
  `workdir` (one killed before the last seed finished), or None: then it runs."""
  path = _seed_file(workdir, seed)
  if not epath.Path(path).exists():
    return None
  saved = storage.read_json(path)
  # Files written before a key counted as neutral still hold it.
  saved['config'] = _result_settings(saved.get('config') or {})
  if {k: saved.get(k) for k in run_key} != json.loads(json.dumps(run_key, default=float)):
    logging.info('seed %d: %s comes from other settings; training it again', seed, path)
    return None
  logging.info('seed %d: finished by an earlier run, read from %s', seed, path)
  return saved['result']


def dev_summary(dev: dict[str, dict[str, float]]) -> str:
  """'dev f1=0.8791  dev accuracy=0.8284': each split's metrics, in the task's order."""
  return '  '.join(
    f'{split} {metric}={value:.4f}'
    for split, values in dev.items()
    for metric, value in values.items()
  )


def results_table(results: dict[str, Any]) -> str:
  """A readable table: one row per seed, the median, then what always giving the
  constant baseline's answer scores; one column per split and metric."""
  columns = [(split, metric) for split, values in results['median'].items() for metric in values]
  header = ['seed'] + [f'{split} {metric}' for split, metric in columns]
  rows = [
    [str(seed)] + [f'{r["dev"][s][m]:.4f}' for s, m in columns]
    for seed, r in results['seeds'].items()
  ]
  rows.append(['median'] + [f'{results["median"][s][m]:.4f}' for s, m in columns])
  constant = results['constant_baseline']
  rows.append(
    [f'always {constant["answer"]}'] + [f'{constant["dev"][s][m]:.4f}' for s, m in columns]
  )
  widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
  return '\n'.join(
    '  '.join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header, *rows]
  )
