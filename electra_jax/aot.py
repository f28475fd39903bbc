"""Compiles the real train step for a Cloud TPU slice, on a machine without one.

  python -m electra_jax.aot --config=configs/large.py --topology=v5p-64
  python -m electra_jax.aot --config=configs/base.py --topology=v4-8 --find_max_batch
  python -m electra_jax.aot --config=configs/base.py --topology=local --find_max_batch

`libtpu` (pip install libtpu; `pip install -e '.[tpu]'`) compiles for the
slice's devices as `jax.experimental.topologies` describes them; nothing
runs. Prints the per-chip memory XLA plans against the chip's HBM, the FLOPs
of one step from XLA's cost analysis, and how the largest tensors are
sharded; exits with status 1, saying so, when the step does not fit.
--find_max_batch searches for the largest global batch that fits.

Topology names are Cloud TPU's: vN-K is K TensorCores on v4 and v5p (two per
chip) and K chips on v5e and v6e. `local` compiles for this machine's own
devices (a GPU, say) against the memory each reports, or --device_memory_gib
where they report none (CPU).
"""

import dataclasses
import math
import os
import re
import time
from typing import Any, Callable

from absl import flags, logging
import jax
from jax.experimental import topologies
import ml_collections

from electra_jax import cli, config_lib, errors, flops, sharding, train
from electra_jax.data import tokenizers

_CONFIG = cli.define_config(None, 'A config in configs/.')
_TOPOLOGY = flags.DEFINE_string(
  'topology',
  None,
  'A Cloud TPU slice, e.g. v4-8, v5e-16, v5p-64, v6e-8; or local: the devices of this machine.',
)
_DEVICE_MEMORY_GIB = flags.DEFINE_float(
  'device_memory_gib',
  None,
  'With --topology=local: '
  'the memory per device to fit in; by default what '
  'each device reports (GPU, TPU; a CPU reports none).',
)
_FIND_MAX_BATCH = flags.DEFINE_boolean(
  'find_max_batch',
  False,
  'Search for the largest global batch (a multiple of the batch-sharding devices) that fits.',
)
flags.mark_flags_as_required(['config', 'topology'])

_GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Generation:
  cores_per_chip: int  # TensorCores per chip as the slice name counts them.
  hbm_bytes: int  # Per chip.
  chip_config: str  # libtpu's name for how the chip's cores are used.
  accelerator_prefix: str  # TPU_ACCELERATOR_TYPE's spelling.
  three_d: bool  # 3D torus (v4, v5p) or 2D (v5e, v6e).


# HBM per chip from Cloud TPU's system architecture pages.
GENERATIONS = {
  'v4': Generation(2, 32 * _GIB, 'megacore', 'v4', True),
  'v5p': Generation(2, 95 * _GIB, 'megacore', 'v5p', True),
  'v5e': Generation(1, 16 * _GIB, 'default', 'v5litepod', False),
  'v6e': Generation(1, 32 * _GIB, 'default', 'v6e', False),
}


class TopologyError(errors.UserError):
  """A slice name that is not one of Cloud TPU's."""


