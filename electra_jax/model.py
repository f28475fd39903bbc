"""ELECTRA networks as pure-functional flax.linen modules.

A BERT-style post-LayerNorm transformer encoder serves both networks. The
generator is the same encoder at a smaller width, with a masked-LM head tied to
the word embeddings; the discriminator adds a per-token binary head. By default
both read one shared embedding module, as in the released code. For
fine-tuning, SequenceClassifier puts a task head on the discriminator.

Every parameter carries logical axis names, mapped to mesh axes by the rules in
`config.mesh.logical_axis_rules`:
  vocab        vocabulary rows of the embedding table and MLM bias
  vocab_embed  width of the embedding table (embedding_size)
  embed        the encoder's hidden dimension
  heads / head_dim / mlp   attention heads, per-head width, FFN width
  layers       the stacked-layer axis created by nn.scan
"""

from collections.abc import Sequence
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from electra_jax import prng
from electra_jax.config_lib import EncoderConfig

Array = jax.Array

_REMAT_POLICIES = {
  'full': None,  # Save nothing: recompute the whole layer.
  'dots_saveable': jax.checkpoint_policies.dots_saveable,
}


def activation_dtype(cfg: EncoderConfig) -> jnp.dtype:
  return jnp.bfloat16 if cfg.dtype == 'bfloat16' else jnp.float32


def _kernel_init(cfg: EncoderConfig, axes: Sequence[str | None]):
  # BERT/ELECTRA initialise every weight from N(0, 0.02) truncated at 2 sigma.
  return nn.with_logical_partitioning(
    nn.initializers.truncated_normal(cfg.initializer_range), tuple(axes)
  )


def sinusoidal_positions(num_positions: int, width: int, rms: float) -> np.ndarray:
  """[num_positions, width] sin/cos table (Vaswani et al. 2017) scaled to root-mean-square `rms`.

  Sines fill the first half of the columns and cosines the second; each
  sin/cos pair has mean square 1/2, so the factor sqrt(2) * rms sets the
  table's scale to that of an N(0, rms) table.
  """
  pairs = width // 2
  angles = np.arange(num_positions)[:, None] / 10000.0 ** (2 * np.arange(pairs) / width)
  table = np.zeros((num_positions, width), np.float32)
  table[:, :pairs] = np.sin(angles)
  table[:, pairs : 2 * pairs] = np.cos(angles)
  return table * np.float32(np.sqrt(2) * rms)


def _zeros(axes: Sequence[str | None]):
  return nn.with_logical_partitioning(nn.initializers.zeros_init(), tuple(axes))


def _ones(axes: Sequence[str | None]):
  return nn.with_logical_partitioning(nn.initializers.ones_init(), tuple(axes))


@jax.checkpoint
def _gelu(x: Array) -> Array:
  """Exact erf GELU, as BERT and ELECTRA, keeping only its input for the backward pass.

  Left to itself XLA saves float32 erfc intermediates, three [batch, length,
  intermediate] buffers per layer even for bfloat16 activations; recomputing
  them from the input is elementwise work.
  """
  return nn.gelu(x, approximate=False)


# Flax computes LayerNorm statistics in float32 even for bf16 inputs. Under
# remat only the input is saved for the backward pass, not float32 copies.
_RematLayerNorm = nn.remat(nn.LayerNorm)


def _layer_norm(cfg: EncoderConfig, axis_name: str, name: str) -> nn.Module:
  return _RematLayerNorm(
    epsilon=cfg.layer_norm_eps,
    dtype=activation_dtype(cfg),
    scale_init=_ones((axis_name,)),
    bias_init=_zeros((axis_name,)),
    name=name,
  )


def _dense(
  cfg: EncoderConfig, features: int, axes: tuple[str | None, str | None], name: str
) -> nn.Dense:
  return nn.Dense(
    features,
    dtype=activation_dtype(cfg),
    kernel_init=_kernel_init(cfg, axes),
    bias_init=_zeros(axes[1:]),
    name=name,
  )


