"""Text input: corpus reading, tokenization, example packing and batching."""
