"""Config validation and the values derived from a config.

Every hyperparameter lives in `configs/`; this module only checks them and
computes what follows from them (generator sizes, heads, prediction slots),
so each derived value is computed in exactly one place.
"""

import dataclasses
from typing import Any

import jax
import ml_collections

from electra_jax import errors

_DTYPES = ('float32', 'bfloat16')
_REMAT_POLICIES = ('none', 'full', 'dots_saveable')
_ATTENTION_IMPLS = ('explicit', 'xla', 'cudnn')
# config.objective.name's values; electra_jax/objectives.py defines each.
OBJECTIVES = ('electra', 'electra_15', 'mlm', 'replace_mlm', 'all_tokens_mlm', 'electric')
MASKINGS = ('token', 'whole_word')  # config.objective.masking's values.
POSITION_EMBEDDING_INITS = ('normal', 'sinusoidal')  # model.Embeddings'
EMBEDDING_SHARING = ('tied', 'untied', 'gdes')  # model.ElectraPretrainingModel's


class ConfigError(errors.UserError):
  """A config value is invalid; the message names the key and the fix."""


@dataclasses.dataclass(frozen=True)
class EncoderConfig:
  """Sizes of one transformer encoder (generator or discriminator)."""

  vocab_size: int
  embedding_size: int
  hidden_size: int
  num_layers: int
  num_heads: int
  intermediate_size: int
  max_position_embeddings: int
  type_vocab_size: int
  dropout_rate: float
  attention_dropout_rate: float
  layer_norm_eps: float
  initializer_range: float
  dtype: str
  scan_layers: bool
  scan_unroll: int
  remat_policy: str
  attention_impl: str
  position_embedding_init: str