class Dropout(nn.Module):
  """nn.Dropout over prng.dropout, which spends a quarter of a Threefry block per element."""

  rate: float

  @nn.compact
  def __call__(self, x: Array, deterministic: bool) -> Array:
    if deterministic or self.rate == 0:
      return x
    return prng.dropout(self.make_rng('dropout'), x, self.rate)


EMBEDDING_TABLES = ('word_embeddings', 'position_embeddings', 'token_type_embeddings')


class Embeddings(nn.Module):
  """Word + position + token-type embeddings, then LayerNorm and dropout.

  With `residual` (gradient-disentangled sharing, DeBERTa-v3's GDES), its
  tables start at zero and are added to another module's tables, which are
  read under stop_gradient: the loss of the network reading this module
  trains only its own residual tables and LayerNorm.
  """

  cfg: EncoderConfig
  residual: bool = False

  def setup(self):
    cfg = self.cfg
    init = _zeros if self.residual else functools.partial(_kernel_init, cfg)
    self.word_embeddings = nn.Embed(
      cfg.vocab_size, cfg.embedding_size, embedding_init=init(('vocab', 'vocab_embed'))
    )
    position_init = init((None, 'vocab_embed'))
    if cfg.position_embedding_init == 'sinusoidal' and not self.residual:
      table = sinusoidal_positions(
        cfg.max_position_embeddings, cfg.embedding_size, cfg.initializer_range
      )
      position_init = nn.with_logical_partitioning(
        lambda key, shape, dtype=jnp.float32: jnp.asarray(table, dtype), (None, 'vocab_embed')
      )
    self.position_embeddings = nn.Embed(
      cfg.max_position_embeddings, cfg.embedding_size, embedding_init=position_init
    )
    self.token_type_embeddings = nn.Embed(
      cfg.type_vocab_size, cfg.embedding_size, embedding_init=init((None, 'vocab_embed'))
    )
    self.layer_norm = _layer_norm(cfg, 'vocab_embed', 'layer_norm')
    self.dropout = Dropout(cfg.dropout_rate)

  def tables(self, base: dict[str, Array] | None = None) -> dict[str, Array]:
    """{name: float32 table} of EMBEDDING_TABLES; with `base`, stop_gradient(base) + own."""
    own = {name: getattr(self, name).embedding for name in EMBEDDING_TABLES}
    if base is None:
      return own
    return {name: jax.lax.stop_gradient(base[name]) + own[name] for name in EMBEDDING_TABLES}

  def __call__(
    self,
    input_ids: Array,
    token_type_ids: Array,
    deterministic: bool,
    base: dict[str, Array] | None = None,
  ) -> Array:
    tables = self.tables(base)
    dtype = activation_dtype(self.cfg)
    lookup = lambda name, ids: jnp.take(tables[name], ids, axis=0).astype(dtype)
    positions = jnp.arange(input_ids.shape[1])[None, :]
    x = (
      lookup('word_embeddings', input_ids)
      + lookup('position_embeddings', positions)
      + lookup('token_type_embeddings', token_type_ids)
    )
    return self.dropout(self.layer_norm(x), deterministic=deterministic)


def fold_embeddings(params: dict[str, Any], network: str) -> dict[str, Any]:
  """The embedding parameters that `network` ('generator' or 'discriminator') reads,
  as one module's: the shared ones, its own, or under GDES its residual tables
  added to the shared ones (with its own LayerNorm)."""
  shared, own = params.get('embeddings'), params.get(f'{network}_embeddings')
  if own is None:
    return shared
  if shared is None:  # Untied.
    return own
  return {
    **own,
    **{
      name: {'embedding': shared[name]['embedding'] + own[name]['embedding']}
      for name in EMBEDDING_TABLES
    },
  }


