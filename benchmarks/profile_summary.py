"""Where the train step's time goes, from a trace taken by the benchmark.

  python -m electra_jax.benchmark --config=configs/small.py --config.batch_size=16 \
      --steps=5 --profile_dir=/tmp/profile
  python benchmarks/profile_summary.py /tmp/profile

Reads the newest `*.trace.json.gz` under the directory and the step's HLO
(`train_step.hlo.txt`, written by the benchmark). Each kernel of the trace is
an HLO instruction; the op_name metadata of the instructions it fuses says
which code made it. Prints milliseconds per step by category and the costliest
kernels.

On CPU, XLA's thunk executor runs independent kernels side by side on its
thread pool, and a kernel may split its work across threads; the trace has one
event per thread, so the categories add up to the step's busy thread-time:
about the step time times the threads kept busy, which the summary prints.

On a GPU the kernels are the events of the device's streams (the host's
events only launch them). XLA names a fusion's kernel after its instruction
with '_' for '.', and cuBLAS and cuDNN kernels by their libraries' names. The
summary prints the kernels per step and how much of the traced span the GPU
was busy: a step of many tiny kernels with the GPU mostly busy is bound by
per-kernel cost, one with the GPU often idle is waiting on the host.
"""

import collections
import glob
import gzip
import json
import os
import re
import sys

# Host-side events that wrap kernels rather than being kernels.
_WRAPPERS = ('ThunkExecutor::', 'SlinkyThreadPool::', '$')

_INSTRUCTION = re.compile(r'^\s*(?:ROOT )?%([\w.\-]+) = (\([^)]*\)|\S+) ([\w\-]+)\(.*$', re.M)
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r'calls=%([\w.\-]+)')
_COMPUTATION = re.compile(r'^%([\w.\-]+) .*\{$', re.M)


def _op_names(hlo: str) -> dict[str, tuple[str, str, set[str]]]:
  """instruction -> (shape, opcode, the op_names of it and of what it fuses)."""
  bodies: dict[str, set[str]] = {}
  for match in _COMPUTATION.finditer(hlo):
    body = hlo[match.end() : hlo.find('\n}', match.end())]
    bodies[match[1]] = set(_OP_NAME.findall(body))
  instructions = {}
  for match in _INSTRUCTION.finditer(hlo):
    line = match[0]
    names = set(_OP_NAME.findall(line))
    for called in _CALLS.findall(line):
      names |= bodies.get(called, set())
    instructions[match[1]] = (match[2], match[3], names)
  return instructions


def instruction(instructions: dict, kernel: str) -> tuple[str, str, set[str]]:
  """A kernel's (shape, opcode, op_names): its own name on CPU; a GPU kernel's name has
  '_' where its fusion's has the last '.'."""
  found = instructions.get(kernel) or instructions.get(re.sub(r'_(\d+)$', r'.\1', kernel))
  return found or ('?', '?', set())


def category(kernel: str, opcode: str, names: set[str]) -> str:
  text = ' '.join(names)
  if 'sdpa' in kernel or 'cudnn' in kernel:
    return 'attention (cuDNN kernels)'
  if (
    kernel.startswith(('ynn_fusion', 'xnn_fusion', 'dot', 'nvjet'))
    or re.search('gemm|xmma|cutlass', kernel)
    or opcode == 'dot'
  ):
    return 'matmuls'
  if 'gumbel' in text:  # objectives.sample_tokens' named scope
    return 'generator sampling (Gumbel-max noise and argmax)'
  if 'Dropout' in text or 'dropout' in text:
    return 'dropout (random bits and masks)'
  if (
    'dynamic_update_slice' in text
    or 'dynamic_slice' in text
    or (not names and opcode in ('fusion', 'copy'))
  ):
    return 'scan over layers (stacked buffers: zero fill, copies, slices)'
  return 'other (elementwise, softmax, LayerNorm, loss, optimizer)'


