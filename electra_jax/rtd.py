"""The replaced-token-detection pass: mask, generate, sample, corrupt, discriminate.

One function of (params, batch, key) that the train step differentiates and
evaluation and prediction reuse; the array-level pieces (masking, sampling,
losses) are in objective.py.
"""

from collections.abc import Mapping
import dataclasses
from typing import Any

import flax
import jax
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


def pretraining_outputs(params: Any, batch: Batch, rng: jax.Array, *,
                        model: ElectraPretrainingModel, obj: Objective,
                        deterministic: bool = False) -> PretrainingOutputs:
  """Masks, runs the generator, samples, corrupts, runs the discriminator."""
  mask_rng, gen_rng, sample_rng, disc_rng = jax.random.split(rng, 4)
  variables = {'params': params}
  masked = objective.mask_tokens(
      mask_rng, batch['input_ids'], batch['attention_mask'], obj.special,
      mask_prob=obj.mask_prob, mask_token_prob=obj.mask_token_prob,
      max_predictions=obj.max_predictions)
  gen_logits = model.apply(variables, masked.input_ids, batch['token_type_ids'],
                           batch['attention_mask'], masked.positions, deterministic,
                           rngs={'dropout': gen_rng}, method=model.generator_logits)
  sampled = objective.sample_tokens(sample_rng, gen_logits, obj.temperature)
  corrupted, is_replaced = objective.corrupt(batch['input_ids'], masked, sampled)
  disc_logits = model.apply(variables, corrupted, batch['token_type_ids'],
                            batch['attention_mask'], deterministic,
                            rngs={'dropout': disc_rng}, method=model.discriminator_logits)
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