class _Projection(nn.Module):
  """A dense layer over several input and output axes, as one einsum.

  Written out instead of nn.DenseGeneral so the kernel is created in its final
  multi-axis shape, which its logical axis names describe.
  """

  cfg: EncoderConfig
  equation: str
  kernel_shape: tuple[int, ...]
  kernel_axes: tuple[str | None, ...]
  bias_axes: tuple[str | None, ...]

  @nn.compact
  def __call__(self, x: Array) -> Array:
    dtype = activation_dtype(self.cfg)
    kernel = self.param('kernel', _kernel_init(self.cfg, self.kernel_axes), self.kernel_shape)
    bias_shape = self.kernel_shape[-len(self.bias_axes) :]
    bias = self.param('bias', _zeros(self.bias_axes), bias_shape)
    return jnp.einsum(self.equation, x.astype(dtype), kernel.astype(dtype)) + bias.astype(dtype)


class SelfAttention(nn.Module):
  """Multi-head self-attention with a fused QKV projection.

  `attention_mask` [B, L] is 1 for real tokens and 0 for padding, which must
  come last in each row (as in every batch this package builds): the 'xla' and
  'cudnn' paths take it as each row's length. `direction` (DIRECTIONS) lets a
  token attend to every token, or only to itself and those before it, or after
  it: the two towers of Electric's cloze model (config_lib refuses the last
  with 'cudnn', which has no mask for it).
  """

  cfg: EncoderConfig
  direction: str = 'both'

  @nn.compact
  def __call__(self, x: Array, attention_mask: Array, deterministic: bool) -> Array:
    cfg = self.cfg
    dtype = activation_dtype(cfg)
    heads, head_dim = cfg.num_heads, cfg.hidden_size // cfg.num_heads
    qkv = _Projection(
      cfg,
      'ble,ecnd->blcnd',
      (cfg.hidden_size, 3, heads, head_dim),
      ('embed', None, 'heads', 'head_dim'),
      (None, 'heads', 'head_dim'),
      name='qkv',
    )(x)
    query, key, value = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, L, N, D]
    length = x.shape[1]
    if cfg.attention_impl == 'explicit':
      mask = attention_mask.astype(bool)[:, None, None, :]  # [B, 1, 1, L]: keys only.
      if self.direction != 'both':
        mask = mask & _direction_mask(self.direction, length)
      logits = jnp.einsum(
        'bqnd,bknd->bnqk', query, key, preferred_element_type=jnp.float32
      ) / jnp.sqrt(head_dim)
      logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
      probs = jax.nn.softmax(logits, axis=-1)  # float32 statistics.
      probs = Dropout(cfg.attention_dropout_rate)(probs, deterministic=deterministic)
      out = jnp.einsum('bnqk,bknd->bqnd', probs.astype(dtype), value)
    else:
      # Padding as key lengths, not as a mask: cuDNN's flash attention refuses a
      # [B, 1, 1, L] mask (it becomes an additive bias, which must span [L, L]),
      # while lengths give it its native padding mask, which skips padded keys.
      lengths = jnp.sum(attention_mask > 0, axis=-1, dtype=jnp.int32)
      out = jax.nn.dot_product_attention(
        query,
        key,
        value,
        mask=_direction_mask(self.direction, length) if self.direction != 'both' else None,
        key_value_seq_lengths=lengths,
        implementation=cfg.attention_impl,
      )
    return _Projection(
      cfg,
      'blnd,nde->ble',
      (heads, head_dim, cfg.hidden_size),
      ('heads', 'head_dim', 'embed'),
      ('embed',),
      name='output',
    )(out)


# Which keys a query attends to: all of them, or only those at or before it
# (or after it), as in the two towers of Electric's cloze model.
DIRECTIONS = ('both', 'left_to_right', 'right_to_left')


