"""What XLA's memory plan holds at its peak, from a compile dumped with --xla_dump_to.

  XLA_FLAGS=--xla_dump_to=/tmp/dump python -m electra_jax.aot --config=configs/small.py \
      --topology=v5e-4 --config.batch_size=512
  python benchmarks/memory_at_peak.py /tmp/dump [--top=15]

Reads the train step's buffer assignment (each value's size and place in the
heap) and its live ranges (when each value is alive in the instruction
order), finds the point where the most heap is alive, and prints the live
bytes there grouped by shape. memory_analysis() gives only the total; this
says which activations make it up, e.g. a scan's saved residuals, stacked
[layers, batch, ...].
"""

import argparse
import collections
import glob
import os
import re

_ALLOCATION = re.compile(r'allocation (\d+): size \d+')
_VALUE = re.compile(r'\s*value: <\d+ (\S+) @0> \(size=(\d+),offset=(\d+)\): (\S+)')
_RANGE = re.compile(r'\s+(\S+):(\d+)-(\d+)$')


def _dump_file(directory: str, suffix: str) -> str:
  paths = sorted(glob.glob(os.path.join(directory, f'*jit_train_step*{suffix}')))
  if not paths:
    raise SystemExit(
      f'error: no *jit_train_step*{suffix} in {directory}; compile with '
      f'XLA_FLAGS=--xla_dump_to={directory}'
    )
  return paths[-1]


def read_values(path: str) -> dict[str, tuple[int, int, int, str]]:
  """{value name: (bytes, allocation index, offset, shape)} from a buffer assignment."""
  values, allocation = {}, -1
  with open(path) as f:
    for line in f:
      if m := _ALLOCATION.match(line):
        allocation = int(m.group(1))
      elif m := _VALUE.match(line):
        name, size, offset, shape = m.groups()
        values[name] = (int(size), allocation, int(offset), shape.split('{')[0])
  return values


def read_ranges(path: str, values) -> dict[str, tuple[int, int]]:
  """{value name: (first, last) instruction index}; array values drop their '{}' index."""
  ranges = {}
  with open(path) as f:
    for line in f:
      if m := _RANGE.match(line):
        name = m.group(1)
        if name not in values and name.endswith('{}'):
          name = name[:-2]
        if name in values:
          ranges[name] = (int(m.group(2)), int(m.group(3)))
  return ranges


def live_at(t: int, values, ranges) -> dict[tuple[int, int], tuple[int, str]]:
  """Heap chunks alive at instruction t: values sharing an (allocation, offset) count once."""
  chunks = {}
  for name, (first, last) in ranges.items():
    if first <= t <= last:
      size, allocation, offset, shape = values[name]
      if size > chunks.get((allocation, offset), (0, ''))[0]:
        chunks[(allocation, offset)] = (size, shape)
  return chunks


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
  parser.add_argument('dump_dir')
  parser.add_argument('--top', type=int, default=15, help='Shapes to list.')
  args = parser.parse_args()
  values = read_values(_dump_file(args.dump_dir, 'after_optimizations-buffer-assignment.txt'))
  ranges = read_ranges(_dump_file(args.dump_dir, 'after_optimizations-live-range.txt'), values)
  end = max(last for _, last in ranges.values())
  peak, peak_t = max(
    (sum(s for s, _ in live_at(t, values, ranges).values()), t) for t in range(0, end + 1, 5)
  )
  by_shape = collections.Counter()
  for size, shape in live_at(peak_t, values, ranges).values():
    by_shape[shape] += size
  print(f'{peak / 2**30:.2f} GiB alive at instruction {peak_t} of {end} (sampled every 5)')
  for shape, size in by_shape.most_common(args.top):
    print(f'  {size / 2**20:9.1f} MiB  {shape}')


if __name__ == '__main__':
  main()
