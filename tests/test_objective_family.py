"""The objective family on tiny inputs: each objective's semantics, the released code's
switches, GDES embedding sharing, and the train step's two-phase gradients for each."""

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
import numpy as np
import pytest

from configs import tiny
from electra_jax import config_lib, objectives, pretrain_eval, sharding, train
from electra_jax.data import tokenizers
from tests.conftest import perturbed, require

SPECIAL = tokenizers.TRAINED_SPECIAL_IDS


def _config(objective='electra', **model):
  config = tiny.get_config()
  config.model.num_layers = 1  # Compiles in half the time of tiny's 2.
  config.objective.name = objective
  for key, value in model.items():
    if key in config.objective:
      config.objective[key] = value
    else:
      config.model[key] = value
  config_lib.validate(config, check_data=False)
  return config


def _batch(rows=4, length=64, vocab=2000, seed=0):
  ids = np.random.default_rng(seed).integers(5, vocab, (rows, length)).astype(np.int32)
  ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
  attention_mask = np.ones_like(ids)
  attention_mask[1, 40:] = 0
  ids[1, 40:] = SPECIAL.pad
  ids[1, 39] = SPECIAL.sep
  return {
    'input_ids': jnp.asarray(ids),
    'attention_mask': jnp.asarray(attention_mask),
    'token_type_ids': jnp.zeros_like(ids),
  }


def _init(model, batch, seed=0):
  return model.init(
    jax.random.key(seed),
    batch['input_ids'],
    batch['token_type_ids'],
    batch['attention_mask'],
    jnp.zeros((4, 9), jnp.int32),
  )['params']


def _networks(config) -> set[str]:
  """The names of the model's top-level parameter groups, from shapes alone."""
  model = train.build_model(config)
  return set(jax.eval_shape(lambda batch: _init(model, batch), _batch()))


def _setup(config, seed=0):
  """(model, params with random non-zero values everywhere, settings, batch)."""
  model = train.build_model(config)
  batch = _batch()
  params = nn.meta.unbox(jax.jit(lambda b: _init(model, b, seed))(batch))
  # GDES's residual tables start at zero; give every leaf a value that shows.
  params = perturbed(params, seed + 1, 0.02)
  return model, params, objectives.Settings.from_config(config, SPECIAL), batch


_VARIANTS = {
  'electra_15': dict(objective='electra_15'),
  'mlm': dict(objective='mlm'),
  'replace_mlm': dict(objective='replace_mlm'),
  'all_tokens_mlm': dict(objective='all_tokens_mlm'),
  'electric': dict(objective='electric'),
  'gdes': dict(embedding_sharing='gdes'),
  # The generator's gradients also reach the full-size encoder it shares.
  'tied_generator': dict(tie_generator_to_discriminator=True, generator_hidden_fraction=1.0),
}


