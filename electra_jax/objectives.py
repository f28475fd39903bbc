"""The pretraining objectives: masking, sampling, corruption, losses, and one pass each.

Pure functions of arrays and keys, traced inside the one jitted train step.
Masked positions are kept as fixed-size [B, P] index arrays (P =
max_predictions_per_seq) with 0/1 weights, so every shape is static.

The array-level pieces come first. Then the objectives (config_lib.OBJECTIVES):
every one masks, then (all but BERT's 'mlm') samples into the masked positions
from the generator or uniformly, and runs the full-size network on the result
with its own loss, one function each (_electra ... _all_tokens_mlm, and
Electric's _electric, whose generator is a cloze model of every position).
pretraining_outputs is one pass of (params, batch, key), which evaluation and
prediction reuse; pretraining_losses is its two losses, the objective as the
paper writes it; pretraining_gradients differentiates the same pass for the
train step, generator first, and the tests hold it to the gradients of
pretraining_losses.
"""

from collections.abc import Mapping
import dataclasses
import math
from typing import Any

import flax
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax

from electra_jax import config_lib, prng
from electra_jax.data.tokenizers import SpecialIds, Tokenizer
from electra_jax.model import ElectraPretrainingModel

Array = jax.Array
Batch = Mapping[str, jax.Array]
Metrics = dict[str, jax.Array]


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


def mask_tokens(
  rng: Array,
  input_ids: Array,
  attention_mask: Array,
  special: SpecialIds,
  *,
  mask_prob: float,
  mask_token_prob: float,
  max_predictions: int,
) -> MaskedBatch:
  """Chooses positions to mask and writes [MASK] into most of them.

  Each sequence masks max(1, min(max_predictions, round(mask_prob * length)))
  positions, length counting every non-padding token as the released code
  does, drawn uniformly without replacement from the tokens that are not
  [CLS], [SEP] or padding. A fraction `mask_token_prob` of the chosen positions
  become [MASK]; the others keep their token.
  """
  batch, length = input_ids.shape
  candidates, budget = _candidates_and_budget(
    input_ids, attention_mask, special, mask_prob, max_predictions
  )
  num_to_mask = jnp.minimum(budget, jnp.sum(candidates, axis=-1))

  choice_rng, keep_rng = jax.random.split(rng)
  # The top-k of iid uniform scores is a uniform draw without replacement;
  # non-candidates score -1 and sort last.
  scores = jnp.where(candidates, jax.random.uniform(choice_rng, (batch, length)), -1.0)
  _, positions = jax.lax.top_k(scores, min(max_predictions, length))
  positions = positions.astype(jnp.int32)
  weights = (jnp.arange(positions.shape[1])[None, :] < num_to_mask[:, None]).astype(jnp.float32)
  return _write_masks(keep_rng, input_ids, positions, weights, special, mask_token_prob)


def _candidates_and_budget(
  input_ids: Array, attention_mask: Array, special: SpecialIds, mask_prob: float, limit: int
) -> tuple[Array, Array]:
  """([B, L] the tokens that may be masked: not [CLS], [SEP] or padding; [B] how many
  to mask: max(1, min(limit, round(mask_prob * length))), length counting every
  non-padding token as the released code does)."""
  candidates = (
    (attention_mask > 0)
    & (input_ids != special.cls)
    & (input_ids != special.sep)
    & (input_ids != special.pad)
  )
  num_tokens = jnp.sum(attention_mask > 0, axis=-1)
  return candidates, jnp.clip(jnp.round(num_tokens * mask_prob).astype(jnp.int32), 1, limit)


def _write_masks(
  rng: Array,
  input_ids: Array,
  positions: Array,
  weights: Array,
  special: SpecialIds,
  mask_token_prob: float,
) -> MaskedBatch:
  """The MaskedBatch of the used slots of `positions`: [MASK] written into a fraction
  `mask_token_prob` of them, the others keeping their token."""
  labels = jnp.take_along_axis(input_ids, positions, axis=1)
  use_mask_token = jax.random.uniform(rng, positions.shape) < mask_token_prob
  masked_values = jnp.where(use_mask_token, special.mask, labels)
  return MaskedBatch(
    input_ids=_scatter(input_ids, positions, weights, masked_values),
    positions=positions,
    weights=weights,
    labels=labels,
  )


