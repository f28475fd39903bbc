"""Model: numerical parity with HF transformers ELECTRA, and gradient routing."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from configs import tiny
from electra_jax import config_lib, hf_interop, objectives, train
from electra_jax.data import tokenizers
from electra_jax.model import ElectraPretrainingModel, sinusoidal_positions
from tests.conftest import require

torch = require('torch')
transformers = require('transformers')

VOCAB, EMBED, HIDDEN, GEN_HIDDEN, LAYERS, MAX_POS = 1000, 64, 128, 64, 3, 40


def _encoder_cfg(hidden: int, scan: bool) -> config_lib.EncoderConfig:
  return config_lib.EncoderConfig(
    vocab_size=VOCAB,
    embedding_size=EMBED,
    hidden_size=hidden,
    num_layers=LAYERS,
    num_heads=hidden // 64,
    intermediate_size=4 * hidden,
    max_position_embeddings=MAX_POS,
    type_vocab_size=2,
    dropout_rate=0.1,
    attention_dropout_rate=0.1,
    layer_norm_eps=1e-12,
    initializer_range=0.02,
    dtype='float32',
    scan_layers=scan,
    scan_unroll=1,
    remat_policy='none',
    attention_impl='explicit',
    position_embedding_init='normal',
  )


def _hf_config(hidden: int):
  return transformers.ElectraConfig(
    vocab_size=VOCAB,
    embedding_size=EMBED,
    hidden_size=hidden,
    num_hidden_layers=LAYERS,
    num_attention_heads=hidden // 64,
    intermediate_size=4 * hidden,
    max_position_embeddings=MAX_POS,
    type_vocab_size=2,
    hidden_act='gelu',
    layer_norm_eps=1e-12,
  )


@pytest.fixture(scope='module')
def hf_models():
  """HF discriminator and generator with random weights and one shared embedding."""
  torch.manual_seed(0)
  disc = transformers.ElectraForPreTraining(_hf_config(HIDDEN)).eval()
  gen = transformers.ElectraForMaskedLM(_hf_config(GEN_HIDDEN)).eval()
  with torch.no_grad():
    # Random biases and LayerNorm parameters too, so every mapping is exercised.
    for model in (disc, gen):
      for p in model.parameters():
        p.add_(0.1 * torch.randn_like(p))
    gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    gen.generator_lm_head.weight = gen.electra.embeddings.word_embeddings.weight
  return disc, gen


def _state_dict(model):
  return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def _inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(5, VOCAB, (3, 32)).astype(np.int64)
  attention_mask = np.ones_like(ids)
  attention_mask[1, 20:] = 0  # Padding on one row.
  attention_mask[2, 9:] = 0
  token_type_ids = np.zeros_like(ids)
  token_type_ids[:, 16:] = 1
  positions = np.array([[1, 5, 30], [2, 3, 19], [8, 1, 4]], np.int64)
  return ids, attention_mask, token_type_ids, positions


@pytest.mark.parametrize('scan', [True, False])
def test_logits_match_hf_transformers(hf_models, scan):
  disc, gen = hf_models
  params = hf_interop.params_from_hf(
    _state_dict(disc),
    _state_dict(gen),
    discriminator_cfg=_encoder_cfg(HIDDEN, scan),
    generator_cfg=_encoder_cfg(GEN_HIDDEN, scan),
  )
  model = ElectraPretrainingModel(_encoder_cfg(GEN_HIDDEN, scan), _encoder_cfg(HIDDEN, scan))
  ids, attention_mask, token_type_ids, positions = _inputs()
  variables = {'params': jax.tree.map(jnp.asarray, params)}
  ours_gen, ours_disc = model.apply(
    variables,
    ids.astype(np.int32),
    token_type_ids.astype(np.int32),
    attention_mask.astype(np.int32),
    positions.astype(np.int32),
  )
  with torch.no_grad():
    args = dict(
      input_ids=torch.tensor(ids),
      attention_mask=torch.tensor(attention_mask),
      token_type_ids=torch.tensor(token_type_ids),
    )
    hf_disc = disc(**args).logits.numpy()
    hf_gen = np.take_along_axis(gen(**args).logits.numpy(), positions[..., None], axis=1)
  disc_err = np.abs(np.asarray(ours_disc) - hf_disc).max()
  gen_err = np.abs(np.asarray(ours_gen) - hf_gen).max()
  print(
    f'parity (scan={scan}): max |discriminator logit error| {disc_err:.2e}, '
    f'max |generator logit error| {gen_err:.2e}'
  )
  assert disc_err < 1e-4 and gen_err < 1e-4
  assert np.abs(hf_disc).max() > 0.5 and np.abs(hf_gen).max() > 0.5  # Not trivially small.


def _nonzero(tree) -> bool:
  return any(float(jnp.abs(x).max()) > 0 for x in jax.tree.leaves(tree))


def _all_zero(tree) -> bool:
  return all(float(jnp.abs(x).max()) == 0 for x in jax.tree.leaves(tree))


def test_gradient_routing():
  config = tiny.get_config()
  model = train.build_model(config)
  ids = np.random.default_rng(0).integers(5, config.model.vocab_size, (4, 64)).astype(np.int32)
  ids[:, 0], ids[:, -1] = 2, 3
  batch = {
    'input_ids': jnp.asarray(ids),
    'attention_mask': jnp.ones_like(ids),
    'token_type_ids': jnp.zeros_like(ids),
  }
  params = nn.meta.unbox(
    jax.jit(model.init)(
      jax.random.key(0),
      batch['input_ids'],
      batch['token_type_ids'],
      batch['attention_mask'],
      jnp.zeros((4, 9), jnp.int32),
    )['params']
  )
  obj = objectives.Settings.from_config(config, tokenizers.TRAINED_SPECIAL_IDS)

  def loss(index):
    return lambda p: objectives.pretraining_losses(
      p, batch, jax.random.key(1), model=model, obj=obj
    )[index]

  # One jit: op-by-op execution of the backward passes is several times slower.
  (mlm_loss, mlm_grads), (disc_loss, disc_grads), (step_grads, metrics) = jax.jit(
    lambda p: (
      jax.value_and_grad(loss(0))(p),
      jax.value_and_grad(loss(1))(p),
      objectives.pretraining_gradients(p, batch, jax.random.key(1), model=model, obj=obj),
    )
  )(params)
  # The train step's two-phase gradients are those of the weighted sum.
  expected = jax.tree.map(
    lambda m, d: obj.gen_weight * m + obj.disc_weight * d, mlm_grads, disc_grads
  )
  assert jax.tree.structure(step_grads) == jax.tree.structure(expected)
  for got, want in zip(jax.tree.leaves(step_grads), jax.tree.leaves(expected)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(
    metrics['loss'], obj.gen_weight * mlm_loss + obj.disc_weight * disc_loss, rtol=1e-6
  )
  for name in ('generator', 'generator_head'):
    assert _all_zero(disc_grads[name]), f'discriminator loss reached {name}'
    assert _nonzero(mlm_grads[name])
  for name in ('discriminator', 'discriminator_head'):
    assert _all_zero(mlm_grads[name]), f'MLM loss reached {name}'
    assert _nonzero(disc_grads[name])
  for table in ('word_embeddings', 'position_embeddings', 'layer_norm'):
    assert _nonzero(mlm_grads['embeddings'][table]) and _nonzero(disc_grads['embeddings'][table])


def test_untied_embeddings_are_separate():
  config = tiny.get_config()
  config.model.embedding_sharing = 'untied'
  model = train.build_model(config)
  ids = jnp.full((1, 8), 7, jnp.int32)
  params = jax.eval_shape(
    model.init, jax.random.key(0), ids, ids * 0, ids * 0 + 1, jnp.zeros((1, 2), jnp.int32)
  )
  assert {'generator_embeddings', 'discriminator_embeddings'} <= set(params['params'])
  assert 'embeddings' not in params['params']


@pytest.mark.parametrize('init', config_lib.POSITION_EMBEDDING_INITS)
def test_position_table_init(init):
  """'sinusoidal' starts the position table as sin/cos rows at the scale of 'normal's
  N(0, 0.02) rows, so that neighbouring positions start alike; 'normal' rows do not."""
  config = tiny.get_config()
  config.model.position_embedding_init = init
  model = train.build_model(config)
  ids = jnp.full((1, 8), 7, jnp.int32)
  params = jax.jit(
    lambda rng: model.init(rng, ids, ids * 0, ids * 0 + 1, jnp.zeros((1, 2), jnp.int32))
  )(jax.random.key(0))
  table = np.asarray(
    nn.meta.unbox(params)['params']['embeddings']['position_embeddings']['embedding']
  )
  assert 0.015 < np.sqrt(np.mean(table**2)) < 0.025
  rows = table / np.linalg.norm(table, axis=1, keepdims=True)
  neighbours = np.mean(np.sum(rows[:-1] * rows[1:], axis=1))
  if init == 'sinusoidal':
    np.testing.assert_allclose(table, sinusoidal_positions(*table.shape, 0.02), rtol=1e-6)
    assert neighbours > 0.8
  else:
    assert abs(neighbours) < 0.2
