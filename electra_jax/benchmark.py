"""Times the real train step: compile time, XLA memory, steady-state speed, MFU.

  python -m electra_jax.benchmark --config=configs/small.py --config.batch_size=16

With --checkpoint it also saves checkpoints between steps as the train loop
does, and prints how long the loop is blocked (the step-time blip), how long
the background write takes, the checkpoint's size on disk and the time to
restore it.

With --input_corpus=SPEC it also prepares that corpus (tokenizer from
config.data) and measures preparation (MB of text/s per core) and the Grain
input pipeline (examples/s, host batches made into global arrays), and prints
how many times faster the input is than the train step consumes examples.

Batches are synthetic full-length rows ([CLS], random ids, [SEP]): the step's
cost does not depend on which tokens it sees. Each timed step is waited for,
warm-up steps are excluded, and the table gives the median with min and max.
On CPU, MFU is relative to a float32 matmul peak measured in the same run.
"""

from collections.abc import Callable
import dataclasses
import json
import os
import resource
import shutil
import statistics
import tempfile
import time

from absl import flags
from etils import epath
import jax
import numpy as np

from electra_jax import (
  checkpointing,
  cli,
  config_lib,
  errors,
  flops,
  loop,
  sharding,
  train,
)
from electra_jax.data import pipeline, shard_writer, tokenizers

_CONFIG = cli.define_config(None, 'Path to a config file.')
_STEPS = flags.DEFINE_integer('steps', 20, 'Timed steps.')
_WARMUP = flags.DEFINE_integer('warmup', 3, 'Untimed steps after compilation.')
_CHECKPOINT = flags.DEFINE_boolean(
  'checkpoint',
  False,
  'Also time async checkpoint saves in the loop, their size on disk and the restore.',
)
_CHECKPOINT_DIR = flags.DEFINE_string(
  'checkpoint_dir',
  None,
  'Where --checkpoint writes (default: a temporary directory, removed after).',
)
_INPUT_CORPUS = flags.DEFINE_string(
  'input_corpus', None, 'Also benchmark preparing and reading this corpus spec (see prepare_data).'
)
_INPUT_DIR = flags.DEFINE_string(
  'input_dir',
  None,
  'Where --input_corpus is prepared, local or gs://; must not exist yet (default: a '
  'temporary directory).',
)
_PROFILE_DIR = flags.DEFINE_string(
  'profile_dir',
  None,
  'Also trace 3 steps with the JAX '
  'profiler into this directory (TensorBoard/XProf) and write '
  "the compiled step's HLO beside it; "
  'benchmarks/profile_summary.py reads both.',
)
_INPUT_SECONDS = flags.DEFINE_float('input_seconds', 20.0, 'How long to read batches.')
_RESULTS_JSON = flags.DEFINE_string(
  'results_json', None, "Also write the figures (and the baseline's) to this JSON file."
)
flags.mark_flags_as_required(['config'])


# The special-token ids of a tokenizer trained by electra_jax.
_SPECIAL = tokenizers.TRAINED_SPECIAL_IDS
# Small at 16 x 128 faults 225k times a step with glibc's malloc, 30 with tcmalloc.
_FAULTS_WORTH_A_HINT = 10_000


def synthetic_batch(config, rng: np.random.Generator) -> dict[str, np.ndarray]:
  ids = rng.integers(5, config.model.vocab_size, (config.batch_size, config.max_seq_length)).astype(
    np.int32
  )
  ids[:, 0], ids[:, -1] = _SPECIAL.cls, _SPECIAL.sep
  return {
    'input_ids': ids,
    'attention_mask': np.ones_like(ids),
    'token_type_ids': np.zeros_like(ids),
  }


def _mib(n: float) -> str:
  return f'{n / 2**20:,.1f} MiB'


def _host_costs(before, after, steps: int) -> dict[str, float]:
  """Page faults and system CPU time per step, from two getrusage readings."""
  return {
    'page_faults_per_step': (after.ru_minflt - before.ru_minflt) / steps,
    'system_s_per_step': (after.ru_stime - before.ru_stime) / steps,
  }


