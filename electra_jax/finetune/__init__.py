"""Fine-tuning a pretrained network on GLUE, SQuAD, tagging or your own files:
`python -m electra_jax.finetune`."""
