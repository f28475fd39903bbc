"""electra_jax: ELECTRA pretraining in JAX/Flax."""

__version__ = '0.1.0'