def _cpu_kernels(events: list[dict]) -> tuple[list[dict], int, str]:
  """The kernels, the steps traced, and how busy the thread pool was."""
  steps = max(1, sum(e['name'] == 'ThunkExecutor::Execute (wait for completion)' for e in events))
  kernels = [e for e in events if not e['name'].startswith(_WRAPPERS)]
  per_thread: collections.Counter[tuple[int, int]] = collections.Counter()
  for event in kernels:
    per_thread[event['pid'], event['tid']] += event['dur'] / 1e3 / steps
  total = sum(per_thread.values())
  busy = [ms for ms in per_thread.values() if ms > 0.05 * total]
  return (
    kernels,
    steps,
    f'on {len(busy)} threads busy {", ".join(f"{ms:,.0f}" for ms in busy)} ms each',
  )


def _gpu_kernels(events: list[dict], devices: set[int]) -> tuple[list[dict], int, str]:
  """The kernels on the devices' streams, the steps traced, and how busy the GPU was."""
  steps = max(1, sum(e['name'].endswith('GpuExecutable::ExecuteThunks') for e in events))
  kernels = [e for e in events if e['pid'] in devices]
  if not kernels:
    return kernels, steps, 'no kernels on the GPU'
  span = max(e['ts'] + e['dur'] for e in kernels) - min(e['ts'] for e in kernels)
  busy = sum(e['dur'] for e in kernels)
  durations = sorted(e['dur'] for e in kernels)
  return (
    kernels,
    steps,
    f'{len(kernels) / steps:,.0f} kernels per step (median {durations[len(durations) // 2]:.1f} '
    f'us), the GPU busy {busy / span:.0%} of the traced span',
  )


def main(directory: str) -> None:
  traces = sorted(
    glob.glob(os.path.join(directory, '**', '*.trace.json.gz'), recursive=True),
    key=os.path.getmtime,
  )
  if not traces:
    sys.exit(
      f'error: no *.trace.json.gz under {directory}; run electra_jax.benchmark with '
      f'--profile_dir={directory}'
    )
  hlo_path = os.path.join(directory, 'train_step.hlo.txt')
  if not os.path.exists(hlo_path):
    sys.exit(f'error: {hlo_path} is missing; the benchmark writes it with the trace')
  with open(hlo_path) as f:
    instructions = _op_names(f.read())
  with gzip.open(traces[-1]) as f:
    trace = json.load(f)['traceEvents']
  devices = {
    e['pid']
    for e in trace
    if e.get('ph') == 'M'
    and e.get('name') == 'process_name'
    and e['args']['name'].startswith('/device:GPU')
  }
  events = [e for e in trace if e.get('ph') == 'X']
  kernels, steps, busy = _gpu_kernels(events, devices) if devices else _cpu_kernels(events)

  per_kernel: collections.Counter[str] = collections.Counter()
  for event in kernels:
    per_kernel[event['name']] += event['dur'] / 1e3 / steps
  per_category: collections.Counter[str] = collections.Counter()
  for kernel, ms in per_kernel.items():
    per_category[category(kernel, *instruction(instructions, kernel)[1:])] += ms

  total = sum(per_category.values())
  print(f'{steps} steps traced; {total:,.1f} ms of kernels per step, {busy}')
  for name, ms in per_category.most_common():
    print(f'{ms:9,.2f} ms {ms / total:6.1%}  {name}')
  print('costliest kernels (ms per step, shape, category):')
  for kernel, ms in per_kernel.most_common(12):
    shape, opcode, names = instruction(instructions, kernel)
    print(f'{ms:9,.2f} ms  {kernel[:42]:<42} {shape[:34]:<34} {category(kernel, opcode, names)}')


if __name__ == '__main__':
  if len(sys.argv) != 2:
    sys.exit('usage: python benchmarks/profile_summary.py PROFILE_DIR')
  main(sys.argv[1])
