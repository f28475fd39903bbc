"""Pretrains the HF `transformers` reference on our prepared data, for learning-curve checks.

Does our replaced-token detection learn as fast as a reference implementation?
This trains the PyTorch step of benchmarks/hf_baseline.py (HF ELECTRA modules,
shared embeddings, the same masking, sampling at the config's temperature and
loss) with the same config
as `python -m electra_jax.main`: the same prepared batches in the same order,
learning-rate schedule, AdamW settings and clipping. It prints the same
metrics every --log_every steps, averaged over the window, so the two logs can
be read side by side.

  python -m benchmarks.hf_reference_run --config=configs/small.py \
      --config.data.prepared_dir=DIR [--config.x=y ...] --steps=1000

Differences that remain: PyTorch's AdamW always corrects bias (set
--config.adam_bias_correction=True on our side to match), and random draws
come from torch's generator, not jax.random.
"""

import collections
import os

from absl import flags
import numpy as np
import torch

from benchmarks import hf_baseline
from electra_jax import cli, objectives, optim
from electra_jax.data import pipeline, shards

_CONFIG = cli.define_config(None, 'Path to a config file.')
_STEPS = flags.DEFINE_integer('steps', 1000, 'Train steps to run.')
_LOG_EVERY = flags.DEFINE_integer('log_every', 50, 'Steps per printed window.')


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  config = _CONFIG.value
  data = shards.PreparedData.load(config.data.prepared_dir)
  pipeline.check_compatible(data, config)
  torch.set_num_threads(os.cpu_count() or 1)
  torch.manual_seed(config.seed)
  model = hf_baseline.ElectraPair(config).train()
  optimizer, params = hf_baseline.make_optimizer(config, model)
  # Our schedule, as a multiple of the peak rate torch's AdamW was given.
  schedule = optim.learning_rate_schedule(config)
  scheduler = torch.optim.lr_scheduler.LambdaLR(
    optimizer, lambda step: float(schedule(step)) / config.learning_rate
  )
  obj = objectives.Settings.from_config(config, data.special_ids)
  rng = torch.Generator().manual_seed(config.seed)
  batches = pipeline.train_iterator(data, config, process_index=0, process_count=1)
  window = collections.defaultdict(list)
  for step in range(1, _STEPS.value + 1):
    batch = next(batches)
    loss, metrics = hf_baseline.pretraining_losses(
      model,
      torch.from_numpy(np.asarray(batch['input_ids'])).long(),
      torch.from_numpy(np.asarray(batch['attention_mask'])).long(),
      torch.from_numpy(np.asarray(batch['token_type_ids'])).long(),
      obj=obj,
      generator=rng,
      with_metrics=True,
    )
    hf_baseline.apply_update(optimizer, params, loss, config.max_grad_norm)
    scheduler.step()
    for name, value in metrics.items():
      window[name].append(value)
    if step % _LOG_EVERY.value == 0:
      print(
        f'[{step}] ' + ', '.join(f'{k}={np.mean(v):.5g}' for k, v in sorted(window.items())),
        flush=True,
      )
      window.clear()


if __name__ == '__main__':
  flags.mark_flags_as_required(['config'])
  cli.run(main)
