"""Linear probes on a frozen discriminator: how much of a GLUE task each layer holds.

Fine-tuning gains show only after much pretraining, and small fine-tuning sets
make them noisy. A probe asks a cheaper question earlier: did pretraining put
what the task needs into the network's features, and in which layer? For the
embeddings (after the projection to the hidden size) and each layer's output,
it fits a ridge classifier (ridge regression for STS-B) on the training split,
once on the [CLS] vector and once on the mean over the tokens, and scores the
dev split with the task's GLUE metrics. The ridge penalty is picked per probe
by exact leave-one-out error on the training split, so nothing is tuned on dev.
Beside each probe goes the features' effective rank, about the number of
directions along which the texts differ: near 1 the layer has collapsed, every
text differing from the others along one line only.

Data settings (max_seq_length, max_train_examples, seed, eval_batch_size, mesh)
come from configs/finetune.py, as fine-tuning reads them; with
config.random_init the same architecture is probed at its random
initialisation, the baseline a pretrained model must beat.
"""

import dataclasses
from typing import Any

from absl import logging
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from electra_jax import model, sharding
from electra_jax.config_lib import EncoderConfig
from electra_jax.finetune import features, squad, tagging, tasks
from electra_jax.finetune import train as finetune_train

POOLINGS = ('cls', 'mean')
# Penalties tried, as multiples of the number of training rows (features are
# standardised, so X^T X grows with the rows).
_PENALTY_GRID = np.logspace(-5, 2, 15)


# --- Ridge with leave-one-out penalty selection -------------------------------------------


@dataclasses.dataclass
class RidgeProbe:
  """A fitted linear map: standardised features -> targets."""

  mean: np.ndarray
  scale: np.ndarray
  weights: np.ndarray  # [features, outputs]
  bias: np.ndarray  # [outputs]
  penalty: float  # The chosen penalty, as a multiple of the training rows.
  loo_errors: np.ndarray  # Leave-one-out mean squared error for each penalty tried.

  def predict(self, x: np.ndarray) -> np.ndarray:
    return ((x - self.mean) / self.scale) @ self.weights + self.bias


def fit_ridge(
  x: np.ndarray, targets: np.ndarray, penalties: np.ndarray = _PENALTY_GRID
) -> RidgeProbe:
  """Ridge regression of `targets` [N, outputs] on `x` [N, features], with an
  unpenalised intercept and the penalty (times N) from `penalties` that
  minimises the exact leave-one-out squared error.

  One eigendecomposition of X^T X serves every penalty. For a linear smoother
  with hat matrix H, the leave-one-out residual is r_i / (1 - H_ii); the
  intercept adds 1/N to each H_ii.
  """
  x = np.asarray(x, np.float64)
  targets = np.asarray(targets, np.float64)
  n = len(x)
  mean = x.mean(0)
  # Constant features (the [CLS] embedding, say) stay zero instead of dividing by 0.
  std = x.std(0)
  scale = np.where(std > 1e-8, std, 1.0)
  xs = (x - mean) / scale
  bias = targets.mean(0)
  centred = targets - bias
  eigenvalues, eigenvectors = np.linalg.eigh(xs.T @ xs)
  rotated = xs @ eigenvectors  # [N, features]
  projected = rotated.T @ centred  # [features, outputs]
  shrinks = [1.0 / (np.maximum(eigenvalues, 0.0) + penalty * n) for penalty in penalties]
  loo_errors = []
  for shrink in shrinks:
    fitted = rotated @ (shrink[:, None] * projected)
    leverage = np.square(rotated) @ shrink + 1.0 / n
    loo_errors.append(np.mean(np.square((centred - fitted) / (1.0 - leverage)[:, None])))
  best = int(np.argmin(loo_errors))
  weights = eigenvectors @ (shrinks[best][:, None] * projected)
  return RidgeProbe(mean, scale, weights, bias, float(penalties[best]), np.array(loo_errors))


def effective_rank(x: np.ndarray) -> float | None:
  """How many directions the rows of `x` [N, features] differ along: the
  effective rank of Roy and Vetterli (2007), exp of the entropy of the centred
  rows' singular values normalised to sum to 1, as RankMe (Garrido et al.
  2023) reads an encoder's features. k orthogonal directions of equal spread
  give k, rows on one line give 1.0; None where the rows do not vary (the [CLS]
  embedding). Unlike the probes, it reads the features unstandardised, as the
  next layer does."""
  centred = np.asarray(x, np.float64) - np.mean(x, axis=0, dtype=np.float64)
  singular = np.linalg.svd(centred, compute_uv=False)
  if singular.sum() == 0:
    return None
  shares = singular[singular > 0] / singular.sum()
  return float(np.exp(-np.sum(shares * np.log(shares))))


def _ridge_targets(task: tasks.Task, labels: np.ndarray) -> np.ndarray:
  """Fine-tuning's targets as columns: one-hot classes, or the scaled score;
  task.predictions reads the probe's outputs back."""
  targets = task.targets(labels)
  return targets[:, None] if task.is_regression else np.eye(task.num_outputs)[targets]


# --- Features -------------------------------------------------------------------------------


