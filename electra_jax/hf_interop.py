"""HF `transformers` ELECTRA checkpoints <-> our parameter tree, both directions.

HF keeps the discriminator (`ElectraForPreTraining`) and the generator
(`ElectraForMaskedLM`) as two models, each with its own copy of the
embeddings; we keep one shared embedding module unless
config.model.embedding_sharing says otherwise (export folds GDES's residual
tables into one table per network).
State dicts here are plain {name: numpy array} mappings, so converting needs
no torch. Reading and writing directories uses safetensors; a legacy
`pytorch_model.bin` is read with torch's weights-only loader, which never
executes code from the file.
"""

from collections.abc import Mapping
import dataclasses
import json
import os
from typing import Any

from etils import epath
import jax
import numpy as np
from safetensors import numpy as safetensors_numpy

from configs import common
from electra_jax import config_lib, errors, storage
from electra_jax.config_lib import EncoderConfig
from electra_jax.data import tokenizers
from electra_jax.model import fold_embeddings

StateDict = Mapping[str, np.ndarray]


class HFCheckpointError(errors.UserError):
  """An HF directory that cannot be read as ELECTRA; the message names the file and the fix."""


# --- Configs ---------------------------------------------------------------------

# How the encoder runs rather than what it is: an HF config does not hold them,
# so they come from configs/common.py, their one home.
_RUNTIME_FIELDS = ('dtype', 'scan_layers', 'scan_unroll', 'remat_policy', 'attention_impl')


def encoder_config_from_hf(hf: Mapping[str, Any], **runtime: Any) -> EncoderConfig:
  """Our EncoderConfig from an HF ElectraConfig dict; `runtime` overrides fields
  (dtype, dropout, attention_impl, ...; defaults: those of configs/common.py)."""
  if hf.get('model_type') != 'electra':
    raise HFCheckpointError(
      f'config.json has model_type {hf.get("model_type")!r}; only '
      'ELECTRA checkpoints (model_type "electra") can be imported'
    )
  if hf.get('hidden_act', 'gelu') != 'gelu':
    raise HFCheckpointError(
      f'config.json: hidden_act {hf["hidden_act"]!r}; ELECTRA uses the exact GELU ("gelu")'
    )
  defaults = common.get_config().model
  cfg = EncoderConfig(
    vocab_size=hf['vocab_size'],
    embedding_size=hf.get('embedding_size', hf['hidden_size']),
    hidden_size=hf['hidden_size'],
    num_layers=hf['num_hidden_layers'],
    num_heads=hf['num_attention_heads'],
    intermediate_size=hf['intermediate_size'],
    max_position_embeddings=hf['max_position_embeddings'],
    type_vocab_size=hf['type_vocab_size'],
    dropout_rate=hf['hidden_dropout_prob'],
    attention_dropout_rate=hf['attention_probs_dropout_prob'],
    layer_norm_eps=hf['layer_norm_eps'],
    initializer_range=hf['initializer_range'],
    # Only a fresh init reads it; an imported checkpoint carries its own table.
    position_embedding_init=defaults.position_embedding_init,
    **{key: defaults[key] for key in _RUNTIME_FIELDS},
  )
  return dataclasses.replace(cfg, **runtime)


def hf_config(cfg: EncoderConfig, architecture: str, pad_token_id: int) -> dict[str, Any]:
  """An HF ElectraConfig dict for an encoder of `cfg`."""
  return {
    'architectures': [architecture],
    'model_type': 'electra',
    'vocab_size': cfg.vocab_size,
    'embedding_size': cfg.embedding_size,
    'hidden_size': cfg.hidden_size,
    'num_hidden_layers': cfg.num_layers,
    'num_attention_heads': cfg.num_heads,
    'intermediate_size': cfg.intermediate_size,
    'hidden_act': 'gelu',
    'hidden_dropout_prob': cfg.dropout_rate,
    'attention_probs_dropout_prob': cfg.attention_dropout_rate,
    'max_position_embeddings': cfg.max_position_embeddings,
    'type_vocab_size': cfg.type_vocab_size,
    'initializer_range': cfg.initializer_range,
    'layer_norm_eps': cfg.layer_norm_eps,
    'position_embedding_type': 'absolute',
    'pad_token_id': pad_token_id,
    'tie_word_embeddings': True,
  }


