"""Pretraining evaluation on held-out data: each network's metrics, and the discriminator's AUCs.

One jitted pass per batch, without dropout and with a fixed key per batch, so
evaluating the same parameters twice gives the same numbers and successive
evaluations during training are comparable. Counts are summed over all
batches before any ratio is taken; the discriminator's AUC is computed over
every non-padding held-out token.
"""

from collections.abc import Callable, Iterator
import shlex
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import ml_collections
import numpy as np

from electra_jax import config_lib, objectives, scores, sharding
from electra_jax.data import pipeline, shards, tokenizers
from electra_jax.model import ElectraPretrainingModel
from electra_jax.objectives import Settings

Batch = dict[str, np.ndarray]


def make_eval_step(
  model: ElectraPretrainingModel,
  obj: Settings,
  config: ml_collections.ConfigDict,
  param_shardings: Any,
  batch_sharding: NamedSharding,
) -> Callable:
  """jit(params, batch, index) -> (sums of counts, per-token disc logits, labels, weights,
  the ids the discriminator read).

  The sums cover what the objective has: the generator's MLM and samples,
  then the discriminator's counts over the tokens its loss counts (whose logits,
  labels, weights and ids feed the AUCs) or the full-size masked LM's. Without a
  discriminator the four arrays are zeros of weight 0.
  """
  rules = config.mesh.logical_axis_rules
  replicated = NamedSharding(batch_sharding.mesh, PartitionSpec())
  prefix = objectives.main_mlm_prefix(obj.name)

  def eval_step(params, batch, index):
    rng = jax.random.fold_in(jax.random.key(config.eval.seed), index)
    with nn.logical_axis_rules(rules):
      out = objectives.pretraining_outputs(
        params, batch, rng, model=model, obj=obj, deterministic=True
      )
    c = out.corruption
    tokens = (batch['attention_mask'] > 0).astype(jnp.float32)
    sums = {'masked': jnp.sum(c.masked.weights), 'tokens': jnp.sum(tokens)}
    if c.gen_logits is not None:
      sums.update(objectives.mlm_counts(c.gen_logits, c.masked))
    if c.sampled is not None:
      sums['sampled_correct'] = objectives.sampled_correct(c.sampled, c.masked)
    if obj.name not in objectives.RTD_OBJECTIVES:
      sums.update(objectives.mlm_counts(out.main_logits, c.masked, prefix))
      zeros = jnp.zeros_like(tokens)
      return sums, zeros, zeros, zeros, jnp.zeros_like(c.corrupted)
    # The tokens the objective's loss counts: all for ELECTRA, the masked ones for
    # ELECTRA 15%, whose discriminator never learns the others.
    counted = objectives.discriminator_weights(obj.name, batch, c)
    sums.update(objectives.discriminator_counts(out.main_logits, c.is_replaced, counted))
    labels = c.is_replaced.astype(jnp.float32)
    return sums, out.main_logits, labels, counted, c.corrupted

  return jax.jit(
    eval_step, in_shardings=(param_shardings, batch_sharding, replicated), out_shardings=replicated
  )


def summarize(
  sums: dict[str, float],
  logits: np.ndarray,
  labels: np.ndarray,
  token_ids: np.ndarray,
  folds: np.ndarray,
) -> dict[str, float]:
  """Pooled metrics from summed counts. The discriminator's AUC over the held-out
  tokens' logits comes with two that part what it reads from the context: a detector's
  that reads each token's id alone (`folds`, 0 or 1 per token, splits them), and its
  own among tokens of one id. Each network's metrics appear when its counts do."""
  ratio = lambda a, b: float(sums[a] / sums[b]) if sums[b] else 0.0  # As the train metrics.
  results = {}
  for name in ('mlm', 'main_mlm'):
    if f'{name}_nll' in sums:
      results[f'{name}_loss'] = ratio(f'{name}_nll', 'masked')
      results[f'{name}_accuracy'] = ratio(f'{name}_correct', 'masked')
  if 'sampled_correct' in sums:
    results['sampled_accuracy'] = ratio('sampled_correct', 'masked')
  if 'disc_bce' in sums:
    results.update(
      {
        'disc_loss': ratio('disc_bce', 'counted'),
        'disc_accuracy': ratio('disc_correct', 'counted'),
        'disc_precision': ratio('true_positives', 'flagged'),
        'disc_recall': ratio('true_positives', 'replaced'),
        'replaced_fraction': ratio('replaced', 'counted'),
        'disc_auc': scores.roc_auc(labels, logits),
        'context_free_auc': scores.context_free_auc(labels, token_ids, folds),
        'same_token_auc': scores.same_token_auc(labels, logits, token_ids),
      }
    )
  return {**results, 'tokens': float(sums['tokens'])}