def run(config) -> dict[str, float]:
  """Compiles and times the train step for `config`; prints and returns the figures."""
  config_lib.validate(config, check_data=False)
  mesh = sharding.make_mesh(config.mesh)
  config_lib.require_backend(config)
  device = jax.devices()[0]
  print(
    f'devices: {jax.device_count()} x {device.device_kind} ({device.platform}); '
    f'mesh {dict(mesh.shape)}; batch {config.batch_size} x {config.max_seq_length}; '
    f'dtype {config.model.dtype}'
  )
  with jax.set_mesh(mesh):
    state, step, batch_sharding, compile_s = train.setup_train_step(config, mesh, _SPECIAL)
    memory = step.memory_analysis()
    print(f'compile: {compile_s:.1f} s')
    if memory is not None:
      print(
        f'XLA memory per device: arguments {_mib(memory.argument_size_in_bytes)}, '
        f'outputs {_mib(memory.output_size_in_bytes)}, '
        f'aliased {_mib(memory.alias_size_in_bytes)}, '
        f'temporaries {_mib(memory.temp_size_in_bytes)}'
      )

    batch = sharding.make_global_batch(
      synthetic_batch(config, np.random.default_rng(0)), batch_sharding
    )
    for _ in range(_WARMUP.value):
      state, _ = step(state, batch)
    jax.block_until_ready(state)
    times = []
    usage_before = resource.getrusage(resource.RUSAGE_SELF)
    for _ in range(_STEPS.value):
      start = time.perf_counter()
      state, metrics = step(state, batch)
      jax.block_until_ready(metrics)
      times.append(time.perf_counter() - start)
    host = _host_costs(usage_before, resource.getrusage(resource.RUSAGE_SELF), len(times))

    if _PROFILE_DIR.value:
      state = trace_steps(step, state, batch, _PROFILE_DIR.value)
    if _CHECKPOINT.value:
      checkpoint_figures = time_checkpoints(
        config, state, step, batch, _CHECKPOINT_DIR.value or tempfile.mkdtemp()
      )

  step_s = statistics.median(times)
  peak, peak_source = flops.peak_flops(jax.devices())
  stats = device.memory_stats() or {}
  figures = {**loop.throughput(step_s, config, peak), 'compile_s': compile_s, **host}
  if 'peak_bytes_in_use' in stats:
    figures['peak_bytes'] = stats['peak_bytes_in_use']
  print(
    f'step time: median {step_s * 1e3:.1f} ms (min {min(times) * 1e3:.1f}, '
    f'max {max(times) * 1e3:.1f}) over {len(times)} steps'
  )
  print(f'{"tokens/s":>12} {"examples/s":>11} {"TFLOP/s":>9} {"MFU":>7} {"peak memory":>13}')
  peak_memory = _mib(stats['peak_bytes_in_use']) if 'peak_bytes_in_use' in stats else 'n/a'
  print(
    f'{figures["tokens_per_s"]:>12,.0f} {figures["examples_per_s"]:>11,.1f} '
    f'{figures["model_tflops_per_s"]:>9.3f} {figures["mfu"]:>7.1%} {peak_memory:>13}'
  )
  print(
    f'model FLOPs per step {flops.train_step_flops(config):.3e}; MFU against the {peak_source} '
    f'({peak / 1e12:.3f} TFLOP/s over {jax.device_count()} devices)'
  )
  print(
    f'host per step: {host["page_faults_per_step"]:,.0f} page faults, '
    f'{host["system_s_per_step"] * 1e3:,.0f} ms of system CPU time'
  )
  if device.platform == 'cpu' and host['page_faults_per_step'] > _FAULTS_WORTH_A_HINT:
    print(
      '  XLA maps and unmaps its temporaries at every step; `source launch/xla_flags.sh '
      'cpu` keeps them mapped (tcmalloc, or huge pages)'
    )
  if _CHECKPOINT.value:
    figures.update(checkpoint_figures)
  return figures


def trace_steps(step, state, batch, directory: str, steps: int = 3):
  """Traces `steps` steps into `directory`, with the step's optimized HLO (whose
  op_name metadata maps each kernel of the trace to the code that made it)."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, 'train_step.hlo.txt'), 'w') as f:
    f.write(step.as_text())
  with jax.profiler.trace(directory):
    for _ in range(steps):
      state, metrics = step(state, batch)
    jax.block_until_ready(metrics)
  print(
    f'profile of {steps} steps: {directory} (summary: python '
    f'benchmarks/profile_summary.py {directory})'
  )
  return state


def _timed(fn, *args):
  start = time.perf_counter()
  result = fn(*args)
  jax.block_until_ready(result)
  return result, time.perf_counter() - start


def _disk_bytes(path: str) -> int:
  return sum(
    os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names
  )


def time_checkpoints(config, state, step, batch, workdir: str, saves: int = 3) -> dict[str, float]:
  """Saves `saves` checkpoints between steps as the train loop does, then restores
  the newest; prints and returns the loop's blip, write time, size and restore time."""
  manager = checkpointing.create_manager(workdir, config)
  saver = checkpointing.AsyncSaver(manager, max_failures_in_a_row=1)
  meta = checkpointing.checkpoint_meta(config, 0, {'file': 'synthetic'}, 'synthetic')
  plain, with_save, during_write, written = [], [], [], []
  for i in range(saves):
    (state, _), seconds = _timed(step, state, batch)
    plain.append(seconds)
    # As in the train loop: the save is called right after the step is
    # dispatched, so it waits for the step, then copies the state to the host.
    start = time.perf_counter()
    state, metrics = step(state, batch)
    saver.save(i + 1, state, {'next_index': 0}, meta)
    jax.block_until_ready(metrics)
    with_save.append(time.perf_counter() - start)
    (state, _), seconds = _timed(step, state, batch)  # While the write goes on.
    during_write.append(seconds)
    saver.wait()
    written.append(time.perf_counter() - start)
  manager.close()
  size = _disk_bytes(os.path.join(checkpointing.checkpoint_dir(workdir), str(saves)))

  abstract = sharding.abstract(state)
  manager = checkpointing.create_manager(workdir, config)
  restored, restore_s = _timed(
    lambda: checkpointing.restore_latest(manager, abstract, lambda *_: True).state
  )
  manager.close()
  del restored
  if not _CHECKPOINT_DIR.value:
    shutil.rmtree(workdir)

  median = statistics.median
  figures = {
    'checkpoint_step_blip_s': median(with_save) - median(plain),
    'checkpoint_next_step_blip_s': median(during_write) - median(plain),
    'checkpoint_write_s': median(written),
    'checkpoint_bytes': size,
    'restore_s': restore_s,
  }
  print(
    f'checkpoint: {_mib(size)} on disk. Step with a save {median(with_save) * 1e3:.0f} ms, '
    f'the next step (write in flight) {median(during_write) * 1e3:.0f} ms, a plain step '
    f'{median(plain) * 1e3:.0f} ms: blips {figures["checkpoint_step_blip_s"] * 1e3:+.0f} '
    f'and {figures["checkpoint_next_step_blip_s"] * 1e3:+.0f} ms; the write is done '
    f'{median(written):.2f} s after the save starts (medians of {saves})'
  )
  print(f'restore: {restore_s:.2f} s for {_mib(size)}')
  return figures