def mask_whole_words(
  rng: Array,
  input_ids: Array,
  attention_mask: Array,
  special: SpecialIds,
  continues_word: Array,
  *,
  mask_prob: float,
  mask_token_prob: float,
  max_predictions: int,
) -> MaskedBatch:
  """mask_tokens, choosing whole words: every piece of a chosen word is masked.

  A word is a piece that does not continue a word (`continues_word` [V], the
  tokenizer's table), with the pieces after it that do. Words are drawn in a
  uniformly random order and taken while they fit the same count as
  mask_tokens; one that would overshoot is skipped, as in BERT's
  create_pretraining_data.py. [MASK] is then written per piece, as mask_tokens.
  """
  batch, length = input_ids.shape
  positions = jnp.arange(length)
  candidates, budget = _candidates_and_budget(
    input_ids, attention_mask, special, mask_prob, max_predictions
  )

  # A candidate starts a word unless it continues one that a candidate started.
  previous_candidate = jnp.pad(candidates[:, :-1], ((0, 0), (1, 0)))
  starts = candidates & ~(continues_word[input_ids] & previous_candidate)
  start_of = jax.lax.cummax(jnp.where(starts, positions, -1), axis=1)  # [B, L]
  rows = jnp.arange(batch)[:, None]
  sizes = jnp.zeros((batch, length), jnp.int32).at[rows, start_of].add(candidates)

  choice_rng, keep_rng = jax.random.split(rng)
  # Each word's pieces share its start's score, so a stable sort by score keeps
  # them together; non-candidates score -1 and sort last.
  scores = jax.random.uniform(choice_rng, (batch, length))
  scores = jnp.where(candidates, jnp.take_along_axis(scores, start_of, axis=1), -1.0)
  order = jnp.argsort(-scores, axis=-1, stable=True)  # [B, L]
  ordered_starts = jnp.take_along_axis(starts, order, axis=1)
  ordered_sizes = jnp.take_along_axis(sizes, order, axis=1)

  def take(count, step):
    is_start, size = step
    fits = is_start & (count + size <= budget)
    return count + jnp.where(fits, size, 0), fits

  _, taken_starts = jax.lax.scan(
    take, jnp.zeros(batch, jnp.int32), (ordered_starts.T, ordered_sizes.T)
  )
  taken = jnp.zeros((batch, length), bool).at[rows, order].set(taken_starts.T)
  # A piece is chosen when its word's start was taken.
  chosen = candidates & jnp.take_along_axis(taken, jnp.maximum(start_of, 0), axis=1)
  # Chosen positions first, each row's in position order (a stable sort).
  slots = min(max_predictions, length)
  chosen_positions = jnp.argsort(~chosen, axis=-1, stable=True)[:, :slots].astype(jnp.int32)
  count = jnp.sum(chosen, axis=-1)
  weights = (jnp.arange(slots)[None, :] < count[:, None]).astype(jnp.float32)
  return _write_masks(keep_rng, input_ids, chosen_positions, weights, special, mask_token_prob)


def sample_tokens(
  rng: Array, logits: Array, temperature: float, disallowed: Array | None = None
) -> Array:
  """Gumbel-max sample from softmax(logits / temperature), in float32, as int32 ids.

  Behind stop_gradient: the discriminator's loss never reaches the generator
  through the sample. `disallowed` [...] (the originals, with the released
  code's disallow_correct) gets probability 0.
  """
  with jax.named_scope('gumbel_max'):  # Names its kernels in profiles.
    logits = jax.lax.stop_gradient(logits).astype(jnp.float32) / temperature
    if disallowed is not None:
      vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)
      logits = jnp.where(vocab == disallowed[..., None], -jnp.inf, logits)
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


