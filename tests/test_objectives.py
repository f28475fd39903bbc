"""Masking, sampling, corruption and losses of the replaced-token-detection objectives."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax import objectives
from electra_jax.data.tokenizers import SpecialIds

SPECIAL = SpecialIds(pad=0, cls=2, sep=3, mask=4)


def _batch(lengths, max_len=64, vocab=500, seed=0):
  """[CLS] tokens [SEP] rows of the given lengths, padded."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((len(lengths), max_len), np.int32)
  for row, n in enumerate(lengths):
    ids[row, 0] = SPECIAL.cls
    ids[row, 1 : n - 1] = rng.integers(5, vocab, n - 2)
    ids[row, n - 1] = SPECIAL.sep
  return jnp.asarray(ids), jnp.asarray((ids != 0).astype(np.int32))


def _mask(rng, ids, attention_mask, max_predictions=10, mask_prob=0.15, mask_token_prob=0.85):
  return objectives.mask_tokens(
    rng,
    ids,
    attention_mask,
    SPECIAL,
    mask_prob=mask_prob,
    mask_token_prob=mask_token_prob,
    max_predictions=max_predictions,
  )


def test_mask_count_specials_and_duplicates():
  lengths = [64, 40, 7, 3, 20]
  ids, attention_mask = _batch(lengths)
  masked = _mask(jax.random.key(0), ids, attention_mask)
  positions, weights = np.asarray(masked.positions), np.asarray(masked.weights)
  for row, n in enumerate(lengths):
    expected = max(1, min(10, round(0.15 * n)))
    expected = min(expected, n - 2)  # [CLS] x [SEP]: only n - 2 candidates.
    used = positions[row][weights[row] > 0]
    assert len(used) == expected, (row, n)
    assert len(set(used.tolist())) == len(used), 'a position was drawn twice'
    original = np.asarray(ids)[row, used]
    assert not np.isin(original, [SPECIAL.pad, SPECIAL.cls, SPECIAL.sep]).any()
    np.testing.assert_array_equal(np.asarray(masked.labels)[row, weights[row] > 0], original)


def test_mask_round_matches_released_code():
  # round(0.15 * 30) = round(4.5) = 4 under round-half-to-even, as tf.round.
  ids, attention_mask = _batch([30])
  masked = _mask(jax.random.key(3), ids, attention_mask)
  assert int(masked.weights.sum()) == 4


def test_mask_changes_only_masked_positions():
  ids, attention_mask = _batch([64] * 8)
  masked = _mask(jax.random.key(1), ids, attention_mask)
  changed = np.asarray(masked.input_ids) != np.asarray(ids)
  chosen = np.zeros_like(changed)
  for row in range(ids.shape[0]):
    chosen[row, np.asarray(masked.positions)[row][np.asarray(masked.weights)[row] > 0]] = True
  assert not (changed & ~chosen).any()
  assert (np.asarray(masked.input_ids)[changed] == SPECIAL.mask).all()


def test_mask_token_fraction():
  ids, attention_mask = _batch([64] * 512, seed=2)
  masked = _mask(jax.random.key(2), ids, attention_mask)
  used = np.asarray(masked.weights) > 0
  got = np.take_along_axis(np.asarray(masked.input_ids), np.asarray(masked.positions), 1)[used]
  fraction = np.mean(got == SPECIAL.mask)
  assert 0.82 < fraction < 0.88, fraction


def test_mask_is_deterministic_per_key():
  ids, attention_mask = _batch([64, 50, 30])
  a = _mask(jax.random.key(7), ids, attention_mask)
  b = _mask(jax.random.key(7), ids, attention_mask)
  c = _mask(jax.random.key(8), ids, attention_mask)
  np.testing.assert_array_equal(a.positions, b.positions)
  np.testing.assert_array_equal(a.input_ids, b.input_ids)
  assert not np.array_equal(a.positions, c.positions)


def test_mask_positions_are_uniform():
  ids, attention_mask = _batch([12] * 4000, max_len=12, seed=4)
  masked = _mask(jax.random.key(4), ids, attention_mask, max_predictions=2, mask_prob=0.2)
  counts = np.bincount(np.asarray(masked.positions)[np.asarray(masked.weights) > 0], minlength=12)
  assert counts[0] == counts[11] == 0
  inner = counts[1:11] / counts[1:11].sum()
  np.testing.assert_allclose(inner, 0.1, atol=0.01)


