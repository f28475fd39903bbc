"""Fine-tuning a pretrained discriminator on GLUE: `python -m electra_jax.finetune`."""
