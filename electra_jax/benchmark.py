"""Times the real train step: compile time, XLA memory, steady-state speed, MFU.

  python -m electra_jax.benchmark --config=configs/small.py --config.batch_size=16

Batches are synthetic full-length rows ([CLS], random ids, [SEP]): the step's
cost does not depend on which tokens it sees. Each timed step is waited for,
warm-up steps are excluded, and the table gives the median with min and max.
On CPU, MFU is relative to a float32 matmul peak measured in the same run.
"""

import statistics
import time

from absl import app, flags
import jax
import jax.numpy as jnp
from ml_collections import config_flags
import numpy as np

from electra_jax import config_lib, flops, sharding, train
from electra_jax.data import tokenizers

_CONFIG = config_flags.DEFINE_config_file('config', None, 'Path to a config file.',
                                          lock_config=True)
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps.')
_WARMUP = flags.DEFINE_integer('warmup', 3, 'Untimed steps after compilation.')
_BASELINE = flags.DEFINE_enum('baseline', None, ['hf'], 'Also time this baseline in the same '
                              'process (hf: benchmarks/hf_baseline.py, HF transformers in '
                              'PyTorch; run from the repository root) and print the ratio.')
flags.mark_flags_as_required(['config'])

# The special-token ids of a tokenizer trained by electra_jax.
_SPECIAL = tokenizers.TRAINED_SPECIAL_IDS


def measure_cpu_matmul_peak(n: int = 2048, repeats: int = 5) -> float:
  """Best float32 FLOP/s of an n x n x n matmul on this machine's CPU."""
  x = jnp.asarray(np.random.default_rng(0).standard_normal((n, n)), jnp.float32)
  matmul = jax.jit(lambda a, b: a @ b)
  matmul(x, x).block_until_ready()
  best = float('inf')
  for _ in range(repeats):
    start = time.perf_counter()
    matmul(x, x).block_until_ready()
    best = min(best, time.perf_counter() - start)
  return 2 * n**3 / best


def synthetic_batch(config, rng: np.random.Generator) -> dict[str, np.ndarray]:
  ids = rng.integers(5, config.model.vocab_size,
                     (config.batch_size, config.max_seq_length)).astype(np.int32)
  ids[:, 0], ids[:, -1] = _SPECIAL.cls, _SPECIAL.sep
  return {'input_ids': ids, 'attention_mask': np.ones_like(ids),
          'token_type_ids': np.zeros_like(ids)}


def _mib(n: float) -> str:
  return f'{n / 2**20:,.1f} MiB'


def run(config) -> dict[str, float]:
  """Compiles and times the train step for `config`; prints and returns the figures."""
  config_lib.validate(config, check_data=False)
  mesh = sharding.make_mesh(config.mesh)
  device = jax.devices()[0]
  print(f'devices: {jax.device_count()} x {device.device_kind} ({device.platform}); '
        f'mesh {dict(mesh.shape)}; batch {config.batch_size} x {config.max_seq_length}; '
        f'dtype {config.model.dtype}')
  with jax.set_mesh(mesh):
    state, step, batch_sharding, compile_s = train.setup_train_step(config, mesh, _SPECIAL)
    memory = step.memory_analysis()
    print(f'compile: {compile_s:.1f} s')
    if memory is not None:
      print(f'XLA memory per device: arguments {_mib(memory.argument_size_in_bytes)}, '
            f'outputs {_mib(memory.output_size_in_bytes)}, '
            f'aliased {_mib(memory.alias_size_in_bytes)}, '
            f'temporaries {_mib(memory.temp_size_in_bytes)}')

    batch = sharding.make_global_batch(synthetic_batch(config, np.random.default_rng(0)),
                                       batch_sharding)
    for _ in range(_WARMUP.value):
      state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    times = []
    for _ in range(_STEPS.value):
      start = time.perf_counter()
      state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - start)

  step_s = statistics.median(times)
  model_flops = flops.train_step_flops(config)
  peak = flops.device_peak_flops(device.device_kind)
  peak_source = 'listed bf16 peak'
  if peak is None:
    peak, peak_source = measure_cpu_matmul_peak(), 'measured f32 matmul peak'
  peak *= jax.device_count()
  stats = device.memory_stats() or {}
  figures = {
      'step_time_s': step_s,
      'tokens_per_s': config.batch_size * config.max_seq_length / step_s,
      'examples_per_s': config.batch_size / step_s,
      'model_tflops_per_s': model_flops / step_s / 1e12,
      'mfu': model_flops / step_s / peak,
      'compile_s': compile_s,
  }
  print(f'step time: median {step_s * 1e3:.1f} ms (min {min(times) * 1e3:.1f}, '
        f'max {max(times) * 1e3:.1f}) over {len(times)} steps')
  print(f'{"tokens/s":>12} {"examples/s":>11} {"TFLOP/s":>9} {"MFU":>7} {"peak memory":>13}')
  peak_memory = _mib(stats['peak_bytes_in_use']) if 'peak_bytes_in_use' in stats else 'n/a'
  print(f'{figures["tokens_per_s"]:>12,.0f} {figures["examples_per_s"]:>11,.1f} '
        f'{figures["model_tflops_per_s"]:>9.3f} {figures["mfu"]:>7.1%} {peak_memory:>13}')
  print(f'model FLOPs per step {model_flops:.3e}; MFU against the {peak_source} '
        f'({peak / 1e12:.3f} TFLOP/s over {jax.device_count()} devices)')
  return figures


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  config = _CONFIG.value
  ours = run(config)
  if _BASELINE.value == 'hf':
    from benchmarks import hf_baseline  # pylint: disable=g-import-not-at-top
    times = hf_baseline.run(config, synthetic_batch(config, np.random.default_rng(0)),
                            steps=_STEPS.value, warmup=_WARMUP.value, mask_id=_SPECIAL.mask,
                            max_predictions=config_lib.max_predictions_per_seq(config))
    baseline = config.batch_size * config.max_seq_length / statistics.median(times)
    print(f'baseline tokens/s: {baseline:,.0f}')
    print(f'ratio: {ours["tokens_per_s"] / baseline:.2f}')


if __name__ == '__main__':
  app.run(main)
