"""Speed switches change speed, not results: bfloat16 activations, scan vs unrolled
layers, an unrolled scan, rematerialisation, fused attention. Correctness only;
nothing here is timed."""

import dataclasses
import functools

import flax.linen as nn
import jax
from jax._src.cudnn import fused_attention_stablehlo
import jax.numpy as jnp
import numpy as np

from configs import tiny
from electra_jax import model as model_lib
from electra_jax import objectives, sharding, train
from electra_jax.data import tokenizers


def _model(**model_overrides):
  """(config, model) for tiny with these model settings."""
  config = tiny.get_config()
  config.model.update(model_overrides)
  return config, train.build_model(config)


def _init(model, rng):
  ids = jnp.zeros((1, tiny.get_config().max_seq_length), jnp.int32)
  return nn.meta.unbox(model.init(rng, ids, ids, ids + 1, jnp.zeros((1, 9), jnp.int32))['params'])


def _model_and_params(**model_overrides):
  """(config, model, its initial parameters); a model whose parameters a test only
  compares by shape or type gets `_shapes` instead, which compiles nothing."""
  config, model = _model(**model_overrides)
  return config, model, jax.jit(functools.partial(_init, model))(jax.random.key(0))


def _shapes(model):
  return jax.eval_shape(functools.partial(_init, model), jax.random.key(0))


def _batch(real_token_rows, rows: int = 8):
  ids = jnp.asarray(real_token_rows[:rows])
  return {
    'input_ids': ids,
    'attention_mask': (ids != 0).astype(jnp.int32),
    'token_type_ids': jnp.zeros_like(ids),
  }


def _losses(config, model, params, batch, deterministic=True):
  obj = objectives.Settings.from_config(config, tokenizers.TRAINED_SPECIAL_IDS)
  return objectives.pretraining_losses(
    params, batch, jax.random.key(1), model=model, obj=obj, deterministic=deterministic
  )


def _unstack(params):
  """Scanned parameters ('layers', stacked on axis 0) as unrolled ones ('layer_i')."""
  out = dict(params)
  for network in ('generator', 'discriminator'):
    encoder = dict(params[network])
    stacked = encoder.pop('layers')
    count = jax.tree.leaves(stacked)[0].shape[0]
    # NumPy slices: eager JAX would compile a slice for each shape and layer.
    encoder.update(
      {f'layer_{i}': jax.tree.map(lambda x, i=i: np.asarray(x)[i], stacked) for i in range(count)}
    )
    out[network] = encoder
  return out


def test_bfloat16_activations_match_float32_losses(real_token_rows):
  config, model, params = _model_and_params()
  bf16_config, bf16_model = _model(dtype='bfloat16')
  # Parameters (and so the optimizer state) stay float32.
  assert {x.dtype for x in jax.tree.leaves(_shapes(bf16_model))} == {jnp.dtype('float32')}
  batch = _batch(real_token_rows)
  f32 = jax.jit(lambda p: _losses(config, model, p, batch))(params)
  bf16 = jax.jit(lambda p: _losses(bf16_config, bf16_model, p, batch))(params)
  for name, index in (('MLM', 0), ('discriminator', 1)):
    print(f'{name} loss: float32 {float(f32[index]):.5f}, bfloat16 {float(bf16[index]):.5f}')
    # bfloat16 keeps 8 bits of mantissa; losses and softmax are float32.
    np.testing.assert_allclose(bf16[index], f32[index], rtol=2e-2)


def test_scan_and_unrolled_layers_give_the_same_outputs(real_token_rows):
  config, scanned, params = _model_and_params()
  _, unrolled = _model(scan_layers=False)
  converted = _unstack(params)
  assert jax.tree.structure(converted) == jax.tree.structure(_shapes(unrolled))
  batch = _batch(real_token_rows)
  # Without dropout: nn.scan splits dropout keys per layer, while unrolled
  # layers fold in their names, so the two draw different (equally valid) masks.
  a = jax.jit(lambda p: _losses(config, scanned, p, batch))(params)
  b = jax.jit(lambda p: _losses(config, unrolled, p, batch))(converted)
  print(
    f'scan vs unrolled: MLM {float(a[0]):.6f} / {float(b[0]):.6f}, '
    f'discriminator {float(a[1]):.6f} / {float(b[1]):.6f}'
  )
  np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
  np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


def test_unrolling_the_scan_changes_nothing_but_speed(real_token_rows):
  config, scanned, params = _model_and_params()
  _, unrolled, unrolled_params = _model_and_params(
    scan_unroll=config.model.num_layers, remat_policy='full'
  )
  # The same initial parameters: train._init_params relies on it to init
  # from a rolled scan whatever the config unrolls.
  jax.tree.map(np.testing.assert_array_equal, params, unrolled_params)
  batch = _batch(real_token_rows)
  # Dropout on: an unrolled scan splits the layers' keys as the rolled one does.
  a = jax.jit(lambda p: _losses(config, scanned, p, batch, deterministic=False))(params)
  b = jax.jit(lambda p: _losses(config, unrolled, p, batch, deterministic=False))(params)
  np.testing.assert_allclose(a[0], b[0], rtol=1e-6)
  np.testing.assert_allclose(a[1], b[1], rtol=1e-6)