# --- HF names -> our tree ------------------------------------------------------------


def _dense(sd: StateDict, prefix: str) -> dict[str, np.ndarray]:
  # torch.nn.Linear stores [out, in]; flax kernels are [in, out].
  return {'kernel': np.asarray(sd[prefix + 'weight']).T, 'bias': np.asarray(sd[prefix + 'bias'])}


def _layer_norm(sd: StateDict, prefix: str) -> dict[str, np.ndarray]:
  return {'scale': np.asarray(sd[prefix + 'weight']), 'bias': np.asarray(sd[prefix + 'bias'])}


def _embeddings(sd: StateDict) -> dict:
  table = lambda name: {'embedding': np.asarray(sd[f'electra.embeddings.{name}.weight'])}
  return {
    'word_embeddings': table('word_embeddings'),
    'position_embeddings': table('position_embeddings'),
    'token_type_embeddings': table('token_type_embeddings'),
    'layer_norm': _layer_norm(sd, 'electra.embeddings.LayerNorm.'),
  }


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
      'output': {'kernel': output['kernel'].reshape(heads, head_dim, -1), 'bias': output['bias']},
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


def discriminator_params_from_hf(sd: StateDict, cfg: EncoderConfig) -> dict:
  """{'embeddings', 'discriminator'[, 'discriminator_head']} from an HF discriminator
  (ElectraForPreTraining, ElectraModel or a fine-tuned ELECTRA; the head only
  when the checkpoint has one)."""
  params = {'embeddings': _embeddings(sd), 'discriminator': _encoder(sd, cfg)}
  if 'discriminator_predictions.dense.weight' in sd:
    params['discriminator_head'] = {
      'dense': _dense(sd, 'discriminator_predictions.dense.'),
      'prediction': _dense(sd, 'discriminator_predictions.dense_prediction.'),
    }
  return params


def params_from_hf(
  discriminator: StateDict,
  generator: StateDict,
  *,
  discriminator_cfg: EncoderConfig,
  generator_cfg: EncoderConfig,
  untie_embeddings: bool = False,
) -> dict:
  """Our parameters from the state dicts of ElectraForPreTraining and ElectraForMaskedLM.

  With shared embeddings (the default) the discriminator's copy is used; HF
  checkpoints of ELECTRA hold identical copies in both models.
  """
  params = discriminator_params_from_hf(discriminator, discriminator_cfg)
  params['generator'] = _encoder(generator, generator_cfg)
  params['generator_head'] = {
    'dense': _dense(generator, 'generator_predictions.dense.'),
    'layer_norm': _layer_norm(generator, 'generator_predictions.LayerNorm.'),
    'output_bias': np.asarray(generator['generator_lm_head.bias']),
  }
  if untie_embeddings:
    params['discriminator_embeddings'] = params.pop('embeddings')
    params['generator_embeddings'] = _embeddings(generator)
  return params


_ARCHITECTURE = (
  'vocab_size',
  'embedding_size',
  'hidden_size',
  'num_layers',
  'num_heads',
  'intermediate_size',
  'max_position_embeddings',
  'type_vocab_size',
)


def _check_fits(directory: str, hf: Mapping[str, Any], wanted: EncoderConfig, network: str) -> None:
  got = encoder_config_from_hf(hf)
  differences = [
    f'{key} {getattr(got, key)} (this config: {getattr(wanted, key)})'
    for key in _ARCHITECTURE
    if getattr(got, key) != getattr(wanted, key)
  ]
  if differences:
    raise HFCheckpointError(
      f"{directory}: its {network} has {'; '.join(differences)}; set the config's model "
      'keys to its sizes (configs/small.py, base.py and large.py hold the released ones)'
    )


