"""Analytic model FLOPs of one ELECTRA train step, and per-device peaks for MFU.

Counts matmul FLOPs (2 per multiply-add) of the forward pass and multiplies by
3 for forward + backward. Attention is bidirectional, so QK^T and PV count in
full. Each objective counts the networks it runs and its heads at the
positions it computes them: the generator's output layer at the masked
positions only, but for Electric's cloze model at every token. Embedding
lookups, LayerNorm, softmax and the optimizer are not counted, as is usual for
MFU.

As a command, it prints one number: the FLOPs of one train step, or with
--budget_tflop the train steps that spend that budget (rounded), as the
objective ablation needs to give each objective the same compute:

  python -m electra_jax.flops --config=configs/small.py [--config.key=value ...] \
      [--budget_tflop=600]
"""

import time
from typing import Any

from absl import flags
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from electra_jax import cli, config_lib, errors, objectives
from electra_jax.config_lib import EncoderConfig

# Dense bf16 peak FLOP/s per device (chip), from the vendors' spec sheets, keyed
# by the start of jax's `device_kind`; the first matching key wins, so a variant
# comes before its family (NVIDIA lists sparse figures: these are half of them).
PEAK_FLOPS_PER_DEVICE = {
  'TPU v4': 275e12,
  'TPU v5 lite': 197e12,  # v5e
  'TPU v5e': 197e12,
  'TPU v5p': 459e12,
  'TPU v5': 459e12,
  'TPU v6 lite': 918e12,  # v6e (Trillium)
  'TPU v6e': 918e12,
  'NVIDIA H100 PCIe': 756e12,
  'NVIDIA H100 NVL': 835e12,
  'NVIDIA H100': 989e12,  # SXM ('NVIDIA H100 80GB HBM3')
  'NVIDIA H200': 989e12,
  'NVIDIA GH200': 989e12,
  'NVIDIA A100': 312e12,
}


def encoder_forward_flops_per_token(cfg: EncoderConfig, seq_len: int) -> float:
  """Matmul FLOPs per token of the encoder's forward pass, projection included."""
  h, i = cfg.hidden_size, cfg.intermediate_size
  per_layer = (
    2 * h * 3 * h  # fused QKV
    + 2 * seq_len * h * 2  # QK^T and PV over all keys
    + 2 * h * h  # attention output
    + 2 * 2 * h * i
  )  # FFN in and out
  projection = 2 * cfg.embedding_size * h if cfg.embedding_size != h else 0
  return cfg.num_layers * per_layer + projection


def _mlm_head_flops(cfg: EncoderConfig, inputs: int | None = None) -> float:
  """Per prediction: the MLM dense layer (from `inputs` features, default the hidden
  size), then the tied output layer."""
  inputs = inputs or cfg.hidden_size
  return 2 * inputs * cfg.embedding_size + 2 * cfg.embedding_size * cfg.vocab_size


def _token_head_flops(cfg: EncoderConfig) -> float:
  """Per token: the discriminator's (or copy) head, dense then dense to 1."""
  return 2 * cfg.hidden_size * cfg.hidden_size + 2 * cfg.hidden_size


def train_step_flops(config: ml_collections.ConfigDict) -> float:
  """Model FLOPs of one train step over the global batch (forward + backward), for
  config.objective: the networks it runs, and its heads where it computes them."""
  disc, gen = config_lib.discriminator_config(config), config_lib.generator_config(config)
  tokens = config.batch_size * config.max_seq_length
  predictions = config.batch_size * config_lib.max_predictions_per_seq(config)
  forward = tokens * encoder_forward_flops_per_token(disc, config.max_seq_length)
  if config.objective.name == 'electric':
    # Two towers, whose masked attention is computed in full, and the head on both
    # towers' outputs at every token.
    forward += tokens * (
      2 * encoder_forward_flops_per_token(gen, config.max_seq_length)
      + _mlm_head_flops(gen, 2 * gen.hidden_size)
    )
  elif objectives.has_generator_network(config):
    forward += tokens * encoder_forward_flops_per_token(
      gen, config.max_seq_length
    ) + predictions * _mlm_head_flops(gen)
  head = objectives.main_head(config.objective.name)
  if head == 'discriminator':
    forward += tokens * _token_head_flops(disc)
  elif head == 'mlm':  # At the masked positions only.
    forward += predictions * _mlm_head_flops(disc)
  else:  # The MLM and copy heads at every token.
    forward += tokens * (_mlm_head_flops(disc) + _token_head_flops(disc))
  return 3 * forward


def device_peak_flops(device_kind: str) -> float | None:
  """Listed peak for an accelerator's `device_kind`, or None (e.g. for CPU)."""
  for name, peak in PEAK_FLOPS_PER_DEVICE.items():
    if device_kind.startswith(name):
      return peak
  return None


def measure_matmul_peak(n: int = 2048, repeats: int = 5, dtype: jnp.dtype = jnp.float32) -> float:
  """Best FLOP/s of an n x n x n matmul of `dtype` on this process's first device."""
  x = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), dtype)
  matmul = jax.jit(lambda a, b: a @ b)
  matmul(x, x).block_until_ready()
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(x, x).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def peak_flops(devices: list[Any]) -> tuple[float, str]:
  """(peak FLOP/s of `devices` together, what the figure is) for MFU.

  Accelerators: the listed bf16 peak per device. CPU: a float32 matmul peak
  measured now, once per process, since a process's CPU devices (simulated
  ones too) share its host's cores.
  """
  listed = device_peak_flops(devices[0].device_kind)
  if listed is not None:
    return listed * len(devices), 'listed bf16 peak'
  processes = len({d.process_index for d in devices})
  return measure_matmul_peak() * processes, 'measured f32 matmul peak'


def _main() -> None:
  # Defined here, not at import: the trainer imports this module and owns --config.
  config = cli.define_config(None, 'Path to a config file in configs/.')
  budget = flags.DEFINE_float(
    'budget_tflop', None, 'Print the train steps that spend this many TFLOP instead.'
  )
  flags.mark_flag_as_required('config')

  def main(argv: list[str]) -> None:
    del argv  # cli.run refuses words that are not flags.
    # A config the trainer would refuse gets no count: the objective ablation sizes
    # its runs with this, before the trainer sees the config.
    config_lib.validate(config.value, check_data=False)
    per_step = train_step_flops(config.value)
    if budget.value is None:
      print(per_step)
    elif budget.value <= 0:
      raise errors.UserError(f'--budget_tflop={budget.value}: must be positive')
    elif (steps := round(budget.value * 1e12 / per_step)) < 1:
      raise errors.UserError(
        f'--budget_tflop={budget.value}: buys no train step of this config, which costs '
        f'{per_step / 1e12:.4g} TFLOP a step; give at least that'
      )
    else:
      print(steps)

  cli.run(main)


if __name__ == '__main__':
  _main()