@pytest.mark.parametrize(
  'variant',
  [
    # Electric (not in Table 5) compiles for 20 s: heavy, for the suite's time. Its
    # semantics are tested below, and its CLI run resumes in test_objectives_cli.
    pytest.param(v, marks=pytest.mark.heavy) if v == 'electric' else v
    for v in sorted(_VARIANTS)
  ],
)
def test_two_phase_gradients_are_those_of_the_weighted_losses(variant):
  config = _config(**_VARIANTS[variant])
  model, params, obj, batch = _setup(config)
  rng = jax.random.key(3)

  def weighted(p):
    gen_loss, main_loss, _ = objectives.pretraining_losses(p, batch, rng, model=model, obj=obj)
    return obj.gen_weight * gen_loss + obj.main_weight * main_loss, (gen_loss, main_loss)

  # One jit, and one backward pass for the weighted sum: compiling is the cost here.
  ((loss, (gen_loss, main_loss)), expected), (step_grads, metrics) = jax.jit(
    lambda p: (
      jax.value_and_grad(weighted, has_aux=True)(p),
      objectives.pretraining_gradients(p, batch, rng, model=model, obj=obj),
    )
  )(params)
  for got, want in zip(jax.tree.leaves(step_grads), jax.tree.leaves(expected), strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(metrics['loss'], loss, rtol=1e-6)
  assert float(main_loss) > 0
  assert (float(gen_loss) > 0) == obj.generator_network


def test_each_objective_trains_the_networks_it_names():
  names = {objective: _networks(_config(objective)) for objective in config_lib.OBJECTIVES}
  rtd = {'embeddings', 'generator', 'generator_head', 'discriminator', 'discriminator_head'}
  assert names['electra'] == names['electra_15'] == rtd
  # BERT: one network and its MLM head, no generator.
  assert names['mlm'] == {'embeddings', 'discriminator', 'mlm_head'}
  assert names['replace_mlm'] == {
    'embeddings',
    'generator',
    'generator_head',
    'discriminator',
    'mlm_head',
  }
  assert names['all_tokens_mlm'] == names['replace_mlm'] | {'copy_head'}
  # Electric: a two-tower cloze generator beside the discriminator.
  assert names['electric'] == rtd - {'generator'} | {'generator_ltr', 'generator_rtl'}
  # The released code's switches.
  assert _networks(_config(uniform_generator=True)) == {
    'embeddings',
    'discriminator',
    'discriminator_head',
  }
  tied = _config(tie_generator_to_discriminator=True, generator_hidden_fraction=1.0)
  assert _networks(tied) == rtd - {'generator'}
  config = _config(num_layers=4, generator_layers_fraction=0.5)
  assert config_lib.generator_config(config).num_layers == 2
  assert config_lib.discriminator_config(config).num_layers == 4


def test_electra_15_counts_only_the_masked_positions():
  config = _config('electra_15')
  model, params, obj, batch = _setup(config)
  out = objectives.pretraining_outputs(
    params, batch, jax.random.key(4), model=model, obj=obj, deterministic=True
  )
  weights = objectives.masked_position_weights(out.corruption.masked, 64)
  assert float(weights.sum()) == float(out.corruption.masked.weights.sum()) > 0
  # The loss's weights are zero off the masked positions: its gradient there is zero.
  grad = jax.grad(
    lambda logits: objectives.discriminator_loss(logits, out.corruption.is_replaced, weights)[0]
  )(out.main_logits)
  assert np.all(np.asarray(grad)[np.asarray(weights) == 0] == 0)
  assert np.all(np.asarray(grad)[np.asarray(weights) == 1] != 0)
  # And the pass's loss is that loss.
  _, main_loss, _ = objectives.pretraining_losses(
    params, batch, jax.random.key(4), model=model, obj=obj, deterministic=True
  )
  expected, _ = objectives.discriminator_loss(out.main_logits, out.corruption.is_replaced, weights)
  np.testing.assert_allclose(main_loss, expected, rtol=1e-6)


@pytest.mark.parametrize(
  'objective', ['electra', 'electra_15', 'replace_mlm', 'all_tokens_mlm', 'mlm']
)
def test_held_out_figures_count_the_tokens_the_loss_counts(objective):
  config = _config(objective)
  model, params, obj, batch = _setup(config)
  # A common token every MLM head favours, so that the accuracies are not all zero.
  batch['input_ids'] = batch['input_ids'].at[:, 10:26].set(7)
  for head in {'generator_head', 'mlm_head'} & set(params):
    params[head]['output_bias'] = params[head]['output_bias'].at[7].add(10.0)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  replicated = NamedSharding(mesh, PartitionSpec())
  batch_sharding = sharding.batch_sharding(mesh, config.mesh.logical_axis_rules)
  step = pretrain_eval.make_eval_step(
    model, obj, config, jax.tree.map(lambda _: replicated, params), batch_sharding
  )
  sums, logits, labels, weights, ids = jax.device_get(step(params, batch, np.int32(0)))
  kept = weights > 0
  folds = np.arange(int(kept.sum())) % 2
  held_out = pretrain_eval.summarize(sums, logits[kept], labels[kept], ids[kept], folds)
  # The eval step's key for batch 0, and the same deterministic pass.
  rng = jax.random.fold_in(jax.random.key(config.eval.seed), 0)
  _, main_loss, metrics = objectives.pretraining_losses(
    params, batch, rng, model=model, obj=obj, deterministic=True
  )
  # Every figure both report agrees: each network's MLM, the samples, the discriminator.
  shared = set(held_out) & set(metrics)
  rtd = objective in objectives.RTD_OBJECTIVES
  main = objectives.main_mlm_prefix(objective)
  expected = (
    {'disc_loss', 'disc_accuracy', 'disc_recall'} if rtd else {f'{main}_loss', f'{main}_accuracy'}
  )
  if objective != 'mlm':
    expected |= {'mlm_loss', 'mlm_accuracy', 'sampled_accuracy'}
  assert expected <= shared, expected - shared
  for name in shared:
    np.testing.assert_allclose(held_out[name], metrics[name], rtol=1e-5, err_msg=name)
  assert all(held_out[name] > 0 for name in expected), held_out
  masked = float(sums['masked'])
  assert held_out['tokens'] == float(sums['tokens']) > masked
  if not rtd:
    return
  np.testing.assert_allclose(held_out['disc_loss'], main_loss, rtol=1e-5)
  assert float(sums['counted']) == (masked if objective == 'electra_15' else sums['tokens'])
  # The context-free AUC reads the ids the discriminator read.
  out = objectives.pretraining_outputs(params, batch, rng, model=model, obj=obj, deterministic=True)
  np.testing.assert_array_equal(ids, out.corruption.corrupted)
  assert 0 <= held_out['context_free_auc'] <= 1 and 0 <= held_out['same_token_auc'] <= 1


@pytest.mark.parametrize('objective', ['replace_mlm', 'all_tokens_mlm', 'mlm'])
def test_what_the_full_size_network_reads(objective):
  model, params, obj, batch = _setup(_config(objective))
  out = objectives.pretraining_outputs(
    params, batch, jax.random.key(5), model=model, obj=obj, deterministic=True
  )
  c = out.corruption
  rows = np.arange(4)[:, None]
  used = np.asarray(c.masked.weights) > 0
  positions = np.asarray(c.masked.positions)
  at_masked = np.asarray(c.corrupted)[rows, positions]
  original = np.asarray(batch['input_ids'])
  if objective == 'mlm':
    # BERT reads [MASK] at most masked positions (85%), the original elsewhere.
    assert (at_masked[used] == SPECIAL.mask).mean() > 0.5
    assert c.sampled is None
  else:
    # The generator's samples at every masked position, and no [MASK] anywhere.
    np.testing.assert_array_equal(at_masked[used], np.asarray(c.sampled)[used])
    assert not np.any(np.asarray(c.corrupted) == SPECIAL.mask)
  untouched = np.ones_like(original, bool)
  untouched[np.broadcast_to(rows, positions.shape)[used], positions[used]] = False
  np.testing.assert_array_equal(np.asarray(c.corrupted)[untouched], original[untouched])
  # Its logits predict the originals at the masked positions.
  assert out.main_logits.shape == (4, positions.shape[1], 2000)


def test_electric_reads_a_cloze_model_and_the_noise_odds_of_every_token():
  config = _config('electric', temperature=2.0)
  model, params, obj, batch = _setup(config)
  args = (batch['token_type_ids'], batch['attention_mask'], True)
  cloze = jax.jit(lambda p, ids: model.apply({'params': p}, ids, *args, method=model.cloze_logits))
  energies = jax.jit(
    lambda p, ids: model.apply({'params': p}, ids, *args, method=model.discriminator_logits)
  )
  # Position t's distribution never reads token t, and reads the tokens around it.
  before = np.asarray(cloze(params, batch['input_ids']))
  after = np.asarray(cloze(params, batch['input_ids'].at[0, 10].set(7)))
  np.testing.assert_array_equal(after[0, 10], before[0, 10])
  assert np.abs(after[0, 9] - before[0, 9]).max() > 1e-4
  assert np.abs(after[0, 11] - before[0, 11]).max() > 1e-4
  np.testing.assert_array_equal(after[1:], before[1:])

  out = objectives.pretraining_outputs(
    params, batch, jax.random.key(6), model=model, obj=obj, deterministic=True
  )
  c = out.corruption
  assert np.asarray(c.is_replaced).sum() > 0
  # The noise log-odds: the tempered cloze distribution, read from the original text,
  # at the token each position now holds, plus log(0.15 / 0.85).
  tempered = before.astype(np.float64) / 2.0
  log_q = tempered - np.log(np.exp(tempered).sum(-1, keepdims=True))
  rows, cols = np.indices(c.corrupted.shape)
  expected = log_q[rows, cols, np.asarray(c.corrupted)] + np.log(0.15 / 0.85)
  np.testing.assert_allclose(c.noise_log_odds, expected, rtol=1e-5, atol=1e-5)
  # A token's logit of being noise: its energy plus those odds.
  np.testing.assert_allclose(
    out.main_logits, energies(params, c.corrupted) + c.noise_log_odds, rtol=1e-5, atol=1e-5
  )
  # Text as it stands: the same sum over the original tokens.
  unchanged = log_q[rows, cols, np.asarray(batch['input_ids'])] + np.log(0.15 / 0.85)
  np.testing.assert_allclose(
    objectives.electric_logits(params, batch, model=model, obj=obj),
    energies(params, batch['input_ids']) + unchanged,
    rtol=1e-5,
    atol=1e-5,
  )

  # The noise is given: the discriminator's loss trains no part of the generator.
  grads = jax.grad(
    lambda p: objectives.pretraining_losses(
      p, batch, jax.random.key(6), model=model, obj=obj, deterministic=True
    )[1]
  )(params)
  for name in ('generator_ltr', 'generator_rtl', 'generator_head'):
    assert all(np.all(np.asarray(g) == 0) for g in jax.tree.leaves(grads[name])), name
  assert any(np.any(np.asarray(g) != 0) for g in jax.tree.leaves(grads['discriminator']))


@pytest.mark.parametrize(
  'setting, key',
  [
    (dict(uniform_generator=True), 'objective.uniform_generator'),
    (dict(disallow_correct=True), 'objective.disallow_correct'),
    (dict(attention_impl='cudnn'), 'model.attention_impl'),
  ],
)
def test_electric_refuses_what_its_noise_distribution_cannot_follow(setting, key):
  with pytest.raises(config_lib.ConfigError, match=key.replace('.', r'\.')):
    _config('electric', **setting)


def test_all_tokens_mlm_copies_with_probability_d():
  rng = np.random.default_rng(0)
  mlm_logits = jnp.asarray(rng.normal(size=(2, 5, 11)) * 3, jnp.float32)
  copy_logits = jnp.asarray(rng.normal(size=(2, 5)) * 2, jnp.float32)
  inputs = jnp.asarray(rng.integers(0, 11, (2, 5)), jnp.int32)
  probs = np.exp(
    np.asarray(objectives.copy_mixture_log_probs(mlm_logits, copy_logits, inputs), np.float64)
  )
  np.testing.assert_allclose(probs.sum(-1), 1, rtol=1e-5)
  d = 1 / (1 + np.exp(-np.asarray(copy_logits, np.float64)))
  softmax = np.exp(mlm_logits) / np.exp(mlm_logits).sum(-1, keepdims=True)
  expected = (1 - d)[..., None] * softmax
  expected[np.arange(2)[:, None], np.arange(5)[None, :], np.asarray(inputs)] += d
  np.testing.assert_allclose(probs, expected, rtol=1e-4, atol=1e-7)


def _masked_rows(rows=256, length=16, vocab=50):
  ids = np.random.default_rng(1).integers(5, vocab, (rows, length)).astype(np.int32)
  ids[:, 0], ids[:, -1] = SPECIAL.cls, SPECIAL.sep
  batch = {
    'input_ids': jnp.asarray(ids),
    'attention_mask': jnp.ones_like(ids),
    'token_type_ids': jnp.zeros_like(ids),
  }
  masked = objectives.mask_tokens(
    jax.random.key(2),
    batch['input_ids'],
    batch['attention_mask'],
    SPECIAL,
    mask_prob=0.5,
    mask_token_prob=0.85,
    max_predictions=8,
  )
  return batch, masked


def test_uniform_generator_samples_uniformly():
  stats = require('scipy.stats')
  vocab = 50
  batch, masked = _masked_rows(vocab=vocab)
  obj = objectives.Settings(
    name='electra',
    special=SPECIAL,
    mask_prob=0.5,
    mask_token_prob=0.85,
    max_predictions=8,
    temperature=1.0,
    gen_weight=1.0,
    disc_weight=50.0,
    uniform_generator=True,
    vocab_size=vocab,
  )
  c = objectives.sample_and_corrupt(jax.random.key(3), batch, masked, None, obj)
  samples = np.asarray(c.sampled)[np.asarray(masked.weights) > 0]
  counts = np.bincount(samples, minlength=vocab)
  assert len(samples) == 256 * 8 and len(counts) == vocab
  # Every id of the vocabulary, specials included, as the released code's flat logits.
  assert stats.chisquare(counts).pvalue > 1e-3
  peaked = np.zeros(vocab)
  peaked[:5] = len(samples) / 5  # What a sampler stuck on five ids would give.
  assert stats.chisquare(peaked + 1e-9).pvalue < 1e-3


def test_disallow_correct_never_samples_the_original():
  batch, masked = _masked_rows()
  # A generator certain of the original token.
  logits = jax.nn.one_hot(masked.labels, 50) * 30.0
  kwargs = dict(
    name='electra',
    special=SPECIAL,
    mask_prob=0.5,
    mask_token_prob=0.85,
    max_predictions=8,
    temperature=1.0,
    gen_weight=1.0,
    disc_weight=50.0,
  )
  used = np.asarray(masked.weights) > 0
  allowed = objectives.sample_and_corrupt(
    jax.random.key(3), batch, masked, logits, objectives.Settings(**kwargs)
  )
  assert np.mean(np.asarray(allowed.sampled)[used] == np.asarray(masked.labels)[used]) > 0.99
  disallowed = objectives.sample_and_corrupt(
    jax.random.key(3), batch, masked, logits, objectives.Settings(**kwargs, disallow_correct=True)
  )
  assert not np.any(np.asarray(disallowed.sampled)[used] == np.asarray(masked.labels)[used])
  # So every masked position counts as replaced.
  assert int(disallowed.is_replaced.sum()) == int(used.sum())


def _all_zero(tree) -> bool:
  return all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(tree))


def test_gdes_disentangles_the_embedding_gradients():
  config = _config(embedding_sharing='gdes')
  model, params, obj, batch = _setup(config)
  assert {'embeddings', 'discriminator_embeddings'} <= set(params)

  def loss(index):
    return lambda p: objectives.pretraining_losses(
      p, batch, jax.random.key(6), model=model, obj=obj
    )[index]

  gen_grads, disc_grads = jax.jit(lambda p: (jax.grad(loss(0))(p), jax.grad(loss(1))(p)))(params)
  # The discriminator's loss never reaches the shared tables, the MLM loss never the
  # residual ones; each reaches its own.
  assert _all_zero(disc_grads['embeddings'])
  assert _all_zero(gen_grads['discriminator_embeddings'])
  assert not _all_zero(gen_grads['embeddings'])
  for name in ('word_embeddings', 'position_embeddings', 'layer_norm'):
    assert not _all_zero(disc_grads['discriminator_embeddings'][name]), name