def _direction_mask(direction: str, length: int) -> Array:
  """bool [1, 1, L, L]: query i may attend to key j."""
  query = jax.lax.broadcasted_iota(jnp.int32, (length, length), 0)
  key = jax.lax.broadcasted_iota(jnp.int32, (length, length), 1)
  allowed = key <= query if direction == 'left_to_right' else key >= query
  return allowed[None, None]


class EncoderLayer(nn.Module):
  """One post-LN transformer layer. Returns (x, None) so nn.scan can stack it, or
  (x, x) with `emit_output`, so that the scan also stacks every layer's output."""

  cfg: EncoderConfig
  emit_output: bool = False
  direction: str = 'both'  # Of its attention (DIRECTIONS).

  @nn.compact
  def __call__(self, x: Array, attention_mask: Array, deterministic: bool):
    cfg = self.cfg
    dropout = Dropout(cfg.dropout_rate)
    attended = SelfAttention(cfg, self.direction, name='attention')(
      x, attention_mask, deterministic
    )
    x = _layer_norm(cfg, 'embed', 'attention_layer_norm')(
      x + dropout(attended, deterministic=deterministic)
    )
    h = _gelu(_dense(cfg, cfg.intermediate_size, ('embed', 'mlp'), 'intermediate')(x))
    h = _dense(cfg, cfg.hidden_size, ('mlp', 'embed'), 'output')(h)
    x = _layer_norm(cfg, 'embed', 'output_layer_norm')(x + dropout(h, deterministic=deterministic))
    x = nn.with_logical_constraint(x, ('activation_batch', 'activation_length', 'activation_embed'))
    return x, (x if self.emit_output else None)


class Encoder(nn.Module):
  """Projects embeddings to the hidden size (if they differ), then the layers."""

  cfg: EncoderConfig
  direction: str = 'both'  # Of every layer's attention (DIRECTIONS).

  @nn.compact
  def __call__(
    self, embedded: Array, attention_mask: Array, deterministic: bool, all_layers: bool = False
  ) -> Array:
    """The last layer's output [B, L, H]. With `all_layers`, the first layer's
    input and every layer's output, stacked: [num_layers + 1, B, L, H]."""
    cfg = self.cfg
    x = embedded
    if cfg.embedding_size != cfg.hidden_size:
      x = _dense(cfg, cfg.hidden_size, ('vocab_embed', 'embed'), 'embeddings_project')(x)
    first = x

    layer = EncoderLayer
    if cfg.remat_policy != 'none':
      # static_argnums counts `self`: argument 3 is `deterministic`.
      # A rolled scan keeps XLA from merging the recomputation into the
      # forward pass; unrolled layers need remat's own guard.
      rolled = cfg.scan_layers and cfg.scan_unroll == 1
      layer = nn.remat(
        layer, policy=_REMAT_POLICIES[cfg.remat_policy], prevent_cse=not rolled, static_argnums=(3,)
      )
    if cfg.scan_layers:
      stack = nn.scan(
        layer,
        variable_axes={'params': 0},
        split_rngs={'params': True, 'dropout': True},
        in_axes=(nn.broadcast, nn.broadcast),
        length=cfg.num_layers,
        metadata_params={nn.PARTITION_NAME: 'layers'},
        unroll=cfg.scan_unroll,
      )
      x, outputs = stack(cfg, all_layers, self.direction, name='layers')(
        x, attention_mask, deterministic
      )
    else:
      outputs = []
      for i in range(cfg.num_layers):
        x, output = layer(cfg, all_layers, self.direction, name=f'layer_{i}')(
          x, attention_mask, deterministic
        )
        outputs.append(output)
      outputs = jnp.stack(outputs) if all_layers else None
    if all_layers:
      return jnp.concatenate([first[None], outputs])
    return x


