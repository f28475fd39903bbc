"""Optimizer: AdamW with the released ELECTRA code's schedule and decay mask."""

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

# The released code excludes these from weight decay, by parameter name.
_NO_DECAY_NAMES = ('layer_norm', 'bias')


def linear_warmup_decay(peak: float, warmup_steps: int, total_steps: int) -> optax.Schedule:
  """Linear warmup times linear decay to 0, as the released code computes it.

  lr(step) = peak * min(1, step / warmup) * (1 - step / total): the decay runs
  from step 0, not from the end of warmup.
  """

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    warm = jnp.minimum(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    return peak * warm * jnp.maximum(0.0, 1.0 - step / total_steps)

  return schedule


def learning_rate_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
  """The pretraining schedule: config.warmup_steps, then decay to num_train_steps."""
  return linear_warmup_decay(config.learning_rate, config.warmup_steps, config.num_train_steps)


def applied_learning_rate(schedule: optax.Schedule, opt_state: Any) -> jax.Array:
  """The learning rate that the next update of `opt_state` applies: the schedule
  at the optimizer's own count, which a skipped (non-finite) step does not
  advance, unlike the train state's step."""
  in_schedule_state = lambda path, _: getattr(path[-1], 'tuple_name', '') == 'ScaleByScheduleState'
  return schedule(optax.tree.get(opt_state, 'count', filtering=in_schedule_state))


def layerwise_lr_scales(
  params: Any, num_layers: int, decay: float, *, released_off_by_one: bool = False
) -> Any:
  """Per-parameter learning-rate multipliers for layer-wise decay (ELECTRA, App. A).

  Depths count from the input: the embeddings (and embeddings_project) are
  0, encoder layer i is i + 1, the task head is num_layers + 1. A parameter
  at depth d gets decay ** (num_layers + 1 - d): the head the full rate, the
  embeddings the most decayed one. The released code computes
  decay ** (num_layers + 2 - d) for everything below the head, one extra
  factor of `decay` (released_off_by_one=True reproduces it).

  `params` is {'embeddings', 'discriminator', <head>}; scanned layers
  ('layers', stacked on axis 0) get one multiplier per layer, shaped to
  broadcast over the stacked parameter.
  """
  top = num_layers + 1
  extra = 1 if released_off_by_one else 0

  def scale(depth: int) -> float:
    return 1.0 if depth == top else decay ** (top - depth + extra)

  def for_leaf(path, leaf):
    names = [str(getattr(k, 'key', '')) for k in path]
    if names[0] == 'embeddings' or 'embeddings_project' in names:
      return np.float32(scale(0))
    if names[0] != 'discriminator':
      return np.float32(scale(top))
    if names[1] == 'layers':
      per_layer = np.array([scale(i + 1) for i in range(num_layers)], np.float32)
      return per_layer.reshape((num_layers,) + (1,) * (len(leaf.shape) - 1))
    return np.float32(scale(int(names[1].removeprefix('layer_')) + 1))

  return jax.tree_util.tree_map_with_path(for_leaf, params)


def scale_by_tree(scales: Any) -> optax.GradientTransformation:
  """Multiplies each update by its entry of `scales` (a tree shaped like the params)."""

  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u, s: u * s, updates, scales), state

  return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def weight_decay_mask(params: Any) -> Any:
  """True for parameters that get weight decay: not LayerNorm, not biases."""

  def decays(path, _):
    names = [str(getattr(k, 'key', '')) for k in path]
    return not any(part in name for name in names for part in _NO_DECAY_NAMES)

  return jax.tree_util.tree_map_with_path(
    decays, params, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata)
  )


class ScaleByAdamNoBiasCorrectionState(NamedTuple):
  mu: Any
  nu: Any


def scale_by_adam_without_bias_correction(
  b1: float, b2: float, eps: float
) -> optax.GradientTransformation:
  """Adam as BERT's and ELECTRA's AdamWeightDecayOptimizer: no bias correction."""

  def init(params):
    zeros = lambda p: jnp.zeros_like(p, jnp.float32)
    return ScaleByAdamNoBiasCorrectionState(
      jax.tree.map(zeros, params), jax.tree.map(zeros, params)
    )

  def update(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return updates, ScaleByAdamNoBiasCorrectionState(mu, nu)

  return optax.GradientTransformation(init, update)


def create_optimizer(
  config: ml_collections.ConfigDict,
  *,
  schedule: optax.Schedule | None = None,
  lr_scales: Any = None,
) -> optax.GradientTransformation:
  """Global-norm clipping, Adam, decoupled weight decay, scheduled learning rate.

  `schedule` defaults to the pretraining schedule; `lr_scales` (from
  layerwise_lr_scales) multiplies each parameter's step, decay included, as
  the released code's per-layer learning rates do.
  """
  if config.adam_bias_correction:
    adam = optax.scale_by_adam(config.adam_b1, config.adam_b2, config.adam_eps)
  else:
    adam = scale_by_adam_without_bias_correction(config.adam_b1, config.adam_b2, config.adam_eps)
  return optax.chain(
    optax.clip_by_global_norm(config.max_grad_norm),
    adam,
    optax.add_decayed_weights(config.weight_decay, mask=weight_decay_mask),
    *([scale_by_tree(lr_scales)] if lr_scales is not None else []),
    optax.scale_by_learning_rate(schedule or learning_rate_schedule(config)),
  )
