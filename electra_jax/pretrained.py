"""A pretrained ELECTRA, from one of our pretraining workdirs or an HF directory.

Fine-tuning, export, prediction and evaluation all start here: `load(path)`
gives the network sizes, the parameters in our tree and the tokenizer,
whichever kind of directory `path` is.
"""

import dataclasses
import json
import os
from typing import Any

from etils import epath
import jax
import ml_collections
import numpy as np

from electra_jax import checkpointing, config_lib, errors, hf_interop, objectives
from electra_jax.config_lib import EncoderConfig
from electra_jax.data import tokenizers
from electra_jax.model import ElectraPretrainingModel, fold_embeddings


@dataclasses.dataclass
class Pretrained:
  source: str
  discriminator_cfg: EncoderConfig
  # None for an HF discriminator alone, which has no generator.
  generator_cfg: EncoderConfig | None
  # Our pretraining tree (see model.ElectraPretrainingModel): embeddings and/or
  # discriminator_/generator_embeddings, discriminator, its head
  # (discriminator_head, or mlm_head and copy_head), generator, generator_head;
  # what the source lacks is absent.
  params: dict[str, Any]
  tokenizer: tokenizers.Tokenizer | None
  step: int | None  # The pretraining step, for our workdirs.
  config: ml_collections.ConfigDict | None  # The pretraining config, for our workdirs.

  @property
  def embedding_sharing(self) -> str:
    """config.model.embedding_sharing, as the parameters show it."""
    if 'embeddings' not in self.params:
      return 'untied'
    return 'gdes' if 'discriminator_embeddings' in self.params else 'tied'

  @property
  def objective(self) -> str:
    """config.objective.name of the pretraining run; an HF directory holds a discriminator."""
    return self.config.objective.name if self.config is not None else 'electra'

  def pretraining_model(self) -> ElectraPretrainingModel:
    """The pretraining networks over `params`: those its objective trained."""
    has_generator = 'generator_head' in self.params
    cloze = 'generator_ltr' in self.params
    return ElectraPretrainingModel(
      self.generator_cfg if has_generator else None,
      self.discriminator_cfg,
      self.embedding_sharing,
      main_head=objectives.main_head(self.objective),
      tie_generator=has_generator and not cloze and 'generator' not in self.params,
      cloze_generator=cloze,
    )

  def discriminator_params(self) -> dict[str, Any]:
    """{'embeddings', 'discriminator'}: what a fine-tuned classifier starts from (GDES's
    residual folded into the embeddings)."""
    return {
      'embeddings': fold_embeddings(self.params, 'discriminator'),
      'discriminator': self.params['discriminator'],
    }


def is_workdir(path: str) -> bool:
  return (epath.Path(path) / 'checkpoints').exists()


def load(path: str, **runtime: Any) -> Pretrained:
  """The model in `path`: a pretraining workdir (its newest checkpoint) or an HF
  ELECTRA directory. `runtime` overrides EncoderConfig fields that do not
  change the parameters (dtype, dropout rates, attention_impl, remat_policy,
  scan_unroll)."""
  if is_workdir(path):
    return _load_workdir(path, runtime)
  if (epath.Path(path) / 'config.json').exists():
    return _load_hf(path, runtime)
  raise errors.UserError(
    f'{path}: neither a pretraining workdir (no checkpoints/) nor an HF '
    'model directory (no config.json)'
  )


def _load_workdir(workdir: str, runtime: dict[str, Any]) -> Pretrained:
  step, params, meta = checkpointing.restore_for_inference(workdir)
  config = config_lib.with_defaults(meta['config'])
  discriminator = dataclasses.replace(config_lib.discriminator_config(config), **runtime)
  generator = dataclasses.replace(config_lib.generator_config(config), **runtime)
  params = jax.tree.map(np.asarray, params)
  return Pretrained(
    workdir, discriminator, generator, params, _workdir_tokenizer(workdir, meta), step, config
  )


def _workdir_tokenizer(workdir: str, meta: dict[str, Any]) -> tokenizers.Tokenizer:
  """The copy in WORKDIR/tokenizer, else the prepared data's own."""
  spec = meta['tokenizer']
  for directory in (epath.Path(workdir) / 'tokenizer', epath.Path(meta['data_dir']) / 'tokenizer'):
    if (directory / spec['file']).exists():
      return tokenizers.load_tokenizer(spec, str(directory))
  raise tokenizers.TokenizerError(
    f'{workdir}: the tokenizer file {spec["file"]} is in neither {workdir}/tokenizer nor '
    f'{meta["data_dir"]}/tokenizer; copy it into {workdir}/tokenizer'
  )


def _load_hf(directory: str, runtime: dict[str, Any]) -> Pretrained:
  config, sd = hf_interop.read_hf_dir(directory)
  cfg = hf_interop.encoder_config_from_hf(config, **runtime)
  params = hf_interop.discriminator_params_from_hf(sd, cfg)
  return Pretrained(directory, cfg, None, params, _hf_tokenizer(directory), None, None)


def _hf_tokenizer(directory: str) -> tokenizers.Tokenizer | None:
  vocab = os.path.join(directory, 'vocab.txt')
  if not epath.Path(vocab).exists():
    return None
  lower_case = True
  settings = epath.Path(directory, 'tokenizer_config.json')
  if settings.exists():
    lower_case = json.loads(settings.read_text()).get('do_lower_case', True)
  return tokenizers.WordPieceTokenizer(vocab, lower_case=lower_case)