class GeneratorHead(nn.Module):
  """Masked-LM head: dense to embedding size, GELU, LayerNorm, tied output layer."""

  cfg: EncoderConfig

  @nn.compact
  def __call__(self, hidden: Array, word_table: Array) -> Array:
    """float32 logits; `word_table` [V, E] is the input embedding table it is tied to."""
    cfg = self.cfg
    dtype = activation_dtype(cfg)
    x = _gelu(_dense(cfg, cfg.embedding_size, ('embed', 'vocab_embed'), 'dense')(hidden))
    x = _layer_norm(cfg, 'vocab_embed', 'layer_norm')(x)
    bias = self.param('output_bias', _zeros(('vocab',)), (cfg.vocab_size,))
    return (
      jnp.einsum(
        '...e,ve->...v',
        x.astype(dtype),
        word_table.astype(dtype),
        preferred_element_type=jnp.float32,
      )
      + bias
    )


class DiscriminatorHead(nn.Module):
  """Per-token replaced/original logit: dense, GELU, dense to 1."""

  cfg: EncoderConfig

  @nn.compact
  def __call__(self, hidden: Array) -> Array:
    cfg = self.cfg
    x = _gelu(_dense(self.cfg, cfg.hidden_size, ('embed', 'mlp'), 'dense')(hidden))
    logits = _dense(cfg, 1, ('mlp', None), 'prediction')(x)
    return logits[..., 0].astype(jnp.float32)


MAIN_HEADS = ('discriminator', 'mlm', 'mlm_copy')


