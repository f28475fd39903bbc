"""Where the train step's time goes, from a trace taken by the benchmark.

  python -m electra_jax.benchmark --config=configs/small.py --config.batch_size=16 \
      --steps=5 --profile_dir=/tmp/profile
  python benchmarks/profile_summary.py /tmp/profile

Reads the newest `*.trace.json.gz` under the directory and the step's HLO
(`train_step.hlo.txt`, written by the benchmark). Each kernel of the trace is
an HLO instruction; the op_name metadata of the instructions it fuses says
which code made it. Prints milliseconds per step by category and the costliest
kernels. On CPU, XLA's thunk executor runs independent kernels side by side
on its thread pool, and a kernel may split its work across threads; the trace
has one event per thread, so the categories add up to the step's busy
thread-time: about the step time times the threads kept busy, which the
summary prints.
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


def category(kernel: str, opcode: str, names: set[str]) -> str:
  text = ' '.join(names)
  if kernel.startswith(('ynn_fusion', 'xnn_fusion', 'dot')) or opcode == 'dot':
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
    events = [e for e in json.load(f)['traceEvents'] if e.get('ph') == 'X']
  steps = max(1, sum(e['name'] == 'ThunkExecutor::Execute (wait for completion)' for e in events))

  per_kernel: collections.Counter[str] = collections.Counter()
  per_thread: collections.Counter[tuple[int, int]] = collections.Counter()
  for event in events:
    if not event['name'].startswith(_WRAPPERS):
      per_kernel[event['name']] += event['dur'] / 1e3 / steps
      per_thread[event['pid'], event['tid']] += event['dur'] / 1e3 / steps
  per_category: collections.Counter[str] = collections.Counter()
  for kernel, ms in per_kernel.items():
    shape, opcode, names = instructions.get(kernel, ('?', '?', set()))
    per_category[category(kernel, opcode, names)] += ms

  total = sum(per_category.values())
  busy = [ms for ms in per_thread.values() if ms > 0.05 * total]
  print(
    f'{steps} steps traced; {total:,.0f} ms of kernels per step, on {len(busy)} threads '
    f'busy {", ".join(f"{ms:,.0f}" for ms in busy)} ms each'
  )
  for name, ms in per_category.most_common():
    print(f'{ms:9,.1f} ms {ms / total:6.1%}  {name}')
  print('costliest kernels (ms per step, shape, category):')
  for kernel, ms in per_kernel.most_common(12):
    shape, opcode, names = instructions.get(kernel, ('?', '?', set()))
    print(f'{ms:9,.1f} ms  {kernel:<42} {shape[:34]:<34} {category(kernel, opcode, names)}')


if __name__ == '__main__':
  if len(sys.argv) != 2:
    sys.exit('usage: python benchmarks/profile_summary.py PROFILE_DIR')
  main(sys.argv[1])