def _encoder(model: ml_collections.ConfigDict, hidden_size: int, num_layers: int) -> EncoderConfig:
  return EncoderConfig(
    vocab_size=model.vocab_size,
    embedding_size=model.embedding_size,
    hidden_size=hidden_size,
    num_layers=num_layers,
    num_heads=max(1, hidden_size // model.attention_head_size),
    intermediate_size=4 * hidden_size,
    max_position_embeddings=model.max_position_embeddings,
    type_vocab_size=model.type_vocab_size,
    dropout_rate=model.dropout_rate,
    attention_dropout_rate=model.attention_dropout_rate,
    layer_norm_eps=model.layer_norm_eps,
    initializer_range=model.initializer_range,
    dtype=model.dtype,
    scan_layers=model.scan_layers,
    scan_unroll=model.scan_unroll,
    remat_policy=model.remat_policy,
    attention_impl=model.attention_impl,
    position_embedding_init=model.position_embedding_init,
  )


def discriminator_config(config: ml_collections.ConfigDict) -> EncoderConfig:
  return _encoder(config.model, config.model.hidden_size, config.model.num_layers)


def generator_config(config: ml_collections.ConfigDict) -> EncoderConfig:
  # As the released code: hidden size, heads and FFN scale by the fraction.
  m = config.model
  hidden = int(round(m.hidden_size * m.generator_hidden_fraction))
  return _encoder(m, hidden, max(1, int(round(m.num_layers * m.generator_layers_fraction))))


def with_defaults(saved: dict[str, Any]) -> ml_collections.ConfigDict:
  """A config that a checkpoint recorded, with the keys it predates (added to
  configs/common.py since) at their defaults, which reproduce what it ran."""
  from configs import common  # pylint: disable=import-outside-toplevel (configs imports us)

  def fill(config: ml_collections.ConfigDict, defaults: ml_collections.ConfigDict) -> None:
    for key, value in defaults.items():
      if key not in config:
        config[key] = value
      elif isinstance(value, ml_collections.ConfigDict) and isinstance(
        config[key], ml_collections.ConfigDict
      ):
        fill(config[key], value)

  config = ml_collections.ConfigDict(saved)
  if 'untie_embeddings' in config.model:  # Before model.embedding_sharing.
    config.model.embedding_sharing = 'untied' if config.model.untie_embeddings else 'tied'
    del config.model['untie_embeddings']
  fill(config, common.get_config())
  return config


def max_predictions_per_seq(config: ml_collections.ConfigDict) -> int:
  """Masked-position slots per sequence, as the released code computes them."""
  return max(1, int((config.objective.mask_prob + 0.005) * config.max_seq_length))


def require(ok: bool, key: str, message: str) -> None:
  """The one way configs are checked: ConfigError('config.KEY: MESSAGE') unless ok."""
  if not ok:
    raise ConfigError(f'config.{key}: {message}')


def require_backend(config: ml_collections.ConfigDict) -> None:
  """What the config asks of the devices it runs on; call it once the mesh is made.

  Separate from validate, which runs before JAX picks its backend (a multi-process
  run must not start it early) and also for AOT compiles aimed at other devices.
  """
  backend = jax.default_backend()
  require(
    config.model.attention_impl != 'cudnn' or backend == 'gpu',
    'model.attention_impl',
    f"'cudnn' runs on NVIDIA GPUs only, and this run's devices are {backend}; use "
    "'xla' (fused, on any device) or 'explicit'",
  )


def validate(config: ml_collections.ConfigDict, *, check_data: bool = True) -> None:
  """Raises ConfigError naming the first bad key, before any work starts."""
  m, o = config.model, config.objective
  for key in (
    'batch_size',
    'max_seq_length',
    'num_train_steps',
    'log_every_steps',
    'max_steps_ahead',
    'max_consecutive_nonfinite_steps',
  ):
    require(
      isinstance(config[key], int) and config[key] > 0,
      key,
      f'must be a positive integer, got {config[key]!r}',
    )
  c = config.checkpoint
  for key in ('every_steps', 'keep', 'max_failed_saves_in_a_row'):
    require(
      isinstance(c[key], int) and c[key] > 0,
      f'checkpoint.{key}',
      f'must be a positive integer, got {c[key]!r}',
    )
  require(
    isinstance(c.keep_every_steps, int) and c.keep_every_steps >= 0,
    'checkpoint.keep_every_steps',
    f'must be an integer >= 0, got {c.keep_every_steps!r}',
  )
  require(
    c.every_minutes >= 0,
    'checkpoint.every_minutes',
    f'must be >= 0 (0: no time-based saves), got {c.every_minutes}',
  )
  require(
    config.progress_every_seconds >= 0,
    'progress_every_seconds',
    f'must be >= 0 (0: no progress lines), got {config.progress_every_seconds}',
  )
  require(config.learning_rate > 0, 'learning_rate', f'must be > 0, got {config.learning_rate}')
  require(0 <= config.warmup_steps, 'warmup_steps', 'must be >= 0')
  require(0 <= config.weight_decay, 'weight_decay', 'must be >= 0')
  for key in ('adam_b1', 'adam_b2'):
    require(0 <= config[key] < 1, key, f'must be in [0, 1), got {config[key]}')
  require(config.adam_eps > 0, 'adam_eps', 'must be > 0')
  require(config.max_grad_norm > 0, 'max_grad_norm', 'must be > 0')

  require(0 < o.mask_prob <= 1, 'objective.mask_prob', f'must be in (0, 1], got {o.mask_prob}')
  require(
    o.masking in MASKINGS, 'objective.masking', f'must be one of {MASKINGS}, got {o.masking!r}'
  )
  require(
    0 <= o.mask_token_prob <= 1,
    'objective.mask_token_prob',
    f'must be in [0, 1], got {o.mask_token_prob}',
  )
  require(o.temperature > 0, 'objective.temperature', f'must be > 0, got {o.temperature}')
  require(
    o.gen_weight >= 0 and o.disc_weight >= 0, 'objective.gen_weight', 'loss weights must be >= 0'
  )
  require(o.name in OBJECTIVES, 'objective.name', f'must be one of {OBJECTIVES}, got {o.name!r}')
  require(
    not (o.name == 'mlm' and (o.uniform_generator or o.disallow_correct)),
    'objective.uniform_generator',
    "objective 'mlm' (BERT) samples nothing; uniform_generator and disallow_correct "
    'apply to the objectives that sample',
  )
  require(
    not (o.uniform_generator and m.tie_generator_to_discriminator),
    'model.tie_generator_to_discriminator',
    'there is no generator network to tie with uniform_generator',
  )
  if o.name == 'electric':
    # Its loss needs the noise distribution's probability of every token: the
    # two-tower cloze model's, as sampled from.
    for key, wrong in (
      ('objective.uniform_generator', o.uniform_generator),
      ('objective.disallow_correct', o.disallow_correct),
      ('model.tie_generator_to_discriminator', m.tie_generator_to_discriminator),
    ):
      require(
        not wrong,
        key,
        "objective 'electric' samples from its own two-tower cloze generator, whose "
        'probabilities its loss reads; set it to False',
      )
    require(
      m.attention_impl != 'cudnn',
      'model.attention_impl',
      "objective 'electric': cuDNN attention has no right-to-left mask for the cloze "
      "generator's second tower; use 'xla' or 'explicit'",
    )

  for key in (
    'vocab_size',
    'embedding_size',
    'hidden_size',
    'attention_head_size',
    'num_layers',
    'max_position_embeddings',
    'type_vocab_size',
  ):
    require(
      isinstance(m[key], int) and m[key] > 0,
      f'model.{key}',
      f'must be a positive integer, got {m[key]!r}',
    )
  require(
    m.vocab_size >= 5,
    'model.vocab_size',
    'must hold at least the 5 special tokens [PAD] [UNK] [CLS] [SEP] [MASK]',
  )
  head = m.attention_head_size
  require(
    m.hidden_size % head == 0 or m.hidden_size < head,
    'model.hidden_size',
    f'must be a multiple of model.attention_head_size ({head}), got {m.hidden_size}',
  )
  require(
    0 < m.generator_hidden_fraction <= 1,
    'model.generator_hidden_fraction',
    f'must be in (0, 1], got {m.generator_hidden_fraction}',
  )
  require(
    0 < m.generator_layers_fraction <= 1,
    'model.generator_layers_fraction',
    f'must be in (0, 1], got {m.generator_layers_fraction}',
  )
  require(
    not m.tie_generator_to_discriminator
    or (
      m.generator_hidden_fraction == 1
      and m.generator_layers_fraction == 1
      and m.embedding_sharing == 'tied'
    ),
    'model.tie_generator_to_discriminator',
    'one transformer serves both networks, so it needs '
    'model.generator_hidden_fraction=1.0, model.generator_layers_fraction=1.0 and '
    "model.embedding_sharing='tied'",
  )
  require(
    m.position_embedding_init in POSITION_EMBEDDING_INITS,
    'model.position_embedding_init',
    f'must be one of {POSITION_EMBEDDING_INITS}, got {m.position_embedding_init!r}',
  )
  require(
    m.embedding_sharing in EMBEDDING_SHARING,
    'model.embedding_sharing',
    f'must be one of {EMBEDDING_SHARING}, got {m.embedding_sharing!r}',
  )
  require(
    m.embedding_sharing == 'tied' or (o.name != 'mlm' and not o.uniform_generator),
    'model.embedding_sharing',
    f'{m.embedding_sharing!r} shares embeddings with a generator network, which '
    f'objective {o.name!r}{" with uniform_generator" if o.uniform_generator else ""} '
    "does not have; use 'tied'",
  )
  gen_hidden = generator_config(config).hidden_size
  require(
    gen_hidden % head == 0 or gen_hidden < head,
    'model.generator_hidden_fraction',
    f'gives a generator hidden size of {gen_hidden}, which is not a multiple of '
    f'model.attention_head_size ({head})',
  )
  for key in ('dropout_rate', 'attention_dropout_rate'):
    require(0 <= m[key] < 1, f'model.{key}', f'must be in [0, 1), got {m[key]}')
  require(m.dtype in _DTYPES, 'model.dtype', f'must be one of {_DTYPES}, got {m.dtype!r}')
  require(
    isinstance(m.scan_unroll, int) and 1 <= m.scan_unroll <= m.num_layers,
    'model.scan_unroll',
    f'must be an integer from 1 to model.num_layers={m.num_layers}, got {m.scan_unroll!r}',
  )
  require(
    m.remat_policy in _REMAT_POLICIES,
    'model.remat_policy',
    f'must be one of {_REMAT_POLICIES}, got {m.remat_policy!r}',
  )
  require(
    m.attention_impl in _ATTENTION_IMPLS,
    'model.attention_impl',
    f'must be one of {_ATTENTION_IMPLS}, got {m.attention_impl!r}',
  )
  require(
    m.attention_impl == 'explicit' or m.attention_dropout_rate == 0,
    'model.attention_dropout_rate',
    f'jax.nn.dot_product_attention (attention_impl={m.attention_impl!r}) has '
    'no attention dropout; set it to 0 or use attention_impl=explicit',
  )
  require(
    m.attention_impl != 'cudnn' or m.dtype == 'bfloat16',
    'model.dtype',
    "cuDNN flash attention (attention_impl='cudnn') takes bfloat16 activations; "
    "set --config.model.dtype=bfloat16 or use attention_impl='xla'",
  )
  require(
    config.max_seq_length <= m.max_position_embeddings,
    'max_seq_length',
    f'{config.max_seq_length} exceeds model.max_position_embeddings={m.max_position_embeddings}',
  )
  require(config.max_seq_length >= 3, 'max_seq_length', 'must be >= 3 ([CLS] x [SEP])')

  for axis in ('data', 'fsdp', 'tensor'):
    size = config.mesh[axis]
    require(
      isinstance(size, int) and (size > 0 or size == -1),
      f'mesh.{axis}',
      f'must be a positive integer or -1, got {size!r}',
    )
  for axis in ('dcn_data', 'dcn_fsdp', 'dcn_tensor'):
    size = config.mesh[axis]
    require(
      isinstance(size, int) and size > 0,
      f'mesh.{axis}',
      f'must be a positive number of slices, got {size!r}',
    )
  require(
    [config.mesh[a] for a in ('data', 'fsdp', 'tensor')].count(-1) <= 1,
    'mesh',
    'at most one axis may be -1',
  )

  e = config.eval
  for key in ('every_steps', 'num_batches'):
    require(
      isinstance(e[key], int) and e[key] > 0,
      f'eval.{key}',
      f'must be a positive integer, got {e[key]!r}',
    )
  require(
    e.batch_size is None or (isinstance(e.batch_size, int) and e.batch_size > 0),
    'eval.batch_size',
    f'must be a positive integer or None, got {e.batch_size!r}',
  )

  d = config.data
  if check_data:
    require(
      bool(d.prepared_dir) != bool(d.corpus),
      'data.corpus',
      'name the input with exactly one of --config.data.prepared_dir=DIR (from '
      "electra_jax.prepare_data) or --config.data.corpus='wiki:path/*/wiki_*'",
    )
    require(
      not (d.vocab and d.spm_model),
      'data.vocab',
      'choose one tokenizer: data.vocab (WordPiece) or data.spm_model, not both',
    )
  require(
    d.spm_model_type in ('unigram', 'bpe'),
    'data.spm_model_type',
    f"must be 'unigram' or 'bpe', got {d.spm_model_type!r}",
  )
  require(d.spm_sample_sentences > 0, 'data.spm_sample_sentences', 'must be > 0')
  require(
    d.on_invalid_utf8 in ('skip', 'skip_all', 'error'),
    'data.on_invalid_utf8',
    f"must be 'skip', 'skip_all' or 'error', got {d.on_invalid_utf8!r}",
  )
  for key in ('single_segment_prob', 'short_seq_prob'):
    require(0 <= d[key] <= 1, f'data.{key}', f'must be in [0, 1], got {d[key]}')
  for key in ('read_threads', 'prefetch_batches'):
    require(d[key] > 0, f'data.{key}', f'must be > 0, got {d[key]}')
  require(
    d.worker_processes >= 0, 'data.worker_processes', f'must be >= 0, got {d.worker_processes}'
  )