def mlm_counts(logits: Array, masked: MaskedBatch, prefix: str = 'mlm') -> dict[str, Array]:
  """Sums over the used masked slots, in float32: PREFIX_nll, the cross-entropy, and
  PREFIX_correct, the first-argmax hits. The loss divides them per batch; held-out
  evaluation pools them over batches first."""
  logits = logits.astype(jnp.float32)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, masked.labels)
  correct = first_argmax(logits) == masked.labels
  return {
    f'{prefix}_nll': jnp.sum(nll * masked.weights),
    f'{prefix}_correct': jnp.sum(correct * masked.weights),
  }


def mlm_loss(
  logits: Array, masked: MaskedBatch, prefix: str = 'mlm'
) -> tuple[Array, dict[str, Array]]:
  """Mean cross-entropy over the used masked slots, in float32; metrics named PREFIX_loss
  and PREFIX_accuracy."""
  n = mlm_counts(logits, masked, prefix)
  total = jnp.sum(masked.weights)
  loss = _safe_div(n[f'{prefix}_nll'], total)
  return loss, {
    f'{prefix}_loss': loss,
    f'{prefix}_accuracy': _safe_div(n[f'{prefix}_correct'], total),
  }


def discriminator_counts(logits: Array, is_replaced: Array, weights: Array) -> dict[str, Array]:
  """Sums over the tokens of weight 1 [B, L], in float32: the tokens counted, their
  binary cross-entropy, correct answers, tokens flagged "replaced", tokens replaced,
  and true positives. The loss divides them per batch; held-out evaluation pools
  them over batches first."""
  logits = logits.astype(jnp.float32)
  labels = is_replaced.astype(jnp.float32)
  weights = weights.astype(jnp.float32)
  predicted = (logits > 0).astype(jnp.float32) * weights
  actual = labels * weights
  return {
    'counted': jnp.sum(weights),
    'disc_bce': jnp.sum(optax.sigmoid_binary_cross_entropy(logits, labels) * weights),
    'disc_correct': jnp.sum((predicted == actual) * weights),
    'flagged': jnp.sum(predicted),
    'replaced': jnp.sum(actual),
    'true_positives': jnp.sum(predicted * actual),
  }


def discriminator_loss(
  logits: Array, is_replaced: Array, weights: Array
) -> tuple[Array, dict[str, Array]]:
  """Mean binary cross-entropy over the tokens of weight 1 [B, L], in float32."""
  n = discriminator_counts(logits, is_replaced, weights)
  loss = _safe_div(n['disc_bce'], n['counted'])
  return loss, {
    'disc_loss': loss,
    'disc_accuracy': _safe_div(n['disc_correct'], n['counted']),
    'disc_precision': _safe_div(n['true_positives'], n['flagged']),
    'disc_recall': _safe_div(n['true_positives'], n['replaced']),
    'replaced_fraction': _safe_div(n['replaced'], n['counted']),
  }


def constant_answer_disc_loss(replaced_fraction: float) -> float:
  """The discriminator loss of the best constant answer, the replaced fraction p
  for every token: the binary entropy of p, which a discriminator must beat."""
  p = replaced_fraction
  return -(p * math.log(p) + (1 - p) * math.log(1 - p)) if 0 < p < 1 else 0.0


def copy_mixture_log_probs(mlm_logits: Array, copy_logits: Array, input_ids: Array) -> Array:
  """All-Tokens MLM's output distribution, as float32 log-probabilities [B, L, V].

  The paper's explicit copy mechanism: a copy probability D = sigmoid(copy
  logit) per token, so p(v) = D [v = input token] + (1 - D) softmax(MLM logits)(v).
  """
  log_softmax = jax.nn.log_softmax(mlm_logits.astype(jnp.float32), axis=-1)
  copy_logits = copy_logits.astype(jnp.float32)[..., None]
  vocab = jax.lax.broadcasted_iota(jnp.int32, log_softmax.shape, log_softmax.ndim - 1)
  copied = jnp.where(vocab == input_ids[..., None], jax.nn.log_sigmoid(copy_logits), -jnp.inf)
  return jnp.logaddexp(jax.nn.log_sigmoid(-copy_logits) + log_softmax, copied)