class ElectraPretrainingModel(nn.Module):
  """The networks of a pretraining objective, over shared or separate embeddings.

  `discriminator` names the full-size encoder whatever its head, since it is
  the network that fine-tuning and export keep: the replaced-token
  discriminator ('discriminator' head), a masked LM ('mlm': the released
  code's MLM head at full size) or a masked LM with a per-token copy
  probability ('mlm_copy', All-Tokens MLM). `generator_cfg` None means no
  generator network (BERT, or uniform samples); `tie_generator` makes the
  full-size encoder serve as the generator too, with its own MLM head (the
  released code's untied_generator=False). `cloze_generator` makes the generator
  Electric's two-tower cloze model (cloze_logits).
  """

  generator_cfg: EncoderConfig | None
  discriminator_cfg: EncoderConfig
  # config_lib.EMBEDDING_SHARING: one module ('tied', the released code), one each
  # ('untied'), or 'gdes' (see Embeddings).
  embedding_sharing: str = 'tied'
  main_head: str = 'discriminator'
  tie_generator: bool = False
  cloze_generator: bool = False

  def setup(self):
    has_generator = self.generator_cfg is not None
    if self.embedding_sharing == 'untied':
      if has_generator:
        self.generator_embeddings = Embeddings(self.generator_cfg)
      self.discriminator_embeddings = Embeddings(self.discriminator_cfg)
    else:
      self.embeddings = Embeddings(self.discriminator_cfg)
      if self.embedding_sharing == 'gdes':
        self.discriminator_embeddings = Embeddings(self.discriminator_cfg, residual=True)
    if has_generator:
      if self.cloze_generator:
        self.generator_ltr = Encoder(self.generator_cfg, 'left_to_right')
        self.generator_rtl = Encoder(self.generator_cfg, 'right_to_left')
      elif not self.tie_generator:
        self.generator = Encoder(self.generator_cfg)
      self.generator_head = GeneratorHead(self.generator_cfg)
    self.discriminator = Encoder(self.discriminator_cfg)
    if self.main_head == 'discriminator':
      self.discriminator_head = DiscriminatorHead(self.discriminator_cfg)
    else:
      self.mlm_head = GeneratorHead(self.discriminator_cfg)
      if self.main_head == 'mlm_copy':
        self.copy_head = DiscriminatorHead(self.discriminator_cfg)

  def _embed(
    self, network: str, input_ids: Array, token_type_ids: Array, deterministic: bool
  ) -> tuple[Array, Array]:
    """(`network`'s embedded input, the word table its MLM output layer is tied to)."""
    if self.embedding_sharing == 'tied' or (
      network == 'generator' and self.embedding_sharing == 'gdes'
    ):
      module, base = self.embeddings, None
    elif self.embedding_sharing == 'untied':
      module, base = getattr(self, f'{network}_embeddings'), None
    else:  # The discriminator under GDES.
      module, base = self.discriminator_embeddings, self.embeddings.tables()
    embedded = module(input_ids, token_type_ids, deterministic, base)
    return embedded, module.tables(base)['word_embeddings']

  def generator_logits(
    self,
    input_ids: Array,
    token_type_ids: Array,
    attention_mask: Array,
    masked_positions: Array,
    deterministic: bool = True,
  ) -> Array:
    """float32 MLM logits [B, P, V], computed only at `masked_positions` [B, P]."""
    embedded, word_table = self._embed('generator', input_ids, token_type_ids, deterministic)
    encoder = self.discriminator if self.tie_generator else self.generator
    hidden = encoder(embedded, attention_mask, deterministic)
    hidden = jnp.take_along_axis(hidden, masked_positions[..., None], axis=1)
    return self.generator_head(hidden, word_table)

  def cloze_logits(
    self, input_ids: Array, token_type_ids: Array, attention_mask: Array, deterministic: bool = True
  ) -> Array:
    """float32 logits [B, L, V] of every position's token given all the others, in one
    pass over the unmasked text (Clark et al. 2020, "Pre-Training Transformers as
    Energy-Based Cloze Models", Section 3.1).

    A left-to-right and a right-to-left tower read the text; position t joins the
    first's output at t - 1 and the second's at t + 1, so nothing it reads has seen
    token t. The released code rolls the sequences, so that the first position reads
    the last one's output (and the last the first's); here they read zeros.
    """
    embedded, word_table = self._embed('generator', input_ids, token_type_ids, deterministic)
    left = self.generator_ltr(embedded, attention_mask, deterministic)
    right = self.generator_rtl(embedded, attention_mask, deterministic)
    zeros = jnp.zeros_like(left[:, :1])
    context = jnp.concatenate(
      [
        jnp.concatenate([zeros, left[:, :-1]], axis=1),
        jnp.concatenate([right[:, 1:], zeros], axis=1),
      ],
      axis=-1,
    )
    return self.generator_head(context, word_table)

  def _main_hidden(
    self, input_ids: Array, token_type_ids: Array, attention_mask: Array, deterministic: bool
  ) -> tuple[Array, Array]:
    embedded, word_table = self._embed('discriminator', input_ids, token_type_ids, deterministic)
    return self.discriminator(embedded, attention_mask, deterministic), word_table

  def discriminator_logits(
    self, input_ids: Array, token_type_ids: Array, attention_mask: Array, deterministic: bool = True
  ) -> Array:
    """float32 replaced-token logits [B, L], one per token."""
    hidden, _ = self._main_hidden(input_ids, token_type_ids, attention_mask, deterministic)
    return self.discriminator_head(hidden)

  def mlm_logits(
    self,
    input_ids: Array,
    token_type_ids: Array,
    attention_mask: Array,
    masked_positions: Array,
    deterministic: bool = True,
  ) -> Array:
    """The full-size masked LM's float32 logits [B, P, V] at `masked_positions`."""
    hidden, word_table = self._main_hidden(input_ids, token_type_ids, attention_mask, deterministic)
    hidden = jnp.take_along_axis(hidden, masked_positions[..., None], axis=1)
    return self.mlm_head(hidden, word_table)

  def copy_mlm_logits(
    self, input_ids: Array, token_type_ids: Array, attention_mask: Array, deterministic: bool = True
  ) -> tuple[Array, Array]:
    """(float32 MLM logits [B, L, V], float32 copy logits [B, L]) at every token."""
    hidden, word_table = self._main_hidden(input_ids, token_type_ids, attention_mask, deterministic)
    return self.mlm_head(hidden, word_table), self.copy_head(hidden)

  def __call__(
    self,
    input_ids: Array,
    token_type_ids: Array,
    attention_mask: Array,
    masked_positions: Array,
    deterministic: bool = True,
  ) -> tuple[Array, ...]:
    """Every network and head on the same input; used to create every parameter."""
    args = (input_ids, token_type_ids, attention_mask)
    outputs = ()
    if self.cloze_generator:
      outputs += (self.cloze_logits(*args, deterministic),)
    elif self.generator_cfg is not None:
      outputs += (self.generator_logits(*args, masked_positions, deterministic),)
    if self.main_head == 'discriminator':
      return outputs + (self.discriminator_logits(*args, deterministic),)
    if self.main_head == 'mlm':
      return outputs + (self.mlm_logits(*args, masked_positions, deterministic),)
    return outputs + self.copy_mlm_logits(*args, deterministic)


