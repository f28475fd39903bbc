"""Baselines written with other libraries, timed beside electra_jax's step."""