def sampled_correct(sampled: Array, masked: MaskedBatch) -> Array:
  """The used masked slots where the generator's sample is the original, summed: the
  train metric divides by the slots per batch, held-out evaluation over all batches."""
  return jnp.sum((sampled == masked.labels) * masked.weights)


def masked_position_weights(masked: MaskedBatch, length: int) -> Array:
  """float32 [B, L]: 1 at the masked positions, 0 elsewhere."""
  zeros = jnp.zeros((masked.positions.shape[0], length), jnp.int32)
  return _scatter(zeros, masked.positions, masked.weights, jnp.ones_like(masked.positions)).astype(
    jnp.float32
  )


# --- The objectives: what the step needs, then one pass each --------------------

# The paper's objectives (Section 3.2 and Table 5), and Electric (Clark et al.
# 2020b), named in config_lib.OBJECTIVES. 'electra', 'electra_15' and 'electric'
# keep a replaced-token discriminator, the others a full-size masked LM.
RTD_OBJECTIVES = ('electra', 'electra_15', 'electric')


def main_head(name: str) -> str:
  """The head of the full-size network that objective `name` trains (model.MAIN_HEADS)."""
  if name in RTD_OBJECTIVES:
    return 'discriminator'
  return 'mlm_copy' if name == 'all_tokens_mlm' else 'mlm'


def _generator_network(name: str, uniform_generator: bool) -> bool:
  """Whether objective `name` samples from a generator network: not BERT's MLM, which
  samples nothing, nor uniform samples."""
  return name != 'mlm' and not uniform_generator


def has_generator_network(config: ml_collections.ConfigDict) -> bool:
  return _generator_network(config.objective.name, config.objective.uniform_generator)


@dataclasses.dataclass(frozen=True)
class Settings:
  """What the step needs besides the model: token ids and objective settings."""

  name: str
  special: SpecialIds
  mask_prob: float
  mask_token_prob: float
  max_predictions: int
  temperature: float
  gen_weight: float
  disc_weight: float
  uniform_generator: bool = False
  disallow_correct: bool = False
  vocab_size: int = 0  # Of the uniform samples.
  # Whole-word masking's table (Tokenizer.continues_word); None: token masking.
  continues_word: np.ndarray | None = None

  @classmethod
  def from_config(
    cls,
    config: ml_collections.ConfigDict,
    special: SpecialIds,
    tokenizer: Tokenizer | None = None,
  ) -> 'Settings':
    """Whole-word masking reads its table from `tokenizer`, and only then; a step
    timed or compiled without a tokenizer may leave it out, and then every piece
    is its own word (the same program)."""
    o = config.objective
    continues_word = None
    if o.masking == 'whole_word':
      continues_word = (
        np.zeros(config.model.vocab_size, bool) if tokenizer is None else tokenizer.continues_word()
      )
    return cls(
      name=o.name,
      special=special,
      mask_prob=o.mask_prob,
      mask_token_prob=o.mask_token_prob,
      max_predictions=config_lib.max_predictions_per_seq(config),
      temperature=o.temperature,
      gen_weight=o.gen_weight,
      disc_weight=o.disc_weight,
      uniform_generator=o.uniform_generator,
      disallow_correct=o.disallow_correct,
      vocab_size=config.model.vocab_size,
      continues_word=continues_word,
    )

  @property
  def generator_network(self) -> bool:
    return _generator_network(self.name, self.uniform_generator)

  @property
  def main_weight(self) -> float:
    """The full-size network's loss weight: disc_weight for a discriminator's BCE; 1 for
    a masked LM's cross-entropy, which is on the generator's scale."""
    return self.disc_weight if self.name in RTD_OBJECTIVES else 1.0


