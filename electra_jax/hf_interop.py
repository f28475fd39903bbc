"""Weights from HF `transformers` ELECTRA checkpoints into our parameter tree.

HF keeps the discriminator (`ElectraForPreTraining`) and generator
(`ElectraForMaskedLM`) as two models, each with its own copy of the
embeddings; we keep one shared embedding module unless embeddings are untied.
State dicts are plain {name: numpy array} mappings, so no torch is needed here.
"""

from collections.abc import Mapping

import jax
import numpy as np

from electra_jax.config_lib import EncoderConfig

StateDict = Mapping[str, np.ndarray]


def _dense(sd: StateDict, prefix: str) -> dict[str, np.ndarray]:
  # torch.nn.Linear stores [out, in]; flax kernels are [in, out].
  return {'kernel': np.asarray(sd[prefix + 'weight']).T, 'bias': np.asarray(sd[prefix + 'bias'])}


def _layer_norm(sd: StateDict, prefix: str) -> dict[str, np.ndarray]:
  return {'scale': np.asarray(sd[prefix + 'weight']), 'bias': np.asarray(sd[prefix + 'bias'])}


def _embeddings(sd: StateDict) -> dict:
  table = lambda name: {'embedding': np.asarray(sd[f'electra.embeddings.{name}.weight'])}
  return {'word_embeddings': table('word_embeddings'),
          'position_embeddings': table('position_embeddings'),
          'token_type_embeddings': table('token_type_embeddings'),
          'layer_norm': _layer_norm(sd, 'electra.embeddings.LayerNorm.')}


def _layer(sd: StateDict, prefix: str, cfg: EncoderConfig) -> dict:
  heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
  qkv = [_dense(sd, f'{prefix}attention.self.{name}.') for name in ('query', 'key', 'value')]
  output = _dense(sd, prefix + 'attention.output.dense.')
  return {
      'attention': {
          'qkv': {
              'kernel': np.stack([p['kernel'].reshape(-1, heads, head_dim) for p in qkv], axis=1),
              'bias': np.stack([p['bias'].reshape(heads, head_dim) for p in qkv], axis=0),
          },
          'output': {'kernel': output['kernel'].reshape(heads, head_dim, -1),
                     'bias': output['bias']},
      },
      'attention_layer_norm': _layer_norm(sd, prefix + 'attention.output.LayerNorm.'),
      'intermediate': _dense(sd, prefix + 'intermediate.dense.'),
      'output': _dense(sd, prefix + 'output.dense.'),
      'output_layer_norm': _layer_norm(sd, prefix + 'output.LayerNorm.'),
  }


def _encoder(sd: StateDict, cfg: EncoderConfig) -> dict:
  params = {}
  if cfg.embedding_size != cfg.hidden_size:
    params['embeddings_project'] = _dense(sd, 'electra.embeddings_project.')
  layers = [_layer(sd, f'electra.encoder.layer.{i}.', cfg) for i in range(cfg.num_layers)]
  if cfg.scan_layers:
    params['layers'] = jax.tree.map(lambda *xs: np.stack(xs), *layers)
  else:
    params.update({f'layer_{i}': layer for i, layer in enumerate(layers)})
  return params


def params_from_hf(discriminator: StateDict, generator: StateDict, *,
                   discriminator_cfg: EncoderConfig, generator_cfg: EncoderConfig,
                   untie_embeddings: bool = False) -> dict:
  """Our parameters from the state dicts of ElectraForPreTraining and ElectraForMaskedLM.

  With shared embeddings (the default) the discriminator's copy is used; HF
  checkpoints of ELECTRA hold identical copies in both models.
  """
  params = {
      'generator': _encoder(generator, generator_cfg),
      'generator_head': {
          'dense': _dense(generator, 'generator_predictions.dense.'),
          'layer_norm': _layer_norm(generator, 'generator_predictions.LayerNorm.'),
          'output_bias': np.asarray(generator['generator_lm_head.bias']),
      },
      'discriminator': _encoder(discriminator, discriminator_cfg),
      'discriminator_head': {
          'dense': _dense(discriminator, 'discriminator_predictions.dense.'),
          'prediction': _dense(discriminator, 'discriminator_predictions.dense_prediction.'),
      },
  }
  if untie_embeddings:
    params['generator_embeddings'] = _embeddings(generator)
    params['discriminator_embeddings'] = _embeddings(discriminator)
  else:
    params['embeddings'] = _embeddings(discriminator)
  return params