def _head_dense(features: int, name: str) -> nn.Dense:
  """A fine-tuning head's linear layer: float32, with tf.layers.dense's default
  initialisation, as the released heads."""
  return nn.Dense(
    features,
    dtype=jnp.float32,
    kernel_init=nn.with_logical_partitioning(nn.initializers.xavier_uniform(), ('embed', None)),
    bias_init=_zeros((None,)),
    name=name,
  )


class SequenceClassifier(nn.Module):
  """The discriminator with a task head, for fine-tuning.

  As the released fine-tuning code: the final hidden state of [CLS] (no
  pooler layer), dropout, then one linear layer to the label logits (or to
  one score for regression). Parameter names match the pretraining tree
  ('embeddings', 'discriminator'), so pretrained weights drop in.
  """

  cfg: EncoderConfig
  num_outputs: int
  head_dropout_rate: float = 0.1

  @nn.compact
  def __call__(
    self, input_ids: Array, token_type_ids: Array, attention_mask: Array, deterministic: bool = True
  ) -> Array:
    """float32 logits [B, num_outputs] ([B, L, num_outputs] for TokenClassifier)."""
    embedded = Embeddings(self.cfg, name='embeddings')(input_ids, token_type_ids, deterministic)
    hidden = Encoder(self.cfg, name='discriminator')(embedded, attention_mask, deterministic)
    read = Dropout(self.head_dropout_rate)(self._read(hidden), deterministic=deterministic)
    return _head_dense(self.num_outputs, 'classifier')(read.astype(jnp.float32))

  def _read(self, hidden: Array) -> Array:
    """What the head reads of the final hidden states [B, L, H]: [CLS]'s."""
    return hidden[:, 0]


class TokenClassifier(SequenceClassifier):
  """The discriminator with a head on every token, for tagging (NER, chunking):
  as the released code's tagging head, SequenceClassifier's dropout and linear
  layer on each final hidden state."""

  def _read(self, hidden: Array) -> Array:
    return hidden


# What a position that cannot hold an answer scores: its softmax weight is 0.
_NOT_AN_ANSWER = -1e4
# The released code's width for the end and answerability layers (qa_tasks.py).
_QA_HIDDEN = 512