@flax.struct.dataclass
class Corruption:
  """The full-size network's input, and how it was made."""

  masked: MaskedBatch
  gen_logits: Array | None  # [B, P, V] float32 at the masked positions; None: no generator.
  sampled: Array | None  # [B, P] the samples; None for 'mlm', which writes [MASK] instead.
  corrupted: Array  # [B, L] the full-size network's input.
  is_replaced: Array  # [B, L] a sample differs from the original there.
  # 'electric': float32 [B, L], the noise's log-odds at each token of `corrupted`:
  # log q(token | the original context) + log(mask_prob / (1 - mask_prob)).
  noise_log_odds: Array | None = None


@flax.struct.dataclass
class PretrainingOutputs:
  """Everything one pass computes, for losses, evaluation and prediction."""

  corruption: Corruption
  # 'electra', 'electra_15': the discriminator's logits [B, L]; the masked LMs:
  # float32 logits [B, P, V] of the original token at the masked positions.
  main_logits: Array


def _mask(rng: Array, batch: Batch, obj: Settings) -> MaskedBatch:
  settings = dict(
    mask_prob=obj.mask_prob,
    mask_token_prob=obj.mask_token_prob,
    max_predictions=obj.max_predictions,
  )
  if obj.continues_word is not None:
    table = jnp.asarray(obj.continues_word)
    return mask_whole_words(
      rng, batch['input_ids'], batch['attention_mask'], obj.special, table, **settings
    )
  return mask_tokens(rng, batch['input_ids'], batch['attention_mask'], obj.special, **settings)


def _apply(params: Any, model: ElectraPretrainingModel, method: Any, rng: Array, *args: Any) -> Any:
  return model.apply({'params': params}, *args, rngs={'dropout': rng}, method=method)


def _generator_logits(
  params: Any,
  batch: Batch,
  masked: MaskedBatch,
  rng: Array,
  model: ElectraPretrainingModel,
  obj: Settings,
  deterministic: bool,
) -> tuple[Array, Array | None]:
  """(the generator's float32 logits [B, P, V] at the masked positions; for 'electric',
  the log-probability [B, L] of every original token under the noise distribution,
  else None)."""
  if obj.name != 'electric':
    logits = _apply(
      params,
      model,
      model.generator_logits,
      rng,
      masked.input_ids,
      batch['token_type_ids'],
      batch['attention_mask'],
      masked.positions,
      deterministic,
    )
    return logits, None
  # Electric's cloze model reads the text unmasked and predicts every position.
  logits = _apply(
    params,
    model,
    model.cloze_logits,
    rng,
    batch['input_ids'],
    batch['token_type_ids'],
    batch['attention_mask'],
    deterministic,
  )
  at_masked = jnp.take_along_axis(logits, masked.positions[..., None], axis=1)
  return at_masked, _noise_log_probs(logits, batch['input_ids'], obj.temperature)


def _noise_log_probs(logits: Array, tokens: Array, temperature: float) -> Array:
  """float32 log softmax(logits / temperature) at `tokens`, the distribution that
  sample_tokens draws from, behind stop_gradient: Electric's noise-contrastive loss
  treats it as given (the released code's stop_gradient on log q)."""
  logits = jax.lax.stop_gradient(logits).astype(jnp.float32) / temperature
  chosen = jnp.take_along_axis(logits, tokens[..., None], axis=-1)[..., 0]
  return chosen - jax.nn.logsumexp(logits, axis=-1)


def _noise_prior_log_odds(obj: Settings) -> float:
  """log(k / (n - k)), Electric's odds of noise before the token is read: k of n
  tokens are noise samples, k / n taken as mask_prob, as in the released code."""
  return math.log(obj.mask_prob / (1 - obj.mask_prob))