class LayerFeatures(nn.Module):
  """The discriminator's embeddings and layers, pooled per layer: [B, layers + 1,
  2 (cls, mean), H]. Parameter names are the pretraining tree's."""

  cfg: EncoderConfig

  @nn.compact
  def __call__(
    self, input_ids: jax.Array, token_type_ids: jax.Array, attention_mask: jax.Array
  ) -> jax.Array:
    embedded = model.Embeddings(self.cfg, name='embeddings')(input_ids, token_type_ids, True)
    hidden = model.Encoder(self.cfg, name='discriminator')(
      embedded, attention_mask, True, all_layers=True
    )
    hidden = hidden.astype(jnp.float32)  # [layers + 1, B, L, H]
    mask = attention_mask.astype(jnp.float32)[None, :, :, None]
    mean = (hidden * mask).sum(2) / mask.sum(2)
    return jnp.stack([hidden[:, :, 0], mean], axis=2).transpose(1, 0, 2, 3)


def layer_features(
  config: ml_collections.ConfigDict,
  cfg: EncoderConfig,
  params: dict[str, Any] | None,
  data: dict[str, features.Features],
) -> dict[str, np.ndarray]:
  """Each split's pooled features [N, layers + 1, 2, H] from the encoder's
  `params` ({'embeddings', 'discriminator'}), or from a random initialisation
  drawn with config.seed where `params` is None."""
  module = LayerFeatures(cfg)
  rules = config.mesh.logical_axis_rules
  mesh = sharding.make_mesh(config.mesh)
  ids = jnp.zeros((1, config.max_seq_length), jnp.int32)
  init = lambda rng: module.init(rng, ids, ids, ids + 1)['params']
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    shardings = sharding.logical_to_shardings(jax.eval_shape(init, jax.random.key(0)), mesh, rules)
    if params is None:
      params = sharding.init_into(init, jax.random.key(config.seed), shardings)
    else:
      params = jax.device_put(params, shardings)
    batch_sharding = sharding.batch_sharding(mesh, rules)
    apply = jax.jit(
      lambda p, b: module.apply(
        {'params': p}, b['input_ids'], b['token_type_ids'], b['attention_mask']
      ),
      in_shardings=(shardings, batch_sharding),
    )
    return {
      split: finetune_train.predict_outputs(
        apply, params, feats, config.eval_batch_size, batch_sharding, config.trim_padding
      )
      for split, feats in data.items()
    }


# --- The probes ------------------------------------------------------------------------------


def probe(config: ml_collections.ConfigDict, files: tasks.TaskFiles, init: str) -> dict[str, Any]:
  """Dev metrics of a ridge probe per layer and pooling: results['probes'] is a
  list of {layer, pooling, penalty, effective_rank, dev: {split: {metric:
  value}}}, layer 0 being the embeddings, the rank read on the training split."""
  finetune_train.validate(config)
  task = files.task
  if isinstance(task, (tagging.TaggingTask, squad.SquadTask)):
    raise finetune_train.FinetuneError(
      f'--task={task.name}: the probes read one vector per text; they fit sentence tasks only'
    )
  source = finetune_train.load_source(config, init)
  finetune_train.check_length(task, config, source.discriminator_cfg)
  data = finetune_train.load_task_data(files, source.tokenizer, config, with_test=False)
  logging.info(
    '%s: %d training examples, from %s%s',
    task.name,
    len(data.train_reference),
    init,
    ' (random initialisation)' if config.random_init else '',
  )
  params = None if config.random_init else source.discriminator_params()
  feats = layer_features(
    config,
    source.discriminator_cfg,
    params,
    {'train': data.train, **{s: f for s, (f, _) in data.dev.items()}},
  )
  targets = _ridge_targets(task, data.train_reference)
  probes = []
  for layer in range(source.discriminator_cfg.num_layers + 1):
    for p, pooling in enumerate(POOLINGS):
      train = feats['train'][:, layer, p]
      fitted = fit_ridge(train, targets)
      predict = lambda split: task.predictions(fitted.predict(feats[split][:, layer, p]))
      dev = {
        split: tasks.score(task, labels, predict(split)) for split, (_, labels) in data.dev.items()
      }
      probes.append(
        {
          'layer': layer,
          'pooling': pooling,
          'penalty': fitted.penalty,
          'effective_rank': effective_rank(train),
          'dev': dev,
        }
      )
  return {
    'task': task.name,
    'init': init,
    'random_init': config.random_init,
    'pretraining_step': source.step,
    'train_examples': len(data.train_reference),
    'probes': probes,
  }


def results_table(results: dict[str, Any]) -> str:
  """One row per layer; one column per pooling, split and metric, then each
  pooling's effective rank."""
  first = results['probes'][0]['dev']
  columns = [
    (pooling, split, metric) for pooling in POOLINGS for split in first for metric in first[split]
  ]
  by_key = {(r['layer'], r['pooling']): r for r in results['probes']}
  header = (
    ['layer']
    + [f'{pooling} {split} {metric}' for pooling, split, metric in columns]
    + [f'{pooling} effective rank' for pooling in POOLINGS]
  )
  rank = lambda r: '-' if r['effective_rank'] is None else f'{r["effective_rank"]:.1f}'
  layers = sorted({r['layer'] for r in results['probes']})
  rows = [
    [('embeddings' if layer == 0 else str(layer))]
    + [f'{by_key[layer, pooling]["dev"][split][metric]:.4f}' for pooling, split, metric in columns]
    + [rank(by_key[layer, pooling]) for pooling in POOLINGS]
    for layer in layers
  ]
  widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
  return '\n'.join(
    '  '.join(cell.rjust(w) for cell, w in zip(row, widths)) for row in [header, *rows]
  )
