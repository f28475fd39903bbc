"""ml_collections configs for electra_jax; each file defines `get_config()`."""
