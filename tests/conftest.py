"""Shared fixtures: the real data directory and small configs."""

import atexit
from collections.abc import Callable
import importlib
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import jax
import numpy as np
import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]

# The tests run on the CPU. Without this, libtpu (the test extra installs it for the
# AOT compiles, which run in subprocesses) tries to start a TPU in every test process
# and prints a page of warnings at the end of the run.
jax.config.update('jax_platforms', 'cpu')


# The tests in this process are bound by compiling on a CPU, and LLVM's
# optimisations take a fifth to a half of each compile for steps that then run
# in milliseconds. The CLI subprocesses keep them: their training runs are
# bound by running the steps (the pretraining test takes 1.7x as long without,
# the SST-2 fine-tuning test 2x). This process also keeps out of the persistent
# compilation cache below (jax read its settings at import); the cache keys
# programs by XLA_FLAGS anyway.
_XLA_FLAGS = os.environ.get('XLA_FLAGS', '')
_NO_LLVM_OPT = '--xla_backend_optimization_level=0'
os.environ['XLA_FLAGS'] = f'{_XLA_FLAGS} {_NO_LLVM_OPT}'
jax.devices()  # The CPU backend reads XLA_FLAGS once, here.
os.environ['XLA_FLAGS'] = _XLA_FLAGS


# The host allocator that `source launch/xla_flags.sh cpu` sets where tcmalloc
# is missing. By default glibc maps and unmaps XLA's larger blocks at every
# step; transparent huge pages fault them in 2 MiB at a time, and 200 steps of
# the tiny config took 31 s instead of 38 (2.5M page faults against 0.22M).
# glibc reads it as a process starts, so it reaches the xdist workers, started
# after this file loads, and every subprocess, not this process.
_HUGE_PAGES = 'glibc.malloc.hugetlb=1'
if _HUGE_PAGES not in os.environ.get('GLIBC_TUNABLES', ''):
  os.environ['GLIBC_TUNABLES'] = ':'.join(
    filter(None, [_HUGE_PAGES, os.environ.get('GLIBC_TUNABLES')])
  )