def sample_and_corrupt(
  rng: Array,
  batch: Batch,
  masked: MaskedBatch,
  gen_logits: Array | None,
  obj: Settings,
  original_log_probs: Array | None = None,
) -> Corruption:
  """Samples into the masked positions (generator or uniform), or keeps [MASK] for 'mlm'.

  'electric' also gives `original_log_probs` [B, L], the noise distribution's
  log-probability of each original token (_generator_logits).
  """
  if obj.name == 'mlm':
    return Corruption(masked, None, None, masked.input_ids, jnp.zeros_like(masked.input_ids, bool))
  logits = gen_logits
  if obj.uniform_generator:  # The released code's uniform_generator: flat logits.
    logits = jnp.zeros(masked.labels.shape + (obj.vocab_size,), jnp.float32)
  sampled = sample_tokens(
    rng, logits, obj.temperature, masked.labels if obj.disallow_correct else None
  )
  corrupted, is_replaced = corrupt(batch['input_ids'], masked, sampled)
  noise_log_odds = None
  if obj.name == 'electric':
    # The sampled tokens' log-probabilities where they were written, the originals'
    # elsewhere: the noise's log q of every token the discriminator reads.
    log_q = _scatter(
      original_log_probs,
      masked.positions,
      masked.weights,
      _noise_log_probs(gen_logits, sampled, obj.temperature),
    )
    noise_log_odds = log_q + _noise_prior_log_odds(obj)
  return Corruption(masked, gen_logits, sampled, corrupted, is_replaced, noise_log_odds)


# One function per objective: the full-size network's pass over the corruption c and its
# loss, (params, batch, c, dropout key, model, deterministic) -> (loss, metrics,
# PretrainingOutputs.main_logits).


def _read_corrupted(params, model, method, rng, batch, c, deterministic, *extra):
  """The full-size network's `method` over the corrupted text; `extra` goes before
  `deterministic` (the masked positions, for the MLM head)."""
  return _apply(
    params,
    model,
    method,
    rng,
    c.corrupted,
    batch['token_type_ids'],
    batch['attention_mask'],
    *extra,
    deterministic,
  )


def discriminator_weights(name: str, batch: Batch, c: Corruption) -> Array:
  """float32 [B, L]: the tokens whose labels objective `name`'s discriminator loss
  counts, which its held-out figures count too: the masked positions for Table 5's
  ELECTRA 15%, every token otherwise."""
  if name == 'electra_15':
    return masked_position_weights(c.masked, c.corrupted.shape[1])
  return (batch['attention_mask'] > 0).astype(jnp.float32)


def _replaced_token_detection(name):
  """Replaced token detection, its loss over discriminator_weights(name, ...)."""

  def objective(params, batch, c, rng, model, deterministic):
    logits = _read_corrupted(
      params, model, model.discriminator_logits, rng, batch, c, deterministic
    )
    weights = discriminator_weights(name, batch, c)
    loss, metrics = discriminator_loss(logits, c.is_replaced, weights)
    return loss, metrics, logits

  return objective


# The paper's objective: every token counts.
_electra = _replaced_token_detection('electra')


def _electric(params, batch, c, rng, model, deterministic):
  """Electric (Clark et al. 2020b, "Pre-Training Transformers as Energy-Based Cloze
  Models", Section 3.2): noise-contrastive estimation of an energy-based cloze model.
  The discriminator's output is each token's energy E(x)_t; a token is noise with
  probability k q / (k q + (n - k) exp(-E)), whose logit is E plus the noise's
  log-odds log(k q / (n - k)), k / (n - k) taken as mask_prob / (1 - mask_prob) as in
  the released code. Every token counts."""
  energies = _read_corrupted(
    params, model, model.discriminator_logits, rng, batch, c, deterministic
  )
  logits = energies + c.noise_log_odds
  weights = discriminator_weights('electric', batch, c)
  loss, metrics = discriminator_loss(logits, c.is_replaced, weights)
  return loss, metrics, logits


# Table 5's 'ELECTRA 15%': only the masked positions count.
_electra_15 = _replaced_token_detection('electra_15')


def main_mlm_prefix(name: str) -> str:
  """The metric prefix of a masked-LM objective's full-size network: BERT's one network
  is the run's MLM; beside a generator it is the main one."""
  return 'mlm' if name == 'mlm' else 'main_mlm'


def _masked_lm(prefix):
  def masked_lm(params, batch, c, rng, model, deterministic):
    logits = _read_corrupted(
      params, model, model.mlm_logits, rng, batch, c, deterministic, c.masked.positions
    )
    loss, metrics = mlm_loss(logits, c.masked, prefix)
    return loss, metrics, logits

  return masked_lm


