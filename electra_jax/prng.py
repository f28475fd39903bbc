"""Threefry random numbers for dropout masks and Gumbel noise, every bit used.

The train step draws about 32M dropout decisions and 9M Gumbel variates per
ELECTRA-Small batch of 16 x 128. The generator is jax.random's own
(Threefry-2x32, keyed by jax.random keys), used more cheaply:

- jax.random.bits spends one Threefry block (20 rounds, 64 bits out) on each
  32-bit value, XOR-ing the block's two words. Here a block gives two 32-bit
  uniforms, or four 16-bit dropout decisions. (XLA's CPU backend computes the
  two words in two kernels; TPU and GPU fuse them into one.)
- The rounds are written out with lax ops, as JAX lowers them on TPU and GPU,
  so XLA fuses them into one elementwise kernel. On CPU, JAX lowers its
  primitive as a loop over whole arrays, 3x slower (docs/experiments/2026-11-22_cpu_step.md).

The rounds equal jax.extend.random.threefry2x32_p's bit for bit
(tests/test_prng.py). Counters come from iotas, with the leading axis in the
block's second word, so a draw on a batch-sharded array is computed shard by
shard, as jax.random's partitionable draws are.
"""

import functools
import math

import jax
from jax import lax
import jax.numpy as jnp

Array = jax.Array

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_KEY_PARITY = 0x1BD11BDA
_DROPOUT_LEVELS = 1 << 16  # Dropout decides with 16 bits: rates are multiples of 2^-16.


def threefry_2x32(key_words: tuple[Array, Array], x0: Array, x1: Array) -> tuple[Array, Array]:
  """Threefry-2x32 (20 rounds) of the counter pairs (x0, x1), as uint32 arrays."""
  k0, k1 = key_words
  schedule = (k0, k1, k0 ^ k1 ^ jnp.uint32(_KEY_PARITY))
  x0, x1 = x0 + k0, x1 + k1
  for i in range(5):
    for r in _ROTATIONS[i % 2]:
      x0 = x0 + x1
      x1 = x0 ^ ((x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r)))
    x0 = x0 + schedule[(i + 1) % 3]
    x1 = x1 + schedule[(i + 2) % 3] + jnp.uint32(i + 1)
  return x0, x1


def _threefry_key_words(key: Array) -> tuple[Array, Array] | None:
  """The two uint32 words of a Threefry key (typed, or raw key data); None for others."""
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    if str(jax.random.key_impl(key)) != 'threefry2x32':
      return None
    key = jax.random.key_data(key)
  return key[0], key[1]


def _block_words(key: Array, shape: tuple[int, ...], per_block: int) -> Array:
  """uint32 words [*shape[:-1], n_blocks, 2]: one Threefry block per `per_block` elements."""
  blocks = (*shape[:-1], -(-shape[-1] // per_block))
  key_words = _threefry_key_words(key)
  if key_words is None:
    # Keys of another implementation (rbg or unsafe_rbg, chosen with
    # jax_default_prng_impl) draw the same words through jax.random.
    return jax.random.bits(key, (*blocks, 2), jnp.uint32)
  # The first counter word numbers the blocks within one index of the leading
  # axis, the second is that index: unique per block, and built from iotas,
  # which XLA's partitioner splits along any sharded axis.
  first = 1 if len(blocks) > 1 else 0
  if math.prod(blocks[first:]) > 2**32:
    raise ValueError(
      f'a random draw of shape {shape} needs over 2^32 Threefry blocks per index of its first axis'
    )
  within = jnp.zeros(blocks, jnp.uint32)
  stride = 1
  for axis in reversed(range(first, len(blocks))):
    within = within + lax.broadcasted_iota(jnp.uint32, blocks, axis) * jnp.uint32(stride)
    stride *= blocks[axis]
  leading = lax.broadcasted_iota(jnp.uint32, blocks, 0) if first else jnp.zeros_like(within)
  return jnp.stack(threefry_2x32(key_words, within, leading), axis=-1)


def uniform(key: Array, shape: tuple[int, ...]) -> Array:
  """float32 uniforms in [0, 1) with 23 random mantissa bits, as jax.random.uniform.

  Two per Threefry block.
  """
  words = _block_words(key, shape, 2).reshape(*shape[:-1], -1)[..., : shape[-1]]
  one_to_two = lax.bitcast_convert_type(
    (words >> jnp.uint32(9)) | jnp.uint32(0x3F800000), jnp.float32
  )
  return one_to_two - 1.0


def gumbel(key: Array, shape: tuple[int, ...]) -> Array:
  """Standard Gumbel variates in float32, -log(-log(u)) with u > 0."""
  u = jnp.maximum(uniform(key, shape), jnp.finfo(jnp.float32).tiny)
  return -jnp.log(-jnp.log(u))


def dropout_threshold(rate: float) -> int:
  """The 16-bit threshold under which an element is dropped; rate ~ threshold / 2^16."""
  return round(rate * _DROPOUT_LEVELS)


def _keep_mask(key: Array, shape: tuple[int, ...], threshold: int) -> Array:
  words = _block_words(key, shape, 4)
  halves = jnp.stack([words & jnp.uint32(0xFFFF), words >> jnp.uint32(16)], axis=-1)
  return halves.reshape(*shape[:-1], -1)[..., : shape[-1]] >= jnp.uint32(threshold)


def _keep_and_scale(x: Array, keep: Array, threshold: int) -> Array:
  scale = jnp.asarray(_DROPOUT_LEVELS / (_DROPOUT_LEVELS - threshold), x.dtype)
  return jnp.where(keep, x * scale, jnp.zeros((), x.dtype))


def dropout(key: Array, x: Array, rate: float) -> Array:
  """Zeroes each element with probability `rate` (to 2^-16) and rescales the rest.

  Four 16-bit decisions per Threefry block. The scale is 1 / (the exact keep
  probability), so the expectation of the output is x.
  """
  threshold = dropout_threshold(rate)
  if threshold == 0:
    return x
  if threshold >= _DROPOUT_LEVELS:
    return jnp.zeros_like(x)
  return _dropout(key, x, threshold)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _dropout(key: Array, x: Array, threshold: int) -> Array:
  return _keep_and_scale(x, _keep_mask(key, x.shape, threshold), threshold)


def _dropout_fwd(key: Array, x: Array, threshold: int) -> tuple[Array, Array]:
  return _dropout(key, x, threshold), key  # The backward pass redraws the mask.


def _dropout_bwd(threshold: int, key: Array, g: Array) -> tuple[None, Array]:
  grad = _keep_and_scale(g, _keep_mask(key, g.shape, threshold), threshold)
  # On CPU a barrier keeps this product a kernel of its own: fused into the
  # transpose that the next weight gradient's matmul wants, it made XLA's CPU
  # emitter run that transpose several times slower (docs/experiments/2026-11-22_cpu_step.md).
  grad = lax.platform_dependent(grad, cpu=lax.optimization_barrier, default=lambda g: g)
  return None, grad


_dropout.defvjp(_dropout_fwd, _dropout_bwd)