def pretraining_params_from_hf(
  discriminator_dir: str,
  generator_dir: str | None,
  config: Any,
  tokenizer_sha256: str,
) -> dict:
  """Our pretraining parameters from released HF checkpoints, for continued
  pretraining: `discriminator_dir` an ElectraForPreTraining directory with its
  vocab.txt, `generator_dir` the matching ElectraForMaskedLM one (None: the
  parameters have no generator). Its sizes must be the config's and its
  vocabulary the prepared data's."""
  what = 'config.checkpoint.init_from'
  sharing = config.model.embedding_sharing
  if sharing == 'gdes' or config.model.tie_generator_to_discriminator:
    raise HFCheckpointError(
      f'{what}: an HF checkpoint holds two networks with their own embeddings; start from it '
      "with model.embedding_sharing 'tied' or 'untied' and an untied generator"
    )
  vocab = os.path.join(discriminator_dir, 'vocab.txt')
  if not epath.Path(vocab).exists():
    raise HFCheckpointError(f'{what}: {discriminator_dir} has no vocab.txt to check the data by')
  if tokenizers.file_sha256(vocab) != tokenizer_sha256:
    raise HFCheckpointError(
      f"{what}: {discriminator_dir}/vocab.txt is not the prepared data's vocabulary; prepare "
      f'the data with --vocab={vocab}'
    )
  hf, discriminator = read_hf_dir(discriminator_dir)
  _check_fits(discriminator_dir, hf, config_lib.discriminator_config(config), 'discriminator')
  if 'discriminator_predictions.dense.weight' not in discriminator:
    raise HFCheckpointError(
      f'{what}: {discriminator_dir} has no discriminator head; give an ElectraForPreTraining '
      'checkpoint (google/electra-*-discriminator)'
    )
  discriminator_cfg = encoder_config_from_hf(hf)
  if generator_dir is None:
    params = discriminator_params_from_hf(discriminator, discriminator_cfg)
    if sharing == 'untied':
      params['discriminator_embeddings'] = params.pop('embeddings')
    return params
  if config.objective.name == 'electric':
    raise HFCheckpointError(
      f"{what}_generator: objective 'electric' trains a two-tower cloze generator, which "
      'an HF generator cannot start; leave it out to start the generator afresh'
    )
  hf_generator, generator = read_hf_dir(generator_dir)
  _check_fits(generator_dir, hf_generator, config_lib.generator_config(config), 'generator')
  return params_from_hf(
    discriminator,
    generator,
    discriminator_cfg=discriminator_cfg,
    generator_cfg=encoder_config_from_hf(hf_generator),
    untie_embeddings=sharing == 'untied',
  )


# --- Our tree -> HF names -------------------------------------------------------------