# BERT: the full-size network reads [MASK] and predicts the originals there.
_mlm = _masked_lm(main_mlm_prefix('mlm'))
# Replace MLM: it reads generator samples instead of [MASK].
_replace_mlm = _masked_lm(main_mlm_prefix('replace_mlm'))


def _all_tokens_mlm(params, batch, c, rng, model, deterministic):
  """All-Tokens MLM: predicts every token's identity from the corrupted text, through
  the copy mechanism (copy_mixture_log_probs)."""
  mlm_logits, copy_logits = _read_corrupted(
    params, model, model.copy_mlm_logits, rng, batch, c, deterministic
  )
  log_probs = copy_mixture_log_probs(mlm_logits, copy_logits, c.corrupted)
  nll = -jnp.take_along_axis(log_probs, batch['input_ids'][..., None], axis=-1)[..., 0]
  weights = (batch['attention_mask'] > 0).astype(jnp.float32)
  loss = _safe_div(jnp.sum(nll * weights), jnp.sum(weights))
  # The masked positions' metrics, comparable with Replace MLM's.
  at_masked = jnp.take_along_axis(log_probs, c.masked.positions[..., None], axis=1)
  _, metrics = mlm_loss(at_masked, c.masked, 'main_mlm')
  copy_probability = _safe_div(jnp.sum(jax.nn.sigmoid(copy_logits) * weights), jnp.sum(weights))
  return loss, {**metrics, 'all_tokens_loss': loss, 'copy_probability': copy_probability}, at_masked


_MAIN_PASSES = {
  'electra': _electra,
  'electric': _electric,
  'electra_15': _electra_15,
  'mlm': _mlm,
  'replace_mlm': _replace_mlm,
  'all_tokens_mlm': _all_tokens_mlm,
}


def electric_logits(
  params: Any, batch: Batch, *, model: ElectraPretrainingModel, obj: Settings
) -> Array:
  """Electric's replaced-token logits [B, L] for text as it stands, uncorrupted: each
  token's energy plus its noise log-odds under the cloze model (_electric)."""
  args = (batch['input_ids'], batch['token_type_ids'], batch['attention_mask'], True)
  cloze = model.apply({'params': params}, *args, method=model.cloze_logits)
  energies = model.apply({'params': params}, *args, method=model.discriminator_logits)
  log_q = _noise_log_probs(cloze, batch['input_ids'], obj.temperature)
  return energies + log_q + _noise_prior_log_odds(obj)


def _generator_metrics(c: Corruption, gen_metrics: Metrics) -> Metrics:
  if c.sampled is None:
    return gen_metrics
  accuracy = _safe_div(sampled_correct(c.sampled, c.masked), jnp.sum(c.masked.weights))
  return {**gen_metrics, 'sampled_accuracy': accuracy}


def _one_pass(
  params: Any,
  batch: Batch,
  rng: Array,
  model: ElectraPretrainingModel,
  obj: Settings,
  deterministic: bool,
) -> tuple[Array, Metrics, Corruption, tuple[Array, Metrics, Array]]:
  """(generator MLM loss, or 0 without a generator; its metrics; the corruption;
  the full-size network's (loss, metrics, logits)) of one pass."""
  mask_rng, gen_rng, sample_rng, main_rng = jax.random.split(rng, 4)
  masked = _mask(mask_rng, batch, obj)
  gen_loss, gen_metrics, gen_logits = jnp.zeros((), jnp.float32), {}, None
  original_log_probs = None
  if obj.generator_network:
    gen_logits, original_log_probs = _generator_logits(
      params, batch, masked, gen_rng, model, obj, deterministic
    )
    gen_loss, gen_metrics = mlm_loss(gen_logits, masked)
  c = sample_and_corrupt(sample_rng, batch, masked, gen_logits, obj, original_log_probs)
  main = _MAIN_PASSES[obj.name](params, batch, c, main_rng, model, deterministic)
  return gen_loss, _generator_metrics(c, gen_metrics), c, main