def run_input(config, corpus: str, directory: str, seconds: float) -> dict[str, float]:
  """Prepares `corpus` into `directory`, then reads batches for `seconds`."""
  if epath.Path(directory).exists():
    raise errors.UserError(
      f'--input_dir={directory} exists; the preparation benchmark needs a fresh directory'
    )
  workers = config.data.prepare_workers or os.cpu_count() or 1
  options = dataclasses.replace(shard_writer.PrepareOptions.from_config(config), corpus=corpus)
  data = shard_writer.prepare(
    options,
    directory,
    num_workers=workers,
    progress=False,
    max_position_embeddings=config.model.max_position_embeddings,
  )
  print(shard_writer.summary(data))
  prep_seconds = data.metadata['seconds_this_run']
  mb = data.metadata['counts']['text_bytes'] / 1e6

  mesh = sharding.make_mesh(config.mesh)
  batch_sharding = sharding.batch_sharding(mesh, config.mesh.logical_axis_rules)
  batches = pipeline.train_iterator(
    data, config, process_index=jax.process_index(), process_count=jax.process_count()
  )
  jax.block_until_ready(sharding.make_global_batch(next(batches), batch_sharding))
  count, start = 0, time.perf_counter()
  while time.perf_counter() - start < seconds:
    jax.block_until_ready(sharding.make_global_batch(next(batches), batch_sharding))
    count += 1
  elapsed = time.perf_counter() - start
  batches.close()
  figures = {
    'prepare_mb_per_s_per_core': mb / prep_seconds / workers,
    'input_examples_per_s': count * config.batch_size / elapsed,
  }
  print(
    f'prepare: {mb:,.1f} MB of text in {prep_seconds:.1f} s with {workers} processes = '
    f'{mb / prep_seconds:.2f} MB/s, {figures["prepare_mb_per_s_per_core"]:.2f} MB/s per core'
  )
  print(
    f'input: {figures["input_examples_per_s"]:,.0f} examples/s '
    f'({count} global batches of {config.batch_size} in {elapsed:.1f} s)'
  )
  return figures


def main(argv: list[str], baseline: Callable[..., list[float]] | None = None) -> None:
  """The command. `baseline(config, batch, steps=, warmup=, special=)`, when given,
  times another implementation of the step in this process on the same batch and
  returns seconds per step; the ratio is printed (benchmarks/hf_baseline.py)."""
  del argv  # cli.run refuses words that are not flags.
  config = _CONFIG.value
  ours = run(config)
  if baseline is not None:
    times = baseline(
      config,
      synthetic_batch(config, np.random.default_rng(0)),
      steps=_STEPS.value,
      warmup=_WARMUP.value,
      special=_SPECIAL,
    )
    baseline_rate = config.batch_size * config.max_seq_length / statistics.median(times)
    print(f'baseline tokens/s: {baseline_rate:,.0f}')
    print(f'ratio: {ours["tokens_per_s"] / baseline_rate:.2f}')
    ours['baseline_tokens_per_s'] = baseline_rate
  if _RESULTS_JSON.value:
    with open(_RESULTS_JSON.value, 'w') as f:
      json.dump(ours, f, indent=2)
  if _INPUT_CORPUS.value:
    directory = _INPUT_DIR.value or os.path.join(tempfile.mkdtemp(), 'prepared')
    data = run_input(config, _INPUT_CORPUS.value, directory, _INPUT_SECONDS.value)
    print(
      f'input / train step: {data["input_examples_per_s"] / ours["examples_per_s"]:,.0f}x '
      'the examples the step consumes'
    )


if __name__ == '__main__':
  cli.run(main)