class SpanPredictor(nn.Module):
  """The discriminator with the released code's question-answering head
  (finetune/qa/qa_tasks.py with joint_prediction and answerable_uses_start_logits,
  its defaults), for SQuAD:

  - start logits: one linear unit on each final hidden state;
  - end logits given a start: a 512-unit GELU layer on [the start's state; each
    position's state], then one unit. Training conditions on the gold start;
    prediction on each of the `beam_size` likeliest starts, and keeps the
    `beam_size` likeliest ends of each;
  - with `unanswerable` (v2.0), an answerability logit: a 512-unit GELU layer on
    [CLS]'s state and the start distribution's mean state, then one unit.

  Answers may start and end only in the context (segment 1) or at [CLS], as the
  released answer_mask. No dropout in the head, as released.

  Training (`start_positions` given) returns {'start', 'end'}: [B, L] logits;
  prediction returns {'start_log_probs', 'starts'}: [B, beam], and {'end_log_probs',
  'ends'}: [B, beam, beam]. Both add 'answerable' [B] with `unanswerable`.
  """

  cfg: EncoderConfig
  unanswerable: bool = False
  beam_size: int = 20

  @nn.compact
  def __call__(
    self,
    input_ids: Array,
    token_type_ids: Array,
    attention_mask: Array,
    deterministic: bool = True,
    start_positions: Array | None = None,
  ) -> dict[str, Array]:
    cfg = self.cfg
    embedded = Embeddings(cfg, name='embeddings')(input_ids, token_type_ids, deterministic)
    hidden = Encoder(cfg, name='discriminator')(embedded, attention_mask, deterministic)
    hidden = hidden.astype(jnp.float32)
    allowed = (jnp.asarray(attention_mask) * token_type_ids > 0).at[:, 0].set(True)
    start = jnp.where(allowed, _head_dense(1, 'start')(hidden)[..., 0], _NOT_AN_ANSWER)

    # One layer on the pair [start state; end state] is a sum of one layer on each,
    # so the pairs of the beam ([B, beam, L, 2H]) are never built.
    pair_init = lambda key, shape, dtype=jnp.float32: nn.initializers.xavier_uniform()(
      key, (2 * shape[1], shape[2]), dtype
    ).reshape(shape)
    pair = self.param(
      'end_hidden_kernel',
      nn.with_logical_partitioning(pair_init, (None, 'embed', None)),
      (2, cfg.hidden_size, _QA_HIDDEN),
    )
    pair_bias = self.param('end_hidden_bias', _zeros((None,)), (_QA_HIDDEN,))
    end_logit = _head_dense(1, 'end')

    def end_logits(start_states: Array) -> Array:
      """[B, S, L] end logits for S start states [B, S, H]."""
      from_start = jnp.einsum('bsh,hk->bsk', start_states, pair[0])
      from_end = jnp.einsum('blh,hk->blk', hidden, pair[1])
      x = _gelu(from_start[:, :, None] + from_end[:, None] + pair_bias)
      return jnp.where(allowed[:, None], end_logit(x)[..., 0], _NOT_AN_ANSWER)

    if start_positions is not None:
      states = jnp.take_along_axis(hidden, start_positions[:, None, None], axis=1)
      outputs = {'start': start, 'end': end_logits(states)[:, 0]}
    else:
      outputs = self._beam(start, hidden, end_logits)
    if self.unanswerable:
      mean_state = jnp.einsum('bl,blh->bh', jax.nn.softmax(start), hidden)
      x = _gelu(
        _head_dense(_QA_HIDDEN, 'answerable_hidden')(
          jnp.concatenate([hidden[:, 0], mean_state], -1)
        )
      )
      outputs['answerable'] = _head_dense(1, 'answerable')(x)[..., 0]
    return outputs

  def _beam(self, start: Array, hidden: Array, end_logits) -> dict[str, Array]:
    """The beam's starts and, for each, its likeliest ends. A batch cut shorter than the
    beam (features.trim_padding) fills it with [CLS], which holds no answer."""
    k = min(self.beam_size, start.shape[1])
    start_log_probs, starts = jax.lax.top_k(jax.nn.log_softmax(start), k)
    states = jnp.take_along_axis(hidden, starts[..., None], axis=1)
    end_log_probs, ends = jax.lax.top_k(jax.nn.log_softmax(end_logits(states)), k)
    fill = self.beam_size - k
    pad = lambda x, value: jnp.pad(x, [(0, 0)] + [(0, fill)] * (x.ndim - 1), constant_values=value)
    return {
      'start_log_probs': pad(start_log_probs, -jnp.inf),
      'starts': pad(starts, 0),
      'end_log_probs': pad(end_log_probs, -jnp.inf),
      'ends': pad(ends, 0),
    }