def test_sample_tokens_follows_softmax():
  logits = jnp.array([[2.0, 1.0, 0.0, -1.0]])
  logits = jnp.broadcast_to(logits, (200_000, 4))
  samples = np.asarray(objectives.sample_tokens(jax.random.key(0), logits, temperature=1.0))
  freq = np.bincount(samples, minlength=4) / samples.size
  np.testing.assert_allclose(freq, jax.nn.softmax(logits[0]), atol=0.005)
  cold = np.asarray(objectives.sample_tokens(jax.random.key(0), logits[:1000], temperature=0.01))
  assert (cold == 0).all()


def test_sample_tokens_over_a_large_vocabulary():
  # One token carries 30% of the mass, the other 4,095 share the rest evenly:
  # the Gumbel noise must be right far into its tail for the 30% to come out.
  vocab, rows = 4096, 4096
  logits = np.zeros((rows, vocab), np.float32)
  logits[:, 7] = np.log(0.3 * (vocab - 1) / 0.7)
  samples = np.asarray(objectives.sample_tokens(jax.random.key(1), jnp.asarray(logits), 1.0))
  np.testing.assert_allclose(np.mean(samples == 7), 0.3, atol=0.025)
  others = samples[samples != 7]
  buckets = np.bincount(others // (vocab // 8), minlength=8) / others.size
  np.testing.assert_allclose(buckets, 1 / 8, atol=0.02)


def test_first_argmax_is_argmax_with_the_first_tie():
  x = np.random.default_rng(0).normal(size=(50, 1000)).astype(np.float32)
  np.testing.assert_array_equal(objectives.first_argmax(jnp.asarray(x)), x.argmax(-1))
  ties = jnp.array([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0]])
  np.testing.assert_array_equal(objectives.first_argmax(ties), [1, 0])


def test_corrupt_counts_equal_samples_as_original():
  ids, attention_mask = _batch([10])
  masked = _mask(jax.random.key(0), ids, attention_mask, max_predictions=3, mask_prob=0.3)
  assert int(masked.weights.sum()) == 3
  # First slot samples the original token back, the others [MASK] (id 4), which
  # the input never holds.
  sampled = masked.labels.at[:, 1:].set(SPECIAL.mask)
  corrupted, is_replaced = objectives.corrupt(ids, masked, sampled)
  first, others = np.asarray(masked.positions)[0, 0], np.asarray(masked.positions)[0, 1:]
  assert not bool(is_replaced[0, first])
  assert np.asarray(is_replaced)[0, others].all()
  assert int(is_replaced.sum()) == 2
  np.testing.assert_array_equal(np.asarray(corrupted)[0, others], SPECIAL.mask)


def test_mlm_loss_matches_manual_cross_entropy():
  rng = np.random.default_rng(0)
  logits = rng.normal(size=(2, 3, 7)).astype(np.float32)
  labels = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
  weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
  masked = objectives.MaskedBatch(
    input_ids=jnp.zeros((2, 5), jnp.int32),
    positions=jnp.zeros((2, 3), jnp.int32),
    weights=jnp.asarray(weights),
    labels=jnp.asarray(labels),
  )
  loss, metrics = objectives.mlm_loss(jnp.asarray(logits), masked)
  logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  nll = -np.take_along_axis(logp, labels[..., None], -1)[..., 0]
  np.testing.assert_allclose(loss, (nll * weights).sum() / 3, rtol=1e-6)
  correct = (logits.argmax(-1) == labels) * weights
  np.testing.assert_allclose(metrics['mlm_accuracy'], correct.sum() / 3, rtol=1e-6)


def test_discriminator_metrics_on_known_example():
  logits = jnp.array([[3.0, -2.0, 1.0, -1.0, 5.0, 0.5]])
  is_replaced = jnp.array([[True, True, False, False, False, True]])
  attention_mask = jnp.array([[1, 1, 1, 1, 0, 1]])  # Position 4 is padding.
  loss, m = objectives.discriminator_loss(logits, is_replaced, attention_mask)
  # Predicted replaced (logit > 0) at 0, 2, 5; actually replaced at 0, 1, 5.
  assert m['disc_precision'] == pytest.approx(2 / 3)
  assert m['disc_recall'] == pytest.approx(2 / 3)
  assert m['disc_accuracy'] == pytest.approx(3 / 5)
  assert m['replaced_fraction'] == pytest.approx(3 / 5)
  x, y = np.array([3.0, -2.0, 1.0, -1.0, 0.5]), np.array([1, 1, 0, 0, 1])
  bce = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
  assert float(loss) == pytest.approx(bce.mean(), rel=1e-6)