# `--dist loadfile` hands each worker whole files, in collection order, as it
# finishes one. The slowest files go first, so that at the end one worker never
# waits long for the other's last file: by their seconds in a 2026-11-30 run,
# the default run's plus the heavy one's (CI runs both).
_SLOWEST_FILES = (
  'test_finetune.py',  # 419 + 579
  'test_checkpointing.py',  # 371 + 303
  'test_aot.py',  # 30 + 511
  'test_multiprocess.py',  # 0 + 507
  'test_objectives_cli.py',  # 0 + 500
  'test_gcs.py',  # 6 + 425
  'test_objective_family.py',  # 263 + 72
  'test_export.py',  # 154 + 161
  'test_train.py',  # 206
  'test_model_options.py',  # 173
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
  rank = {name: i for i, name in enumerate(_SLOWEST_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def cpu_env(devices: int = 1, *, optimize: bool = True, **extra: str) -> dict[str, str]:
  """The environment of a test's subprocess: the CPU with `devices` simulated
  devices, `extra`, and LLVM's optimisations unless `optimize` is False (for a
  subprocess that compiles more than it runs)."""
  flags = [_XLA_FLAGS]
  if not optimize:
    flags.append(_NO_LLVM_OPT)
  if devices != 1:
    flags.append(f'--xla_force_host_platform_device_count={devices}')
  return {**os.environ, 'JAX_PLATFORMS': 'cpu', 'XLA_FLAGS': ' '.join(flags).strip(), **extra}


def run_module(
  module: str, *args: str, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
  """`python -m MODULE ARGS` from the repository root, on the CPU unless `env` says
  otherwise, its output captured."""
  return subprocess.run(
    [sys.executable, '-m', module, *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=timeout,
    env=env or cpu_env(),
  )


def start_module(
  module: str,
  log: pathlib.Path | str,
  *args: str,
  env: dict[str, str] | None = None,
  preexec_fn: Callable[[], None] | None = None,
) -> subprocess.Popen:
  """`python -m MODULE ARGS` started from the repository root, on the CPU unless
  `env` says otherwise; its stdout and stderr go to `log`, to be read while it runs."""
  with open(log, 'w') as output:
    return subprocess.Popen(
      [sys.executable, '-m', module, *args],
      cwd=REPO,
      stdout=output,
      stderr=subprocess.STDOUT,
      env=env or cpu_env(),
      preexec_fn=preexec_fn,
    )


def wait_for(
  process: subprocess.Popen,
  log: pathlib.Path | str,
  until: str | Callable[[str], object],
  timeout: float = 300,
) -> str:
  """Waits until `log`, the output of the running `process`, matches the regex
  `until` (or makes it true, a function of the text); returns the text. Fails with
  the log's tail if the process exits first or `timeout` seconds pass."""
  found = until if callable(until) else lambda text: re.search(until, text)
  deadline = time.monotonic() + timeout
  while not found(text := pathlib.Path(log).read_text()):
    status = process.poll()
    assert status is None, f'exited with status {status} before {until!r}:\n{text[-3000:]}'
    assert time.monotonic() < deadline, f'no {until!r} after {timeout} s:\n{text[-3000:]}'
    time.sleep(0.05)
  return text


def perturbed(params, seed: int, scale: float):
  """`params` plus `scale` x N(0, 1) on every leaf, biases and LayerNorm scales too,
  so that every mapping shows. Drawn by NumPy: in JAX, each leaf's shape would
  compile a sampler of its own, 15 s for a tiny model's 45 leaves (and one program
  for them all compiles as long)."""
  rng = np.random.default_rng(seed)
  return jax.tree.map(
    lambda x: jax.device_put(
      np.asarray(x) + (scale * rng.standard_normal(x.shape)).astype(x.dtype), x.sharding
    ),
    params,
  )


# gs:// paths through gcsfs, as where TensorFlow is not installed (the tests
# install it, and etils.epath would pick tf.io.gfile). Set before any test uses
# epath: it reads the choice once per process.
os.environ['EPATH_USE_TF'] = 'false'


# One persistent compilation cache for the whole session, inherited by the
# xdist workers and the CLI subprocesses: a test's later runs of the same config
# skip compilation. The process that made it removes it on exit.
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='electra_jax_test_xla_cache_')
  atexit.register(shutil.rmtree, os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


def data_dir() -> pathlib.Path:
  """$ELECTRA_JAX_DATA or ../shared/data. Missing data fails under CI=true, else skips."""
  path = pathlib.Path(os.environ.get('ELECTRA_JAX_DATA', REPO.parent / 'shared' / 'data'))
  if not (path / 'wikipedia').is_dir():
    message = f'real data not found at {path}; set ELECTRA_JAX_DATA'
    if os.environ.get('CI') == 'true':
      pytest.fail(message)
    pytest.skip(message)
  return path


def require(module: str):
  """Imports a test-only dependency: a missing one skips locally but fails under CI=true,
  where `.[test]` installs them all."""
  if os.environ.get('CI') == 'true':
    return importlib.import_module(module)
  return pytest.importorskip(module)


@pytest.fixture
def wiki_glob() -> str:
  """Two WikiExtractor files (about 2 MB of text): enough for tiny runs."""
  return str(data_dir() / 'wikipedia' / 'AA' / 'wiki_0[0-1]')


@pytest.fixture(scope='session')
def tiny_tokenizer(tmp_path_factory):
  """A 2000-piece sentencepiece model trained on one real Wikipedia file."""
  from electra_jax.data import sources, tokenizers

  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_00'))
  lines = (line for doc in sources.read_documents(unit, sources.ReadOptions()) for line in doc)
  path = tokenizers.train_sentencepiece(
    lines,
    str(tmp_path_factory.mktemp('tokenizer') / 'spm'),
    vocab_size=2000,
    model_type='unigram',
    max_sentences=20_000,
  )
  return tokenizers.SentencePieceTokenizer(path)


@pytest.fixture(scope='session')
def real_token_rows(tiny_tokenizer):
  """int32 [64, 64] input ids of real Wikipedia text, packed as for pretraining."""
  from electra_jax.data import packing, sources

  unit = sources.WorkUnit('wiki', str(data_dir() / 'wikipedia' / 'AA' / 'wiki_01'))
  builder = packing.ExampleBuilder(64, tiny_tokenizer.special_ids, np.random.default_rng(0))
  records = []
  for doc in sources.read_documents(unit, sources.ReadOptions()):
    records.extend(builder.add_document(tiny_tokenizer.encode(doc)))
    if len(records) >= 64:
      break
  return packing.decode_records(records[:64], 64, tiny_tokenizer.pad_id)['input_ids']


@pytest.fixture(scope='module')
def prepared_tiny(tmp_path_factory) -> str:
  """Two Wikipedia files with a 2,000-piece sentencepiece model, for the tiny config."""
  from electra_jax.data import shard_writer  # pylint: disable=g-import-not-at-top

  options = shard_writer.PrepareOptions(
    corpus=f'wiki:{data_dir()}/wikipedia/AA/wiki_0[0-1]',
    max_seq_length=64,
    spm_vocab_size=2000,
    spm_sample_sentences=50_000,
  )
  directory = str(tmp_path_factory.mktemp('prepared'))
  shard_writer.prepare(options, directory, num_workers=1, progress=False)
  return directory
