"""Threefry random numbers for dropout and Gumbel noise: bits, distributions, gradients."""

import jax
from jax.extend import random as jax_random
import jax.numpy as jnp
import numpy as np
import pytest

from electra_jax import prng


def test_threefry_matches_jax_bit_for_bit():
  rng = np.random.default_rng(0)
  x0, x1 = (jnp.asarray(rng.integers(0, 2**32, (4, 1000), dtype=np.uint32)) for _ in range(2))
  for seed in (0, 1, 2**31 + 5):
    k = jax.random.key_data(jax.random.key(seed))
    ours = jax.jit(prng.threefry_2x32)((k[0], k[1]), x0, x1)
    theirs = jax_random.threefry2x32_p.bind(k[0], k[1], x0, x1)
    for a, b in zip(ours, theirs):
      np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_uniform_is_uniform_and_independent_within_and_across_blocks():
  u = np.asarray(jax.jit(prng.uniform, static_argnums=1)(jax.random.key(0), (64, 8192)))
  assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
  assert abs(u.mean() - 0.5) < 0.002 and abs(u.var() - 1 / 12) < 0.001
  counts = np.histogram(u, bins=16, range=(0, 1))[0]
  np.testing.assert_allclose(counts / u.size, 1 / 16, rtol=0.02)
  # Elements 2i and 2i + 1 are the two words of one block; 2i + 1 and 2i + 2
  # come from neighbouring blocks; rows differ in the second counter word.
  for a, b in ((u[:, 0::2], u[:, 1::2]), (u[:, 1:-1:2], u[:, 2::2]), (u[0], u[1])):
    assert abs(np.corrcoef(a.ravel(), b.ravel())[0, 1]) < 0.01
  other = np.asarray(prng.uniform(jax.random.key(1), (64, 8192)))
  assert abs(np.corrcoef(u.ravel(), other.ravel())[0, 1]) < 0.01


def test_odd_last_axis_and_one_dimensional_draws():
  key = jax.random.key(3)
  odd = np.asarray(prng.uniform(key, (3, 5)))
  assert odd.shape == (3, 5) and len(np.unique(odd)) == 15
  flat = np.asarray(prng.uniform(key, (7,)))
  assert flat.shape == (7,) and len(np.unique(flat)) == 7


def test_gumbel_moments():
  g = np.asarray(prng.gumbel(jax.random.key(0), (256, 4096)))
  assert np.isfinite(g).all()
  np.testing.assert_allclose(g.mean(), np.euler_gamma, atol=0.01)
  np.testing.assert_allclose(g.var(), np.pi**2 / 6, rtol=0.01)


def test_dropout_rate_scale_and_independence_of_the_four_decisions():
  x = jnp.ones((32, 128, 256), jnp.float32)
  y = np.asarray(jax.jit(prng.dropout, static_argnums=2)(jax.random.key(0), x, 0.1))
  threshold = prng.dropout_threshold(0.1)
  assert threshold == 6554
  scale = 65536 / (65536 - threshold)
  dropped = y == 0
  assert set(np.unique(y).tolist()) == {0.0, np.float32(scale)}
  np.testing.assert_allclose(dropped.mean(), threshold / 65536, atol=0.002)
  np.testing.assert_allclose(y.mean(), 1.0, atol=0.003)  # Unbiased.
  # Positions 4i..4i+3 share a block: each decides at the rate, independently.
  quarters = dropped.reshape(-1, 4)
  np.testing.assert_allclose(quarters.mean(0), 0.1, atol=0.003)
  p = threshold / 65536
  for i, j in ((0, 1), (0, 2), (1, 3), (2, 3)):
    np.testing.assert_allclose((quarters[:, i] & quarters[:, j]).mean(), p * p, atol=0.002)


def test_dropout_gradient_is_the_mask_times_the_scale():
  key = jax.random.key(5)
  x = jnp.asarray(np.random.default_rng(0).normal(size=(8, 64)), jnp.float32)
  w = jnp.asarray(np.random.default_rng(1).normal(size=(8, 64)), jnp.float32)
  y = prng.dropout(key, x, 0.25)
  grad = jax.jit(jax.grad(lambda x: jnp.sum(prng.dropout(key, x, 0.25) * w)))(x)
  scale = 65536 / (65536 - prng.dropout_threshold(0.25))
  np.testing.assert_allclose(grad, np.where(np.asarray(y) != 0, w * scale, 0), rtol=1e-6)


def test_dropout_edge_rates():
  x = jnp.ones((4, 8))
  assert prng.dropout(jax.random.key(0), x, 0.0) is x
  assert prng.dropout_threshold(1e-6) == 0


@pytest.mark.parametrize('impl', ['rbg', 'unsafe_rbg'])
def test_other_key_implementations_draw_through_jax_random(impl):
  key = jax.random.key(0, impl=impl)
  u = np.asarray(jax.jit(prng.uniform, static_argnums=1)(key, (64, 4096)))
  assert abs(u.mean() - 0.5) < 0.003 and abs(u.var() - 1 / 12) < 0.002
  dropped = np.asarray(prng.dropout(key, jnp.ones((64, 4096)), 0.1)) == 0
  np.testing.assert_allclose(dropped.mean(), 0.1, atol=0.003)


def test_draws_too_large_for_the_counter_are_refused():
  with pytest.raises(ValueError, match='over 2\\^32 Threefry blocks'):
    jax.eval_shape(lambda k: prng.uniform(k, (2, 2**33 + 4)), jax.random.key(0))
