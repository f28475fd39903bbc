"""Learning-rate schedule, weight-decay mask and the original's Adam variant."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from configs import tiny
from electra_jax import config_lib, optim, train
from electra_jax.finetune import train as finetune_train
from electra_jax.model import SequenceClassifier


def _config(**overrides):
  config = tiny.get_config()
  config.update(overrides)
  return config


def test_schedule_warms_up_and_decays_linearly():
  config = _config(learning_rate=1e-3, warmup_steps=10, num_train_steps=100)
  schedule = optim.learning_rate_schedule(config)
  assert float(schedule(0)) == 0.0
  assert float(schedule(5)) == pytest.approx(1e-3 * 0.5 * 0.95)
  assert float(schedule(10)) == pytest.approx(1e-3 * 0.9)
  assert float(schedule(55)) == pytest.approx(1e-3 * 0.45)
  assert float(schedule(100)) == 0.0


@pytest.mark.parametrize(
  'epochs, num_train, batch_size, per_epoch, total',
  [
    (3, 67_349, 32, 2_104, 6_312),  # SST-2: 3 x 67,349 / 32 = 6,313.97 spilled a step.
    (10, 1_000, 32, 31, 310),  # 312 before, two steps into an 11th epoch.
    (3, 3_200, 32, 100, 300),
    (2.5, 100, 32, 3, 7),  # A fractional last epoch keeps its partial pass.
    (0.01, 64, 32, 2, 1),  # At least one step.
  ],
)
def test_finetuning_steps_end_whole_epochs_on_an_evaluation(
  epochs, num_train, batch_size, per_epoch, total
):
  assert finetune_train.train_steps(epochs, num_train, batch_size) == (per_epoch, total)
  evaluations = -(-total // per_epoch)  # run_seed evaluates after each (partial) pass.
  assert evaluations == max(1, int(np.ceil(epochs)))


def test_weight_decay_skips_layer_norm_and_biases():
  config = tiny.get_config()
  model = train.build_model(config)
  ids = jnp.zeros((1, 8), jnp.int32)
  params = nn.meta.unbox(
    jax.eval_shape(model.init, jax.random.key(0), ids, ids, ids + 1, jnp.zeros((1, 2), jnp.int32))[
      'params'
    ]
  )
  mask = optim.weight_decay_mask(params)
  flat = {
    '/'.join(str(k.key) for k in path): v
    for path, v in jax.tree_util.tree_flatten_with_path(mask)[0]
  }
  assert flat['embeddings/word_embeddings/embedding']
  assert flat['discriminator/layers/attention/qkv/kernel']
  assert flat['generator/layers/intermediate/kernel']
  assert not flat['discriminator/layers/attention/qkv/bias']
  assert not flat['discriminator/layers/output_layer_norm/scale']
  assert not flat['embeddings/layer_norm/scale']
  assert not flat['generator_head/output_bias']
  assert sum(flat.values()) > 0 and not all(flat.values())


def test_optimizer_applies_decay_by_mask():
  config = _config(learning_rate=1.0, warmup_steps=0, num_train_steps=10, weight_decay=0.5)
  tx = optim.create_optimizer(config)
  params = {'dense': {'kernel': jnp.ones((2,)), 'bias': jnp.ones((2,))}}
  grads = jax.tree.map(jnp.zeros_like, params)
  updates, _ = tx.update(grads, tx.init(params), params)
  np.testing.assert_allclose(updates['dense']['kernel'], -0.5)  # -lr * wd * param.
  np.testing.assert_allclose(updates['dense']['bias'], 0.0)


def test_adam_without_bias_correction_matches_released_formula():
  b1, b2, eps = 0.9, 0.999, 1e-6
  tx = optim.scale_by_adam_without_bias_correction(b1, b2, eps)
  params = {'w': jnp.zeros((3,))}
  g1, g2 = jnp.array([1.0, -2.0, 0.5]), jnp.array([0.5, 1.0, -1.0])
  state = tx.init(params)
  u1, state = tx.update({'w': g1}, state)
  u2, _ = tx.update({'w': g2}, state)
  m1, v1 = (1 - b1) * g1, (1 - b2) * g1**2
  np.testing.assert_allclose(u1['w'], m1 / (np.sqrt(v1) + eps), rtol=1e-6)
  m2, v2 = b1 * m1 + (1 - b1) * g2, b2 * v1 + (1 - b2) * g2**2
  np.testing.assert_allclose(u2['w'], m2 / (np.sqrt(v2) + eps), rtol=1e-6)
  # Standard Adam differs exactly by the bias correction.
  corrected, _ = optax.scale_by_adam(b1, b2, eps).update(
    {'w': g1}, optax.scale_by_adam(b1, b2, eps).init(params)
  )
  assert not np.allclose(corrected['w'], u1['w'])


def _classifier_params(scan: bool):
  """Parameter shapes of a 3-layer SequenceClassifier."""
  config = _config()
  config.model.num_layers = 3
  config.model.scan_layers = scan
  model = SequenceClassifier(config_lib.discriminator_config(config), num_outputs=2)
  ids = jnp.zeros((1, 8), jnp.int32)
  return nn.meta.unbox(jax.eval_shape(model.init, jax.random.key(0), ids, ids, ids + 1))['params']


@pytest.mark.parametrize('scan', [True, False])
def test_layerwise_decay_gives_the_embeddings_the_most_decayed_rate(scan):
  params = _classifier_params(scan)
  scales = optim.layerwise_lr_scales(params, num_layers=3, decay=0.5)
  assert float(scales['classifier']['kernel']) == 1.0
  assert float(scales['embeddings']['word_embeddings']['embedding']) == 0.5**4
  assert float(scales['discriminator']['embeddings_project']['kernel']) == 0.5**4
  if scan:
    per_layer = scales['discriminator']['layers']['attention']['qkv']['kernel']
    assert per_layer.shape == (3, 1, 1, 1, 1)  # Broadcasts over [L, E, 3, N, D].
    assert per_layer.ravel().tolist() == [0.5**3, 0.5**2, 0.5]
  else:
    assert [float(scales['discriminator'][f'layer_{i}']['output']['bias']) for i in range(3)] == (
      [0.5**3, 0.5**2, 0.5]
    )
  # The released code's extra factor below the head.
  released = optim.layerwise_lr_scales(params, num_layers=3, decay=0.5, released_off_by_one=True)
  assert float(released['embeddings']['layer_norm']['scale']) == 0.5**5
  assert float(released['classifier']['bias']) == 1.0


def test_layerwise_scales_multiply_each_update():
  params = {
    'embeddings': {'w': jnp.ones(2)},
    'discriminator': {'layer_0': {'w': jnp.ones(2)}},
    'classifier': {'w': jnp.ones(2)},
  }
  scales = optim.layerwise_lr_scales(params, num_layers=1, decay=0.1)
  config = _config(adam_bias_correction=True, weight_decay=0.0, max_grad_norm=1e9)
  tx = optim.create_optimizer(config, schedule=lambda step: 1.0, lr_scales=scales)
  updates, _ = tx.update(jax.tree.map(jnp.ones_like, params), tx.init(params), params)
  # Adam's first step is -lr * sign(g); each parameter's lr is scaled.
  np.testing.assert_allclose(updates['classifier']['w'], -1.0, rtol=1e-5)
  np.testing.assert_allclose(updates['discriminator']['layer_0']['w'], -0.1, rtol=1e-5)
  np.testing.assert_allclose(updates['embeddings']['w'], -0.01, rtol=1e-5)
