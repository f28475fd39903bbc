"""Optimizer: AdamW with the released ELECTRA code's schedule and decay mask."""

from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

# The released code excludes these from weight decay, by parameter name.
_NO_DECAY_NAMES = ('layer_norm', 'bias')


def learning_rate_schedule(config: ml_collections.ConfigDict) -> optax.Schedule:
  """Linear warmup times linear decay to 0, as the released code computes it.

  lr(step) = lr * min(1, step / warmup) * (1 - step / num_train_steps): the
  decay runs from step 0, not from the end of warmup.
  """
  peak, warmup, total = config.learning_rate, config.warmup_steps, config.num_train_steps

  def schedule(step):
    step = jnp.asarray(step, jnp.float32)
    warm = jnp.minimum(1.0, step / warmup) if warmup > 0 else 1.0
    return peak * warm * jnp.maximum(0.0, 1.0 - step / total)

  return schedule


def weight_decay_mask(params: Any) -> Any:
  """True for parameters that get weight decay: not LayerNorm, not biases."""

  def decays(path, _):
    names = [str(getattr(k, 'key', '')) for k in path]
    return not any(part in name for name in names for part in _NO_DECAY_NAMES)

  return jax.tree_util.tree_map_with_path(
      decays, params, is_leaf=lambda x: isinstance(x, nn.meta.AxisMetadata))


class ScaleByAdamNoBiasCorrectionState(NamedTuple):
  mu: Any
  nu: Any


def scale_by_adam_without_bias_correction(b1: float, b2: float,
                                          eps: float) -> optax.GradientTransformation:
  """Adam as BERT's and ELECTRA's AdamWeightDecayOptimizer: no bias correction."""

  def init(params):
    zeros = lambda p: jnp.zeros_like(p, jnp.float32)
    return ScaleByAdamNoBiasCorrectionState(jax.tree.map(zeros, params),
                                            jax.tree.map(zeros, params))

  def update(updates, state, params=None):
    del params
    mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, state.mu, updates)
    nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * jnp.square(g), state.nu, updates)
    updates = jax.tree.map(lambda m, v: m / (jnp.sqrt(v) + eps), mu, nu)
    return updates, ScaleByAdamNoBiasCorrectionState(mu, nu)

  return optax.GradientTransformation(init, update)


def create_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
  """Global-norm clipping, Adam, decoupled weight decay, scheduled learning rate."""
  if config.adam_bias_correction:
    adam = optax.scale_by_adam(config.adam_b1, config.adam_b2, config.adam_eps)
  else:
    adam = scale_by_adam_without_bias_correction(config.adam_b1, config.adam_b2,
                                                 config.adam_eps)
  return optax.chain(
      optax.clip_by_global_norm(config.max_grad_norm),
      adam,
      optax.add_decayed_weights(config.weight_decay, mask=weight_decay_mask),
      optax.scale_by_learning_rate(learning_rate_schedule(config)),
  )