def pretraining_outputs(
  params: Any,
  batch: Batch,
  rng: Array,
  *,
  model: ElectraPretrainingModel,
  obj: Settings,
  deterministic: bool = False,
) -> PretrainingOutputs:
  """Masks, generates, samples and corrupts, then runs the full-size network."""
  _, _, c, (_, _, main_logits) = _one_pass(params, batch, rng, model, obj, deterministic)
  return PretrainingOutputs(c, main_logits)


def pretraining_losses(
  params: Any,
  batch: Batch,
  rng: Array,
  *,
  model: ElectraPretrainingModel,
  obj: Settings,
  deterministic: bool = False,
) -> tuple[Array, Array, Metrics]:
  """(generator MLM loss, or 0 without a generator; the full-size network's loss;
  metrics) of one pass. The objective is gen_weight x the first + main_weight x the
  second."""
  gen_loss, gen_metrics, _, (main_loss, main_metrics, _) = _one_pass(
    params, batch, rng, model, obj, deterministic
  )
  return gen_loss, main_loss, {**gen_metrics, **main_metrics}


def _generator_side(name: str, model: ElectraPretrainingModel) -> bool:
  """Top-level parameters the generator's MLM loss reaches: its own, the shared
  embeddings, and the full-size encoder when that serves as the generator too."""
  return (
    name.startswith('generator')
    or name == 'embeddings'
    or (model.tie_generator and name == 'discriminator')
  )


def pretraining_gradients(
  params: Any, batch: Batch, rng: Array, *, model: ElectraPretrainingModel, obj: Settings
) -> tuple[Any, Metrics]:
  """Gradients of gen_weight x generator MLM loss + main_weight x the full-size
  network's loss, and metrics.

  The same pass and draws as pretraining_losses, differentiated in two
  phases: the generator's backward pass is finished before the full-size
  network's forward pass starts (an optimization barrier on the generator's
  gradients and the corrupted batch). The generator's saved activations are
  then freed before the discriminator saves its own; left to itself, XLA's
  scheduler kept both alive under fsdp sharding.
  """
  mask_rng, gen_rng, sample_rng, main_rng = jax.random.split(rng, 4)
  masked = _mask(mask_rng, batch, obj)
  gen_loss, gen_metrics, gen_logits, gen_grads = jnp.zeros((), jnp.float32), {}, None, {}
  original_log_probs = None
  if obj.generator_network:
    generator_side = {k: v for k, v in params.items() if _generator_side(k, model)}

    def weighted_mlm_loss(trained):
      logits, original_log_probs = _generator_logits(
        {**params, **trained}, batch, masked, gen_rng, model, obj, False
      )
      loss, metrics = mlm_loss(logits, masked)
      return obj.gen_weight * loss, (logits, original_log_probs, loss, metrics)

    (_, (gen_logits, original_log_probs, gen_loss, gen_metrics)), gen_grads = jax.value_and_grad(
      weighted_mlm_loss, has_aux=True
    )(generator_side)
  c = sample_and_corrupt(sample_rng, batch, masked, gen_logits, obj, original_log_probs)
  if obj.generator_network:
    gen_grads, corrupted, noise_log_odds = jax.lax.optimization_barrier(
      (gen_grads, c.corrupted, c.noise_log_odds)
    )
    c = c.replace(corrupted=corrupted, noise_log_odds=noise_log_odds)

  def weighted_main_loss(trained):
    loss, metrics, _ = _MAIN_PASSES[obj.name](trained, batch, c, main_rng, model, False)
    return obj.main_weight * loss, (loss, metrics)

  (_, (main_loss, main_metrics)), grads = jax.value_and_grad(weighted_main_loss, has_aux=True)(
    params
  )
  grads = {
    k: jax.tree.map(jnp.add, g, gen_grads[k]) if k in gen_grads else g for k, g in grads.items()
  }
  metrics = {
    **_generator_metrics(c, gen_metrics),
    **main_metrics,
    'loss': obj.gen_weight * gen_loss + obj.main_weight * main_loss,
  }
  return grads, metrics
