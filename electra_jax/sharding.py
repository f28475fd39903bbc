"""Device mesh, parameter shardings from logical axes, and global batches."""

from collections.abc import Callable, Mapping, Sequence
import math
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
import ml_collections
import numpy as np

from electra_jax import config_lib

MESH_AXES = ('data', 'fsdp', 'tensor')

LogicalRules = Sequence[tuple[str, Any]]


def make_mesh(
  mesh_config: ml_collections.ConfigDict, devices: Sequence[jax.Device] | None = None
) -> Mesh:
  """A (data, fsdp, tensor) mesh with Auto axes; one per-slice size may be -1.

  With dcn_* sizes above 1, the devices are grouped into slices (TPU
  slice_index, else one group per process) and each axis is the DCN size
  times the per-slice size, slices outermost, so that only the axes that
  span slices cross the data-centre network.
  """
  devices = list(jax.devices() if devices is None else devices)
  dcn = [mesh_config[f'dcn_{axis}'] for axis in MESH_AXES]
  if len(devices) % math.prod(dcn):
    raise config_lib.ConfigError(
      f'config.mesh: dcn sizes {dict(zip(MESH_AXES, dcn))} do not divide {len(devices)} devices'
    )
  per_slice = len(devices) // math.prod(dcn)
  sizes = [mesh_config[axis] for axis in MESH_AXES]
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if per_slice % known:
      raise config_lib.ConfigError(
        f'config.mesh: {dict(zip(MESH_AXES, sizes))} cannot fill '
        f'{per_slice} devices per slice; the fixed axes must divide '
        'that count'
      )
    sizes[sizes.index(-1)] = per_slice // known
  if math.prod(sizes) != per_slice:
    raise config_lib.ConfigError(
      f'config.mesh: {dict(zip(MESH_AXES, sizes))} needs '
      f'{math.prod(sizes)} devices per slice but {per_slice} are '
      'available; set one axis to -1'
    )
  axis_types = (AxisType.Auto,) * len(MESH_AXES)
  if math.prod(dcn) == 1:
    return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=axis_types, devices=devices)
  # Multi-slice TPUs number their slices; elsewhere (GPU nodes, CPU processes)
  # every device reports one slice, and each process is a granule.
  by_process = len({getattr(d, 'slice_index', 0) for d in devices}) == 1
  grid = mesh_utils.create_hybrid_device_mesh(sizes, dcn, devices, process_is_granule=by_process)
  return Mesh(grid, MESH_AXES, axis_types=axis_types)


def batch_spec(rules: LogicalRules) -> PartitionSpec:
  return nn.logical_to_mesh_axes(('batch',), rules)


def batch_sharding(mesh: Mesh, rules: LogicalRules) -> NamedSharding:
  return NamedSharding(mesh, batch_spec(rules))


def batch_ways(mesh: Mesh, rules: LogicalRules) -> int:
  """How many shards the batch dimension is cut into: a global batch must be a multiple."""
  axes = batch_spec(rules)[0]
  names = (axes,) if isinstance(axes, str) else (axes or ())
  return math.prod(mesh.shape[name] for name in names)


def _divisible(spec: PartitionSpec, shape: Sequence[int], mesh: Mesh) -> PartitionSpec:
  """Replicates any dimension that its mesh axes do not divide evenly."""
  dims = []
  for size, axes in zip(shape, tuple(spec) + (None,) * (len(shape) - len(spec))):
    names = (axes,) if isinstance(axes, str) else (axes or ())
    ways = math.prod(mesh.shape[name] for name in names)
    dims.append(axes if size % ways == 0 else None)
  return PartitionSpec(*dims)


def logical_to_shardings(boxed_tree: Any, mesh: Mesh, rules: LogicalRules) -> Any:
  """NamedShardings for an abstract tree whose leaves may carry logical axes.

  `boxed_tree` comes from jax.eval_shape of an init function; its
  nn.LogicallyPartitioned leaves give the axis names, other leaves are
  replicated. The result matches the unboxed tree.
  """
  logical = nn.get_partition_spec(boxed_tree)
  mesh_specs = nn.logical_to_mesh(logical, rules)
  is_box = lambda x: isinstance(x, nn.meta.AxisMetadata)
  shapes = jax.tree.map(
    lambda x: x.unbox(apply_constraint=False) if is_box(x) else x, boxed_tree, is_leaf=is_box
  )
  return jax.tree.map(
    lambda spec, leaf: NamedSharding(mesh, _divisible(spec, leaf.shape, mesh)),
    mesh_specs,
    shapes,
    is_leaf=lambda x: isinstance(x, PartitionSpec),
  )


def init_into(init: Callable[[jax.Array], Any], rng: jax.Array, shardings: Any) -> Any:
  """`init(rng)`, unboxed, materialised directly into `shardings` (each shard on
  its own device).

  An initialiser runs once, so on the CPU it is compiled without LLVM's
  optimisations: the tiny config's state then compiles in 6 s instead of 18,
  and its values move by a few ulps (7e-9 at most there). A run's later state
  comes from its checkpoints, never from a second init.
  """
  options = {'xla_backend_optimization_level': 0} if jax.default_backend() == 'cpu' else None
  return jax.jit(
    lambda r: nn.meta.unbox(init(r)), out_shardings=shardings, compiler_options=options
  )(rng)


def make_global_batch(
  local_batch: Mapping[str, np.ndarray], sharding: NamedSharding
) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global array sharded on the batch."""
  return {
    name: jax.make_array_from_process_local_data(sharding, value)
    for name, value in local_batch.items()
  }


def abstract(tree: Any) -> Any:
  """The shapes, dtypes and shardings of a tree of arrays, e.g. to restore into."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding), tree)