def _to_dense(params: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
  return {
    prefix + 'weight': np.asarray(params['kernel']).T,
    prefix + 'bias': np.asarray(params['bias']),
  }


def _to_layer_norm(params: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
  return {
    prefix + 'weight': np.asarray(params['scale']),
    prefix + 'bias': np.asarray(params['bias']),
  }


def _to_embeddings(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
  sd = {
    f'electra.embeddings.{name}.weight': np.asarray(params[name]['embedding'])
    for name in ('word_embeddings', 'position_embeddings', 'token_type_embeddings')
  }
  sd.update(_to_layer_norm(params['layer_norm'], 'electra.embeddings.LayerNorm.'))
  return sd


def _to_layer(params: Mapping[str, Any], prefix: str) -> dict[str, np.ndarray]:
  qkv = params['attention']['qkv']
  kernel, bias = np.asarray(qkv['kernel']), np.asarray(qkv['bias'])  # [E, 3, N, D], [3, N, D]
  sd = {}
  for i, name in enumerate(('query', 'key', 'value')):
    sd[f'{prefix}attention.self.{name}.weight'] = kernel[:, i].reshape(kernel.shape[0], -1).T
    sd[f'{prefix}attention.self.{name}.bias'] = bias[i].reshape(-1)
  output = params['attention']['output']
  out_kernel = np.asarray(output['kernel'])  # [N, D, E]
  sd[prefix + 'attention.output.dense.weight'] = out_kernel.reshape(-1, out_kernel.shape[-1]).T
  sd[prefix + 'attention.output.dense.bias'] = np.asarray(output['bias'])
  sd.update(_to_layer_norm(params['attention_layer_norm'], prefix + 'attention.output.LayerNorm.'))
  sd.update(_to_dense(params['intermediate'], prefix + 'intermediate.dense.'))
  sd.update(_to_dense(params['output'], prefix + 'output.dense.'))
  sd.update(_to_layer_norm(params['output_layer_norm'], prefix + 'output.LayerNorm.'))
  return sd


def _to_encoder(params: Mapping[str, Any], num_layers: int) -> dict[str, np.ndarray]:
  sd = {}
  if 'embeddings_project' in params:
    sd.update(_to_dense(params['embeddings_project'], 'electra.embeddings_project.'))
  for i in range(num_layers):
    layer = (
      jax.tree.map(lambda x, i=i: np.asarray(x)[i], params['layers'])
      if 'layers' in params
      else params[f'layer_{i}']
    )
    sd.update(_to_layer(layer, f'electra.encoder.layer.{i}.'))
  return sd


def discriminator_to_hf(params: Mapping[str, Any], cfg: EncoderConfig) -> dict[str, np.ndarray]:
  """The ElectraForPreTraining state dict of our discriminator."""
  sd = _to_embeddings(fold_embeddings(params, 'discriminator'))
  sd.update(_to_encoder(params['discriminator'], cfg.num_layers))
  head = params['discriminator_head']
  sd.update(_to_dense(head['dense'], 'discriminator_predictions.dense.'))
  sd.update(_to_dense(head['prediction'], 'discriminator_predictions.dense_prediction.'))
  return sd


def masked_lm_to_hf(
  params: Mapping[str, Any],
  cfg: EncoderConfig,
  *,
  encoder: str = 'generator',
  head: str = 'generator_head',
) -> dict[str, np.ndarray]:
  """The ElectraForMaskedLM state dict of encoder `encoder` under MLM head `head`: the
  generator, or the full-size masked LM of the MLM objectives ('discriminator',
  'mlm_head'). Its output layer is tied to the word embeddings, which HF restores
  from them."""
  sd = _to_embeddings(fold_embeddings(params, encoder))
  sd.update(_to_encoder(params[encoder], cfg.num_layers))
  mlm = params[head]
  sd.update(_to_dense(mlm['dense'], 'generator_predictions.dense.'))
  sd.update(_to_layer_norm(mlm['layer_norm'], 'generator_predictions.LayerNorm.'))
  sd['generator_lm_head.bias'] = np.asarray(mlm['output_bias'])
  return sd


# --- Directories -----------------------------------------------------------------------


def read_hf_dir(directory: str) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
  """(config.json as a dict, state dict with `electra.` names) of an HF directory."""
  config_path = epath.Path(directory, 'config.json')
  if not config_path.exists():
    raise HFCheckpointError(f'{directory}: no config.json, so not an HF model directory')
  config = json.loads(config_path.read_text())
  safetensors_path = epath.Path(directory, 'model.safetensors')
  torch_path = epath.Path(directory, 'pytorch_model.bin')
  if safetensors_path.exists():
    sd = dict(safetensors_numpy.load(safetensors_path.read_bytes()))
  elif torch_path.exists():
    try:
      import torch  # pylint: disable=g-import-not-at-top
    except ImportError:
      raise HFCheckpointError(
        f'{torch_path}: reading a PyTorch pickle needs torch (pip install '
        'torch), or convert it to model.safetensors'
      ) from None
    # weights_only: tensors and containers only; any code in the pickle is refused.
    with torch_path.open('rb') as f:
      loaded = torch.load(f, map_location='cpu', weights_only=True)
    sd = {k: v.float().numpy() for k, v in loaded.items()}
  else:
    raise HFCheckpointError(f'{directory}: neither model.safetensors nor pytorch_model.bin')
  if not any(k.startswith('electra.') for k in sd):  # An ElectraModel has no prefix.
    sd = {f'electra.{k}': v for k, v in sd.items()}
  return config, sd


def write_hf_dir(directory: str, config: Mapping[str, Any], sd: StateDict) -> None:
  """Writes config.json and model.safetensors into `directory` (local or a URL)."""
  epath.Path(directory).mkdir(parents=True, exist_ok=True)
  storage.write_text(
    os.path.join(directory, 'config.json'), json.dumps(dict(config), indent=2, sort_keys=True)
  )
  tensors = {k: np.ascontiguousarray(v, np.float32) for k, v in sd.items()}
  with storage.staged(os.path.join(directory, 'model.safetensors')) as local:
    with open(local, 'wb') as f:
      f.write(safetensors_numpy.save(tensors, metadata={'format': 'pt'}))
