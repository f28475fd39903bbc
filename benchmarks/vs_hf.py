"""Our train step against the same step in HF `transformers`, in one process.

  python -m benchmarks.vs_hf --config=configs/small.py --config.batch_size=16

Runs `python -m electra_jax.benchmark` (it takes the same flags), then times
benchmarks/hf_baseline.py's PyTorch step on the same batch, and prints
`baseline tokens/s:` and `ratio:` (ours over the baseline's tokens/s). Run it
from the repository root, with `.[test]` installed.
"""

import functools

from benchmarks import hf_baseline
from electra_jax import benchmark, cli

if __name__ == '__main__':
  cli.run(functools.partial(benchmark.main, baseline=hf_baseline.run))