@dataclasses.dataclass(frozen=True)
class Slice:
  name: str
  generation: Generation
  chips: int

  @property
  def topology(self) -> str:
    """libtpu's topology name, e.g. v4:2x2x4 or v5e:4x8."""
    gen = self.name.split('-')[0]
    if self.generation.three_d:
      return f'{gen}:{_TORUS_3D[self.chips]}'
    side = 2 ** (int(math.log2(self.chips)) // 2)
    return f'{gen}:{side}x{self.chips // side}'


# v4 and v5p slices by chip count, as Cloud TPU shapes them.
_TORUS_3D = {
  4: '2x2x1',
  8: '2x2x2',
  16: '2x2x4',
  32: '2x4x4',
  64: '4x4x4',
  128: '4x4x8',
  256: '4x8x8',
  512: '8x8x8',
  1024: '8x8x16',
  2048: '8x16x16',
  4096: '16x16x16',
}


def parse_slice(name: str) -> Slice:
  gen, _, count = name.partition('-')
  if gen not in GENERATIONS or not count.isdigit():
    raise TopologyError(
      f'--topology={name}: not a Cloud TPU slice name; use e.g. v4-8, '
      f'v5e-16, v5p-64 or v6e-8 (generations: {", ".join(GENERATIONS)})'
    )
  generation = GENERATIONS[gen]
  chips = int(count) // generation.cores_per_chip
  smallest = 4 if generation.three_d else 1
  if chips < smallest or chips & (chips - 1) or (generation.three_d and chips not in _TORUS_3D):
    raise TopologyError(
      f'--topology={name}: {gen} slices have a power-of-two number of chips, '
      f'at least {smallest} (--topology={gen}-'
      f'{smallest * generation.cores_per_chip})'
    )
  return Slice(name, generation, chips)


def slice_devices(tpu: Slice) -> list[Any]:
  """Compile-only devices of the slice, from libtpu's topology description."""
  os.environ.setdefault(
    'TPU_ACCELERATOR_TYPE',
    f'{tpu.generation.accelerator_prefix}-{tpu.chips * tpu.generation.cores_per_chip}',
  )
  os.environ.setdefault('TPU_WORKER_HOSTNAMES', 'localhost')
  os.environ.setdefault('TPU_SKIP_MDS_QUERY', '1')
  # libtpu takes a machine-wide lock meant to keep two processes off one chip; compiling
  # touches no chip, and the lock would make a second compile (or any JAX process that
  # loaded libtpu) fail with "Internal error when accessing libtpu multi-process lockfile".
  os.environ.setdefault('ALLOW_MULTIPLE_LIBTPU_LOAD', '1')
  if 'JAX_PLATFORMS' not in os.environ:
    # Compiling touches no device of this machine, whose own must not come up as
    # the TPU backend (this holds when called before any JAX computation).
    jax.config.update('jax_platforms', 'cpu')
  try:
    description = topologies.get_topology_desc(
      topology_name=tpu.topology,
      platform='tpu',
      chip_config_name=tpu.generation.chip_config,
      chips_per_host_bounds=(1, 1, 1) if tpu.chips == 1 else (2, 2, 1),
      num_slices=1,
    )
  except (RuntimeError, ImportError) as e:  # No libtpu, or a libtpu that lacks the chip.
    raise TopologyError(
      f'cannot describe {tpu.name} ({e}); install libtpu: pip install -e ".[tpu]"'
    ) from None
  return list(description.devices)


@dataclasses.dataclass(frozen=True)
class Target:
  """What the step is compiled for: the devices, and the memory each one has."""

  name: str  # As --topology gave it.
  layout: str  # e.g. "v5e:2x4, 8 chips" or "1 x NVIDIA H100 80GB HBM3".
  devices: list[Any]
  bytes_per_device: int

  @property
  def unit(self) -> str:
    return 'device' if self.name == 'local' else 'chip'

  @property
  def memory_kind(self) -> str:
    return 'memory' if self.name == 'local' else 'HBM'


def tpu_target(name: str) -> Target:
  tpu = parse_slice(name)
  chips = f'{tpu.chips} chip' + ('s' if tpu.chips > 1 else '')
  return Target(name, f'{tpu.topology}, {chips}', slice_devices(tpu), tpu.generation.hbm_bytes)


def local_target(memory_gib: float | None) -> Target:
  """This machine's devices, against the memory limit each one reports (on a GPU, the
  allocator's share: XLA_PYTHON_CLIENT_MEM_FRACTION) or `memory_gib`."""
  devices = jax.devices()
  if memory_gib is not None:
    if memory_gib <= 0:
      raise TopologyError(f'--device_memory_gib={memory_gib}: must be positive')
    limit = int(memory_gib * _GIB)
  else:
    limits = [(d.memory_stats() or {}).get('bytes_limit') for d in devices]
    if None in limits:
      raise TopologyError(
        f'--topology=local: the {devices[0].platform} devices report no '
        'memory limit; give one with --device_memory_gib=N'
      )
    limit = min(limits)
  return Target('local', f'{len(devices)} x {devices[0].device_kind}', devices, limit)


class DoesNotFit(Exception):
  """XLA refused to compile the step: its memory exceeds the device's (a TPU chip's HBM)."""

  @property
  def excess_bytes(self) -> int | None:
    """How far over the HBM XLA:TPU says the step is, if it says: "Used 20.95G of
    15.75G hbm", or "the total memory required for HLO temporaries (350.71G)
    exceeds available HBM (15.75G)" (the HBM left after the arguments)."""
    match = re.search(
      r'Used ([0-9.]+)([KMGT]) of ([0-9.]+)([KMGT]) hbm|required for HLO '
      r'temporaries \(([0-9.]+)([KMGT])\) exceeds available HBM '
      r'\(([0-9.]+)([KMGT])\)',
      str(self),
    )
    if not match:
      return None
    groups = match.groups()[:4] if match[1] else match.groups()[4:]
    to_bytes = lambda number, unit: float(number) * 1024 ** ('KMGT'.index(unit) + 1)
    return int(to_bytes(*groups[:2]) - to_bytes(*groups[2:]))


@dataclasses.dataclass
class Compiled:
  batch_size: int
  seconds: float
  memory: Any  # CompiledMemoryStats, per device.
  flops: float  # XLA's count for one device's program.
  abstract_state: Any

  @property
  def bytes_per_device(self) -> int:
    m = self.memory
    return (
      m.argument_size_in_bytes
      + m.output_size_in_bytes
      - m.alias_size_in_bytes
      + m.temp_size_in_bytes
      + m.generated_code_size_in_bytes
    )


def compile_step(config: ml_collections.ConfigDict, devices: list[Any]) -> Compiled:
  """The fully sharded train step of `config`, compiled for `devices`."""
  config_lib.validate(config, check_data=False)
  mesh = sharding.make_mesh(config.mesh, devices)
  with jax.set_mesh(mesh):
    start = time.perf_counter()
    lowered, abstract = train.lower_abstract_train_step(
      config, mesh, tokenizers.TRAINED_SPECIAL_IDS
    )
    try:
      compiled = lowered.compile()
    except jax.errors.JaxRuntimeError as e:
      if 'RESOURCE_EXHAUSTED' not in str(e):
        raise
      raise DoesNotFit(str(e).splitlines()[0].rstrip('.')) from None
    seconds = time.perf_counter() - start
  analysis = compiled.cost_analysis()
  analysis = analysis[0] if isinstance(analysis, list) else analysis
  return Compiled(
    config.batch_size, seconds, compiled.memory_analysis(), analysis['flops'], abstract
  )


def _with_batch(config: ml_collections.ConfigDict, batch_size: int) -> ml_collections.ConfigDict:
  config = config.copy_and_resolve_references()
  config.batch_size = batch_size
  return config


def largest_fitting(measure: Callable[[int], int | None], limit: int, first_guess: int = 8) -> int:
  """The largest n >= 1 whose memory measure(n) is at most limit; 0 if n = 1 is over.

  measure(n) is the memory of the step at n units of batch (over the limit for a
  compile that did not fit), or None for a failed compile that gave no figure.
  Memory grows with n, close to linearly, so a line through the known points
  nearest the limit predicts where it crosses: extrapolated until a point over
  the limit is known, then interpolated between the bracketing points
  (regula falsi, Illinois variant, so a curved memory cannot stall the bracket
  on one side). A failure without a figure is followed by bisection. Linear
  memory costs four compiles (1, first_guess, the prediction, one more); doubling
  and bisecting cost about 2 log2(n).
  """
  points: dict[int, int] = {}  # n -> memory, where known.
  low, high = 0, None  # The largest n known to fit; the smallest known not to.
  scale = {'low': 1.0, 'high': 1.0}  # Illinois: the weight of a bracket end kept twice.
  last = None

  def probe(n: int) -> None:
    nonlocal low, high, last
    memory = measure(n)
    side = 'low' if memory is not None and memory <= limit else 'high'
    if memory is not None:
      points[n] = memory
    if side == 'low':
      low = n
    else:
      high = n
    scale[side] = 1.0
    if side == last:  # The other end was kept twice: pull the next estimate toward it.
      scale['high' if side == 'low' else 'low'] /= 2
    last = side

  probe(1)
  if low == 0:
    return 0
  while high is None or high - low > 1:
    fitting = sorted(n for n in points if n <= low)
    if high is None and len(fitting) < 2:
      n = first_guess
    elif high is None:  # Extrapolate through the smallest and largest fitting points.
      a, b = fitting[0], fitting[-1]
      per_unit = (points[b] - points[a]) / (b - a)
      n = b + int((limit - points[b]) // per_unit) if per_unit > 0 else 2 * b
    elif high not in points:
      n = (low + high) // 2
    else:  # Where the line between the bracket ends crosses the limit.
      under = (limit - points[low]) * scale['low']
      over = (points[high] - limit) * scale['high']
      n = low + int((high - low) * under / (under + over))
    probe(max(low + 1, n if high is None else min(n, high - 1)))
  return low


def find_max_batch(
  config: ml_collections.ConfigDict, devices: list[Any], bytes_per_device: int
) -> Compiled | None:
  """The largest fitting global batch, a multiple of the batch-sharding devices
  (`largest_fitting` over that multiple). None if even the smallest does not fit."""
  ways = sharding.batch_ways(
    sharding.make_mesh(config.mesh, devices), config.mesh.logical_axis_rules
  )
  largest: list[Compiled] = []  # The largest fit so far: every probe lies above the last fit.

  def measure(units: int) -> int | None:
    try:
      compiled = compile_step(_with_batch(config, units * ways), devices)
    except DoesNotFit as e:
      logging.info('batch %d: does not fit (%s)', units * ways, e)
      # On the scale of bytes_per_device: the limit plus what XLA says is missing. (The
      # temporaries' figure alone can be under the limit, and taken as the step's
      # memory it made the search creep toward the limit one batch step at a time.)
      return None if e.excess_bytes is None else bytes_per_device + max(e.excess_bytes, 1)
    logging.info(
      'batch %d: %.2f GiB per device (compiled in %.0f s)',
      units * ways,
      compiled.bytes_per_device / _GIB,
      compiled.seconds,
    )
    if compiled.bytes_per_device <= bytes_per_device:
      largest[:] = [compiled]
    return compiled.bytes_per_device

  return largest[0] if largest_fitting(measure, bytes_per_device) else None


def _largest_tensors(abstract_state: Any, unit: str, count: int = 6) -> list[str]:
  leaves = jax.tree_util.tree_leaves_with_path(abstract_state.params)
  leaves.sort(key=lambda item: -math.prod(item[1].shape))
  lines = []
  for path, leaf in leaves[:count]:
    shard = leaf.sharding.shard_shape(leaf.shape)
    lines.append(
      f'  {jax.tree_util.keystr(path):<58} {str(leaf.shape):<22} '
      f'{str(leaf.sharding.spec):<34} per {unit} {shard}'
    )
  return lines


def _gib(n: float) -> str:
  return f'{n / _GIB:.0f}' if n >= 10 * _GIB else f'{n / _GIB:.3g}'


def report(config: ml_collections.ConfigDict, target: Target, compiled: Compiled) -> str:
  m, limit = compiled.memory, target.bytes_per_device
  total = compiled.bytes_per_device
  analytic = flops.train_step_flops(_with_batch(config, compiled.batch_size))
  everywhere = (
    'the slice'
    if target.unit == 'chip'
    else 'the device'
    if len(target.devices) == 1
    else f'all {len(target.devices)} devices'
  )
  lines = [
    f'{target.name} ({target.layout}, {_gib(limit)} GiB {target.memory_kind} each); '
    f'batch {compiled.batch_size} x {config.max_seq_length}; compiled in '
    f'{compiled.seconds:.1f} s',
    f'memory per {target.unit}: {total / _GIB:.2f} GiB of {_gib(limit)} GiB '
    f'({total / limit:.0%}): arguments {m.argument_size_in_bytes / _GIB:.2f}, outputs '
    f'{m.output_size_in_bytes / _GIB:.2f} (aliased {m.alias_size_in_bytes / _GIB:.2f}), '
    f'temporaries {m.temp_size_in_bytes / _GIB:.2f}, code '
    f'{m.generated_code_size_in_bytes / _GIB:.3f}',
    f'FLOPs per step: XLA {compiled.flops:.3e} per {target.unit} '
    f'({compiled.flops * len(target.devices):.3e} for {everywhere}); model FLOPs '
    f'{analytic:.3e}'
    + (
      ' (XLA counts the body of the scan over layers once; '
      '--config.model.scan_layers=false counts every layer)'
      if config.model.scan_layers
      else ''
    ),
    'largest tensors (shape, sharding, shard):',
    *_largest_tensors(compiled.abstract_state, target.unit),
  ]
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  config = _CONFIG.value
  fixes = (
    'lower config.batch_size, shard parameters (config.mesh.fsdp=-1) or set '
    'config.model.remat_policy=full'
  )
  try:
    if _TOPOLOGY.value == 'local':
      target = local_target(_DEVICE_MEMORY_GIB.value)
    elif _DEVICE_MEMORY_GIB.value is not None:
      raise TopologyError(
        "--device_memory_gib goes with --topology=local; a TPU slice is held to its chips' HBM"
      )
    else:
      target = tpu_target(_TOPOLOGY.value)
    if _FIND_MAX_BATCH.value:
      compiled = find_max_batch(config, target.devices, target.bytes_per_device)
      if compiled is None:
        raise errors.UserError(
          f'{config.max_seq_length}-token examples do not fit on {target.name} at any batch '
          'size with this mesh; shard more (config.mesh.fsdp=-1) or remat '
          '(config.model.remat_policy=full)'
        )
      print(report(config, target, compiled))
      print(f'largest batch that fits: {compiled.batch_size}')
      return
    compiled = compile_step(config, target.devices)
  except DoesNotFit as e:
    raise errors.UserError(f'does not fit on {target.name}: {e}; {fixes}') from e
  print(report(config, target, compiled))
  if compiled.bytes_per_device > target.bytes_per_device:
    raise errors.UserError(
      f'does not fit: {compiled.bytes_per_device / _GIB:.2f} GiB per '
      f'{target.unit} needed, {_gib(target.bytes_per_device)} GiB '
      f'available on {target.name}; {fixes}'
    )
  print('fits')


if __name__ == '__main__':
  cli.run(main)