def test_all_layers_stacks_the_input_and_each_layers_output(real_token_rows):
  # Checked against the layers applied one by one, for scanned and unrolled stacks.
  config, model, params = _model_and_params()
  cfg = model.discriminator_cfg
  unrolled_cfg = dataclasses.replace(cfg, scan_layers=False)
  batch = _batch(real_token_rows, rows=4)
  embedded = model_lib.Embeddings(cfg).apply(
    {'params': params['embeddings']}, batch['input_ids'], batch['token_type_ids'], True
  )
  project = params['discriminator']['embeddings_project']
  x = embedded @ project['kernel'] + project['bias']
  expected = [x]
  layers = _unstack(params)['discriminator']
  for i in range(cfg.num_layers):
    x, _ = model_lib.EncoderLayer(unrolled_cfg).apply(
      {'params': layers[f'layer_{i}']}, x, batch['attention_mask'], True
    )
    expected.append(x)
  for encoder_cfg, encoder_params in ((cfg, params['discriminator']), (unrolled_cfg, layers)):
    encoder = model_lib.Encoder(encoder_cfg)
    stacked = encoder.apply(
      {'params': encoder_params}, embedded, batch['attention_mask'], True, all_layers=True
    )
    assert stacked.shape == (cfg.num_layers + 1, *x.shape)
    np.testing.assert_allclose(stacked, np.stack(expected), rtol=1e-5, atol=1e-5)
    last = encoder.apply({'params': encoder_params}, embedded, batch['attention_mask'], True)
    np.testing.assert_array_equal(stacked[-1], last)


def test_remat_does_not_change_gradients(real_token_rows):
  batch = _batch(real_token_rows, rows=4)
  config, _, params = _model_and_params()
  policies = ('none', 'full', 'dots_saveable')
  models = [_model(remat_policy=policy)[1] for policy in policies]

  def all_grads(p):
    # Dropout on: recomputation must redraw the same masks.
    return [
      jax.grad(lambda q, m=m: sum(_losses(config, m, q, batch, deterministic=False)[:2]))(p)
      for m in models
    ]

  reference, *rematerialised = jax.jit(all_grads)(params)  # One compile for all three.
  for policy, grads in zip(policies[1:], rematerialised):
    for a, b in zip(jax.tree.leaves(reference), jax.tree.leaves(grads)):
      np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7, err_msg=policy)


def _lowered_lines(**model_overrides) -> int:
  """Lines of the train step's StableHLO for tiny with these model settings."""
  config = tiny.get_config()
  config.model.update(model_overrides)
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  with jax.set_mesh(mesh):
    lowered, _ = train.lower_abstract_train_step(config, mesh, tokenizers.TRAINED_SPECIAL_IDS)
  return len(lowered.as_text().splitlines())


def test_scanned_program_does_not_grow_with_depth():
  # What compile time follows: XLA compiles the scan's body once, whatever the
  # depth (base on a v5e-1: 41-42 s at 6, 12 and 24 layers;
  # docs/experiments/2026-11-23_tpu_compile_and_memory.md).
  scanned = [_lowered_lines(num_layers=n) for n in (2, 8)]
  unrolled = [_lowered_lines(num_layers=n, scan_layers=False) for n in (2, 8)]
  print(f'StableHLO lines at 2 and 8 layers: scanned {scanned}, unrolled {unrolled}')
  assert scanned[1] < 1.05 * scanned[0], scanned
  assert unrolled[1] > 2 * unrolled[0], unrolled


def test_fused_attention_matches_explicit_on_padded_rows(real_token_rows):
  # jax.nn.dot_product_attention ('xla'; 'cudnn' on a GPU) gets the padding as
  # row lengths; the explicit einsum path as a mask.
  config, explicit, params = _model_and_params(attention_dropout_rate=0.0)
  fused_config, fused = _model(attention_dropout_rate=0.0, attention_impl='xla')
  # Real rows cut to different lengths, the rest padding.
  lengths = np.array([64, 50, 37, 20, 64, 9, 33, 60])[:, None]
  batch = _batch(np.where(np.arange(64) < lengths, real_token_rows[:8], 0))
  logits = lambda m: jax.jit(
    lambda p: m.apply(
      {'params': p},
      batch['input_ids'],
      batch['token_type_ids'],
      batch['attention_mask'],
      method=m.discriminator_logits,
    )
  )(params)
  real = batch['attention_mask'] > 0
  np.testing.assert_allclose(logits(fused)[real], logits(explicit)[real], rtol=1e-5, atol=1e-5)
  a = jax.jit(lambda p: _losses(config, explicit, p, batch))(params)
  b = jax.jit(lambda p: _losses(fused_config, fused, p, batch))(params)
  np.testing.assert_allclose(a[:2], b[:2], rtol=1e-5)


def test_cudnn_attention_lowers_for_a_gpu(real_token_rows, monkeypatch):
  # No GPU here: JAX's cuDNN checks are told that cuDNN 9.10 on a Hopper GPU is
  # present, and the whole gradient computation is lowered (not compiled) for
  # CUDA. A padding mask given as a [B, 1, 1, L] mask failed here.
  monkeypatch.setattr(fused_attention_stablehlo, 'check_cudnn_version', lambda: 91000)
  monkeypatch.setattr(fused_attention_stablehlo, 'check_compute_capability', lambda _: True)
  config, model = _model(attention_dropout_rate=0.0, attention_impl='cudnn', dtype='bfloat16')
  obj = objectives.Settings.from_config(config, tokenizers.TRAINED_SPECIAL_IDS)
  gradients = jax.jit(functools.partial(objectives.pretraining_gradients, model=model, obj=obj))
  lowered = gradients.trace(_shapes(model), _batch(real_token_rows), jax.random.key(0)).lower(
    lowering_platforms=('cuda',)
  )
  text = lowered.as_text()
  assert '@__cudnn$fmhaSoftmax(' in text and '@__cudnn$fmhaSoftmaxBackward(' in text
  assert '\\22mask_type\\22: \\22PADDING\\22' in text
