"""Device mesh, parameter shardings from logical axes, and global batches."""

from collections.abc import Mapping, Sequence
import math
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec
import ml_collections
import numpy as np

MESH_AXES = ('data', 'fsdp', 'tensor')

LogicalRules = Sequence[tuple[str, Any]]


def make_mesh(mesh_config: ml_collections.ConfigDict,
              devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A (data, fsdp, tensor) mesh with Auto axes; one size may be -1."""
  devices = list(jax.devices() if devices is None else devices)
  sizes = [mesh_config[axis] for axis in MESH_AXES]
  known = math.prod(s for s in sizes if s != -1)
  if -1 in sizes:
    if len(devices) % known:
      raise ValueError(f'config.mesh: {dict(zip(MESH_AXES, sizes))} cannot fill '
                       f'{len(devices)} devices; the fixed axes must divide the device count')
    sizes[sizes.index(-1)] = len(devices) // known
  if math.prod(sizes) != len(devices):
    raise ValueError(f'config.mesh: {dict(zip(MESH_AXES, sizes))} needs {math.prod(sizes)} '
                     f'devices but {len(devices)} are available; set one axis to -1')
  return jax.make_mesh(tuple(sizes), MESH_AXES, axis_types=(AxisType.Auto,) * len(MESH_AXES),
                       devices=devices)


def batch_spec(rules: LogicalRules) -> PartitionSpec:
  return nn.logical_to_mesh_axes(('batch',), rules)


def batch_sharding(mesh: Mesh, rules: LogicalRules) -> NamedSharding:
  return NamedSharding(mesh, batch_spec(rules))


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
  shapes = jax.tree.map(lambda x: x.unbox(apply_constraint=False) if is_box(x) else x,
                        boxed_tree, is_leaf=is_box)
  return jax.tree.map(
      lambda spec, leaf: NamedSharding(mesh, _divisible(spec, leaf.shape, mesh)),
      mesh_specs, shapes, is_leaf=lambda x: isinstance(x, PartitionSpec))


def make_global_batch(local_batch: Mapping[str, np.ndarray],
                      sharding: NamedSharding) -> dict[str, jax.Array]:
  """Assembles each process's rows into one global array sharded on the batch."""
  return {name: jax.make_array_from_process_local_data(sharding, value)
          for name, value in local_batch.items()}
