"""The replaced-token-detection pass: mask, generate, sample, corrupt, discriminate.

pretraining_outputs is one pass of (params, batch, key), which evaluation and
prediction reuse; pretraining_losses is its two losses, the objective as the
paper writes it; pretraining_gradients differentiates the same pass for the
train step, generator first, and the tests hold it to the gradients of
pretraining_losses. The array-level pieces (masking, sampling, losses) are in
objective.py.
"""

from collections.abc import Mapping
import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections

from electra_jax import config_lib, objective
from electra_jax.model import ElectraPretrainingModel

Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]


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


@flax.struct.dataclass
class PretrainingOutputs:
  """Everything one replaced-token-detection pass computes, for losses and evaluation."""
  masked: objective.MaskedBatch
  gen_logits: jax.Array  # [B, P, V] float32, at the masked positions only.
  sampled: jax.Array  # [B, P] the generator's samples.
  corrupted: jax.Array  # [B, L] the discriminator's input.
  is_replaced: jax.Array  # [B, L] the discriminator's labels.
  disc_logits: jax.Array  # [B, L] float32.


def _mask(rng: jax.Array, batch: Batch, obj: Objective) -> objective.MaskedBatch:
  return objective.mask_tokens(
      rng, batch['input_ids'], batch['attention_mask'], obj.special,
      mask_prob=obj.mask_prob, mask_token_prob=obj.mask_token_prob,
      max_predictions=obj.max_predictions)


def _generator_logits(params: Any, batch: Batch, masked: objective.MaskedBatch,
                      rng: jax.Array, model: ElectraPretrainingModel,
                      deterministic: bool) -> jax.Array:
  return model.apply({'params': params}, masked.input_ids, batch['token_type_ids'],
                     batch['attention_mask'], masked.positions, deterministic,
                     rngs={'dropout': rng}, method=model.generator_logits)


def _discriminator_logits(params: Any, batch: Batch, corrupted: jax.Array, rng: jax.Array,
                          model: ElectraPretrainingModel, deterministic: bool) -> jax.Array:
  return model.apply({'params': params}, corrupted, batch['token_type_ids'],
                     batch['attention_mask'], deterministic,
                     rngs={'dropout': rng}, method=model.discriminator_logits)


def pretraining_outputs(params: Any, batch: Batch, rng: jax.Array, *,
                        model: ElectraPretrainingModel, obj: Objective,
                        deterministic: bool = False) -> PretrainingOutputs:
  """Masks, runs the generator, samples, corrupts, runs the discriminator."""
  mask_rng, gen_rng, sample_rng, disc_rng = jax.random.split(rng, 4)
  masked = _mask(mask_rng, batch, obj)
  gen_logits = _generator_logits(params, batch, masked, gen_rng, model, deterministic)
  sampled = objective.sample_tokens(sample_rng, gen_logits, obj.temperature)
  corrupted, is_replaced = objective.corrupt(batch['input_ids'], masked, sampled)
  disc_logits = _discriminator_logits(params, batch, corrupted, disc_rng, model, deterministic)
  return PretrainingOutputs(masked, gen_logits, sampled, corrupted, is_replaced, disc_logits)


def pretraining_losses(params: Any, batch: Batch, rng: jax.Array, *,
                       model: ElectraPretrainingModel, obj: Objective,
                       deterministic: bool = False) -> tuple[jax.Array, jax.Array, Metrics]:
  """(MLM loss, discriminator loss, metrics) of one pass."""
  out = pretraining_outputs(params, batch, rng, model=model, obj=obj,
                            deterministic=deterministic)
  mlm_loss, mlm_metrics = objective.mlm_loss(out.gen_logits, out.masked)
  disc_loss, disc_metrics = objective.discriminator_loss(out.disc_logits, out.is_replaced,
                                                         batch['attention_mask'])
  metrics = {**mlm_metrics, **disc_metrics,
             'sampled_accuracy': objective.sampled_accuracy(out.sampled, out.masked)}
  return mlm_loss, disc_loss, metrics


def _is_generator_side(name: str) -> bool:
  """Top-level parameters the MLM loss reaches: the generator's and the shared embeddings."""
  return name.startswith('generator') or name == 'embeddings'


def pretraining_gradients(params: Any, batch: Batch, rng: jax.Array, *,
                          model: ElectraPretrainingModel,
                          obj: Objective) -> tuple[Any, Metrics]:
  """Gradients of gen_weight x MLM loss + disc_weight x discriminator loss, and metrics.

  The same pass and draws as pretraining_losses, differentiated in two
  phases: the generator's backward pass is finished before the
  discriminator's forward pass starts (an optimization barrier on the
  generator's gradients and the corrupted batch). The generator's saved
  activations are then freed before the discriminator saves its own; left
  to itself, XLA's scheduler kept both alive under fsdp sharding.
  """
  mask_rng, gen_rng, sample_rng, disc_rng = jax.random.split(rng, 4)
  masked = _mask(mask_rng, batch, obj)
  generator_side = {k: v for k, v in params.items() if _is_generator_side(k)}

  def weighted_mlm_loss(trained):
    gen_logits = _generator_logits({**params, **trained}, batch, masked, gen_rng, model, False)
    mlm_loss, mlm_metrics = objective.mlm_loss(gen_logits, masked)
    return obj.gen_weight * mlm_loss, (gen_logits, mlm_loss, mlm_metrics)

  (_, (gen_logits, mlm_loss, mlm_metrics)), gen_grads = jax.value_and_grad(
      weighted_mlm_loss, has_aux=True)(generator_side)
  sampled = objective.sample_tokens(sample_rng, gen_logits, obj.temperature)
  corrupted, is_replaced = objective.corrupt(batch['input_ids'], masked, sampled)
  gen_grads, corrupted = jax.lax.optimization_barrier((gen_grads, corrupted))

  def weighted_disc_loss(trained):
    disc_logits = _discriminator_logits(trained, batch, corrupted, disc_rng, model, False)
    disc_loss, disc_metrics = objective.discriminator_loss(disc_logits, is_replaced,
                                                           batch['attention_mask'])
    return obj.disc_weight * disc_loss, (disc_loss, disc_metrics)

  (_, (disc_loss, disc_metrics)), grads = jax.value_and_grad(
      weighted_disc_loss, has_aux=True)(params)
  grads = {k: jax.tree.map(jnp.add, g, gen_grads[k]) if k in gen_grads else g
           for k, g in grads.items()}
  metrics = {**mlm_metrics, **disc_metrics,
             'sampled_accuracy': objective.sampled_accuracy(sampled, masked),
             'loss': obj.gen_weight * mlm_loss + obj.disc_weight * disc_loss}
  return grads, metrics