def evaluate(
  eval_step: Callable,
  params: Any,
  batches: Iterator[Batch],
  num_batches: int,
  batch_sharding: NamedSharding,
) -> dict[str, float]:
  """Runs up to `num_batches` batches (fewer if the data ends) and pools the metrics."""
  totals: dict[str, float] = {}
  all_logits, all_labels, all_ids, all_folds = [], [], [], []
  for index in range(num_batches):
    try:
      host_batch = next(batches)
    except StopIteration:
      break
    sums, logits, labels, tokens, ids = jax.device_get(
      eval_step(params, sharding.make_global_batch(host_batch, batch_sharding), np.int32(index))
    )
    for key, value in sums.items():
      totals[key] = totals.get(key, 0.0) + float(value)
    keep = tokens > 0
    all_logits.append(logits[keep])
    all_labels.append(labels[keep])
    all_ids.append(ids[keep])
    # Alternate batches make the context-free AUC's two folds.
    all_folds.append(np.full(int(keep.sum()), index % 2))
  if not totals:
    raise config_lib.ConfigError(
      'config.eval.batch_size: the held-out data holds fewer '
      'examples than one batch; lower it or hold out more text'
    )
  return summarize(
    totals, *(np.concatenate(a) for a in (all_logits, all_labels, all_ids, all_folds))
  )


def held_out_command(tokenizer: tokenizers.Tokenizer, max_seq_length: int) -> str:
  """The prepare_data command that tokenizes held-out text as `tokenizer` does, into
  examples of `max_seq_length` tokens; HELD_OUT_CORPUS and HELD_OUT_DIR are the user's."""
  flags = [
    '--corpus=HELD_OUT_CORPUS',
    '--output_dir=HELD_OUT_DIR',
    *tokenizer.prepare_flags(),
    f'--max_seq_length={max_seq_length}',
  ]
  return 'python -m electra_jax.prepare_data ' + ' '.join(shlex.quote(f) for f in flags)


def _identity(spec: dict[str, Any]) -> dict[str, Any]:
  """What makes two tokenizer specs give the same ids: everything but the file's name,
  so the hash and a WordPiece vocabulary's casing (the same vocab.txt, cased, is other
  ids)."""
  return {k: v for k, v in spec.items() if k != 'file'}


def _options(spec: dict[str, Any]) -> str:
  """A tokenizer spec's identity in words: its hash, and a WordPiece vocabulary's casing."""
  words = [f'sha256 {spec["sha256"][:12]}']
  if spec['kind'] == 'wordpiece':
    words += [f'lower_case={spec["lower_case"]}', f'strip_accents={spec["strip_accents"]}']
  return '(' + ', '.join(words) + ')'


class HeldOut:
  """Held-out prepared data with a compiled eval step: `run(params)` evaluates.

  The same batches (the first `num_batches` of the seeded order) and keys
  are used on every call.
  """

  def __init__(
    self,
    config: ml_collections.ConfigDict,
    directory: str,
    model: ElectraPretrainingModel,
    param_shardings: Any,
    batch_sharding: NamedSharding,
    *,
    tokenizer: tokenizers.Tokenizer,
    num_batches: int | None = None,
    key: str = 'config.eval.prepared_dir',
  ):
    """`tokenizer` is the model's; `key` names where `directory` came from, for errors."""
    self._config = config
    self.data = shards.PreparedData.load(directory)
    pipeline.check_compatible(self.data, config)
    theirs, ours = self.data.metadata['tokenizer'], tokenizer.spec()
    if _identity(theirs) != _identity(ours):
      raise config_lib.ConfigError(
        f'{key}: {directory} was tokenized with {theirs["file"]} {_options(theirs)}, not as '
        f"the model's {ours['file']} {_options(ours)}; prepare the held-out text with the "
        f"model's tokenizer: {held_out_command(tokenizer, config.max_seq_length)}"
      )
    self.batch_size = config.eval.batch_size or config.batch_size
    ways = sharding.batch_ways(batch_sharding.mesh, config.mesh.logical_axis_rules)
    if self.batch_size % ways:
      raise config_lib.ConfigError(
        f'config.eval.batch_size: {self.batch_size} does not split '
        f'over the {ways} data x fsdp devices'
      )
    self.num_batches = num_batches or config.eval.num_batches
    self._batch_sharding = batch_sharding
    obj = Settings.from_config(config, self.data.special_ids, self.data.tokenizer())
    self._step = make_eval_step(model, obj, config, param_shardings, batch_sharding)

  def run(self, params: Any) -> dict[str, float]:
    batches = pipeline.train_iterator(
      self.data,
      self._config,
      process_index=jax.process_index(),
      process_count=jax.process_count(),
      num_epochs=1,
      batch_size=self.batch_size,
    )
    try:
      return evaluate(self._step, params, batches, self.num_batches, self._batch_sharding)
    finally:
      batches.close()