def _wiki_batch(tokenizer, rows=64, length=128):
  """Rows of real Wikipedia text as [CLS] pieces [SEP], then padding."""
  from electra_jax.data import sources  # pylint: disable=g-import-not-at-top
  from tests.conftest import data_dir  # pylint: disable=g-import-not-at-top

  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_05'))
  lines = [line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc]
  ids = np.full((rows, length), tokenizer.pad_id, np.int32)
  for row, pieces in enumerate(tokenizer.encode(lines[:rows])):
    pieces = [tokenizer.cls_id, *pieces[: length - 10 - row], tokenizer.sep_id]  # Mixed lengths.
    ids[row, : len(pieces)] = pieces
  return jnp.asarray(ids), jnp.asarray((ids != tokenizer.pad_id).astype(np.int32))


def test_whole_word_masking_masks_every_piece_of_a_word():
  from electra_jax.data import tokenizers  # pylint: disable=g-import-not-at-top
  from tests.conftest import data_dir  # pylint: disable=g-import-not-at-top

  tokenizer = tokenizers.WordPieceTokenizer(
    str(data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt')
  )
  table = tokenizer.continues_word()
  assert table[tokenizer.encode(['playing'])[0]].tolist() == [False] and table.sum() > 5000
  ids, attention_mask = _wiki_batch(tokenizer)
  special = tokenizer.special_ids
  masked = jax.jit(
    lambda key: objectives.mask_whole_words(
      key,
      ids,
      attention_mask,
      special,
      jnp.asarray(table),
      mask_prob=0.15,
      mask_token_prob=0.85,
      max_predictions=20,
    )
  )(jax.random.key(0))
  ids, attention_mask = np.asarray(ids), np.asarray(attention_mask)
  chosen = np.zeros(ids.shape, bool)
  for row in range(ids.shape[0]):
    used = np.asarray(masked.positions[row])[np.asarray(masked.weights[row]) > 0]
    chosen[row, used] = True
  budget = np.clip(np.round(attention_mask.sum(-1) * 0.15), 1, 20)
  counts = chosen.sum(-1)
  assert (counts <= budget).all() and counts.sum() > 0.9 * budget.sum(), (counts, budget)
  assert not chosen[np.isin(ids, [special.cls, special.sep, special.pad])].any()
  words_split = multi_piece_words = 0
  for row in range(ids.shape[0]):
    start = None
    for position in range(1, attention_mask[row].sum() - 1):
      if not table[ids[row, position]]:
        start = position
      word = chosen[row, start : position + 1]
      words_split += bool(word.any() and not word.all()) and not table[ids[row, position + 1]]
      multi_piece_words += bool(word.all() and position > start)
  assert words_split == 0 and multi_piece_words > 20, (words_split, multi_piece_words)
  # Labels are the originals; [MASK] written at about 85% of the masked pieces.
  np.testing.assert_array_equal(
    np.take_along_axis(ids, np.asarray(masked.positions), 1)[np.asarray(masked.weights) > 0],
    np.asarray(masked.labels)[np.asarray(masked.weights) > 0],
  )
  written = np.asarray(masked.input_ids)[chosen]
  assert 0.75 < np.mean(written == special.mask) < 0.95


def test_whole_word_masking_with_one_piece_words_is_token_masking():
  ids, attention_mask = _batch([60, 30, 64, 12])
  no_words = jnp.zeros(500, bool)
  masked = objectives.mask_whole_words(
    jax.random.key(1),
    ids,
    attention_mask,
    SPECIAL,
    no_words,
    mask_prob=0.15,
    mask_token_prob=0.85,
    max_predictions=10,
  )
  # Every piece is a word of one: the count is exactly mask_tokens'.
  reference = _mask(jax.random.key(1), ids, attention_mask)
  np.testing.assert_array_equal(masked.weights.sum(-1), reference.weights.sum(-1))
