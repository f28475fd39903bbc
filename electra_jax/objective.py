"""Replaced token detection: masking, sampling, corruption, losses and metrics.

Pure functions of arrays and keys, traced inside the one jitted train step.
Masked positions are kept as fixed-size [B, P] index arrays (P =
max_predictions_per_seq) with 0/1 weights, so every shape is static.
"""

import dataclasses

import flax
import jax
import jax.numpy as jnp
import optax

from electra_jax import prng

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class SpecialIds:
  """Token ids the objective needs to know about."""
  pad: int
  cls: int
  sep: int
  mask: int


@flax.struct.dataclass
class MaskedBatch:
  input_ids: Array  # [B, L] generator input: originals with [MASK] written in.
  positions: Array  # [B, P] masked positions; slots with weight 0 are unused.
  weights: Array  # [B, P] float32, 1 for a used slot.
  labels: Array  # [B, P] original tokens at `positions`.


def _scatter(ids: Array, positions: Array, weights: Array, values: Array) -> Array:
  """Writes values at positions[b, p] wherever weights[b, p] > 0."""
  rows = jnp.arange(ids.shape[0])[:, None]
  # Unused slots point past the end and are dropped, so they never collide
  # with a real position.
  cols = jnp.where(weights > 0, positions, ids.shape[1])
  return ids.at[rows, cols].set(values.astype(ids.dtype), mode='drop')


def mask_tokens(rng: Array, input_ids: Array, attention_mask: Array, special: SpecialIds, *,
                mask_prob: float, mask_token_prob: float,
                max_predictions: int) -> MaskedBatch:
  """Chooses positions to mask and writes [MASK] into most of them.

  Each sequence masks max(1, min(max_predictions, round(mask_prob * length)))
  positions, length counting every non-padding token as the released code
  does, drawn uniformly without replacement from the tokens that are not
  [CLS], [SEP] or padding. A fraction `mask_token_prob` of the chosen positions
  become [MASK]; the others keep their token.
  """
  batch, length = input_ids.shape
  candidates = (attention_mask > 0) & (input_ids != special.cls) & (
      input_ids != special.sep) & (input_ids != special.pad)
  num_tokens = jnp.sum(attention_mask > 0, axis=-1)
  num_to_mask = jnp.clip(jnp.round(num_tokens * mask_prob).astype(jnp.int32), 1, max_predictions)
  num_to_mask = jnp.minimum(num_to_mask, jnp.sum(candidates, axis=-1))

  choice_rng, keep_rng = jax.random.split(rng)
  # The top-k of iid uniform scores is a uniform draw without replacement;
  # non-candidates score -1 and sort last.
  scores = jnp.where(candidates, jax.random.uniform(choice_rng, (batch, length)), -1.0)
  _, positions = jax.lax.top_k(scores, min(max_predictions, length))
  positions = positions.astype(jnp.int32)
  used = jnp.arange(positions.shape[1])[None, :] < num_to_mask[:, None]
  weights = used.astype(jnp.float32)
  labels = jnp.take_along_axis(input_ids, positions, axis=1)

  use_mask_token = jax.random.uniform(keep_rng, positions.shape) < mask_token_prob
  masked_values = jnp.where(use_mask_token, special.mask, labels)
  return MaskedBatch(
      input_ids=_scatter(input_ids, positions, weights, masked_values),
      positions=positions, weights=weights, labels=labels)


def sample_tokens(rng: Array, logits: Array, temperature: float) -> Array:
  """Gumbel-max sample from softmax(logits / temperature), in float32, as int32 ids.

  Behind stop_gradient: the discriminator's loss never reaches the generator
  through the sample.
  """
  with jax.named_scope('gumbel_max'):  # Names its kernels in profiles.
    logits = jax.lax.stop_gradient(logits).astype(jnp.float32) / temperature
    return first_argmax(logits + prng.gumbel(rng, logits.shape))


def first_argmax(x: Array) -> Array:
  """jnp.argmax over the last axis (the first maximum's index), as int32.

  Written as two plain reductions, the maximum and then the first index
  holding it: XLA's CPU backend vectorizes those, and ran jnp.argmax's paired
  (value, index) reduction 18x slower over a [16, 19, 30522] array.
  """
  index = jax.lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
  is_max = x == jnp.max(x, axis=-1, keepdims=True)
  return jnp.min(jnp.where(is_max, index, x.shape[-1] - 1), axis=-1)


def corrupt(input_ids: Array, masked: MaskedBatch, sampled: Array) -> tuple[Array, Array]:
  """Writes the samples into the original input.

  Returns (corrupted ids, is_replaced). A sample equal to the original token
  counts as original, as in the paper.
  """
  corrupted = _scatter(input_ids, masked.positions, masked.weights, sampled)
  return corrupted, corrupted != input_ids


def _safe_div(num: Array, den: Array) -> Array:
  return num / jnp.maximum(den, 1e-6)


def mlm_loss(logits: Array, masked: MaskedBatch) -> tuple[Array, dict[str, Array]]:
  """Mean cross-entropy over the used masked slots, in float32."""
  logits = logits.astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, masked.labels)
  total = jnp.sum(masked.weights)
  loss = _safe_div(jnp.sum(nll * masked.weights), total)
  correct = (first_argmax(logits) == masked.labels) * masked.weights
  return loss, {'mlm_loss': loss, 'mlm_accuracy': _safe_div(jnp.sum(correct), total)}


def discriminator_loss(logits: Array, is_replaced: Array,
                       attention_mask: Array) -> tuple[Array, dict[str, Array]]:
  """Mean binary cross-entropy over every non-padding token, in float32."""
  logits = logits.astype(jnp.float32)
  labels = is_replaced.astype(jnp.float32)
  weights = (attention_mask > 0).astype(jnp.float32)
  bce = optax.sigmoid_binary_cross_entropy(logits, labels)
  total = jnp.sum(weights)
  loss = _safe_div(jnp.sum(bce * weights), total)

  predicted = (logits > 0).astype(jnp.float32) * weights
  actual = labels * weights
  true_positive = jnp.sum(predicted * actual)
  correct = jnp.sum((predicted == actual) * weights)
  return loss, {
      'disc_loss': loss,
      'disc_accuracy': _safe_div(correct, total),
      'disc_precision': _safe_div(true_positive, jnp.sum(predicted)),
      'disc_recall': _safe_div(true_positive, jnp.sum(actual)),
      'replaced_fraction': _safe_div(jnp.sum(actual), total),
  }


def sampled_accuracy(sampled: Array, masked: MaskedBatch) -> Array:
  """Fraction of used masked slots where the generator's sample is the original."""
  hits = (sampled == masked.labels) * masked.weights
  return _safe_div(jnp.sum(hits), jnp.sum(masked.weights))
