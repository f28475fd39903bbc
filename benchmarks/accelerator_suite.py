"""The offline GPU suite's stages; benchmarks/accelerator_suite.sh installs the kit and
runs one per invocation.

  python benchmarks/accelerator_suite.py --stage=env|small|base|quality|objectives --kit=DIR --out=DIR \
      [--dry_run]

Each stage writes OUT/STAGE.md: the device, the versions and the commit, then a
Markdown table of its figures. Every timed variant runs in its own process
(`python -m electra_jax.benchmark`), so one that fails (out of memory, a kernel
the device lacks) becomes a row saying so and the stage goes on. --dry_run
runs each stage on the tiny config for a few steps, on whatever devices there
are, to check the suite itself.
"""

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
# The timed variants run in child processes, each taking the GPU's memory as JAX
# does by default; this process, which only reads the device's name between
# them, takes none in advance (stage env, which times here, allocates what it uses).
_CHILD_ENV = dict(os.environ)
os.environ['XLA_PYTHON_CLIENT_PREALLOCATE'] = 'false'
# Issue 33's targets on one H100.
SMALL_TOKENS_PER_S_TARGET = 1.1e6
BASE_MFU_TARGET = 0.45
_VERSIONS = (
  'jax',
  'jaxlib',
  'flax',
  'optax',
  'orbax-checkpoint',
  'grain',
  'ml-collections',
  'torch',
  'transformers',
)


def _commit(kit: pathlib.Path) -> str:
  """The repository's commit, or the one the kit was built at (a copied tree has no .git)."""
  try:
    return subprocess.run(
      ['git', 'rev-parse', '--short', 'HEAD'], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout.strip()
  except (OSError, subprocess.CalledProcessError):
    path = kit / 'commit.txt'
    return f"{path.read_text().strip()} (the kit's)" if path.exists() else 'unknown'


def _versions() -> dict[str, str]:
  versions = {}
  for name in _VERSIONS:
    try:
      versions[name] = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
      versions[name] = 'absent'
  return versions


def _device() -> str:
  import jax  # pylint: disable=import-outside-toplevel (after the kit is on the path)

  devices = jax.devices()
  return f'{len(devices)} x {devices[0].device_kind} ({devices[0].platform})'


def _write(
  out: pathlib.Path, stage: str, kit: pathlib.Path, body: list[str], dry_run: bool
) -> None:
  versions = ', '.join(f'{k} {v}' for k, v in _versions().items())
  header = [
    f'# Stage {stage}{" (dry run)" if dry_run else ""}',
    '',
    f'- device: {_device()}',
    f'- versions: {versions}',
    f'- commit: {_commit(kit)}',
    f'- date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC',
    '',
  ]
  out.mkdir(parents=True, exist_ok=True)
  text = '\n'.join(header + body) + '\n'
  (out / f'{stage}.md').write_text(text)
  print(text)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
  return [
    '| ' + ' | '.join(header) + ' |',
    '|' + '---|' * len(header),
    *('| ' + ' | '.join(row) + ' |' for row in rows),
  ]


# --- env --------------------------------------------------------------------------------


def stage_env(args) -> list[str]:
  """The devices and a bf16 matmul peak measured now, beside the listed one."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel

  from electra_jax import flops  # pylint: disable=import-outside-toplevel

  size = 512 if args.dry_run else 8192
  rows = []
  for dtype in (jnp.bfloat16, jnp.float32):
    peak = flops.measure_matmul_peak(size, repeats=3 if args.dry_run else 20, dtype=dtype)
    rows.append([jnp.dtype(dtype).name, f'{size}', f'{peak / 1e12:.3g}'])
  listed = flops.device_peak_flops(jax.devices()[0].device_kind)
  return [
    f'{len(jax.devices())} devices: ' + ', '.join(str(d) for d in jax.devices()),
    '',
    *_table(['dtype', 'matmul n', 'measured TFLOP/s'], rows),
    '',
    f'Listed bf16 peak per device: {listed / 1e12:.0f} TFLOP/s'
    if listed
    else 'No listed peak for this device (MFU uses the measured f32 peak).',
  ]


# --- small and base: timed variants -----------------------------------------------------


def _why(done: subprocess.CompletedProcess) -> str:
  """A failed child's last line of stderr, in at most 160 characters."""
  lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
  return re.sub(r'\s+', ' ', lines[-1] if lines else f'exit {done.returncode}')[:160]


def _benchmark(
  config: str, flags: list[str], args, baseline: bool = False, steps: int = 30
) -> dict | str:
  """electra_jax.benchmark's figures for one variant, or why it failed."""
  steps = ['--steps=2', '--warmup=1'] if args.dry_run else [f'--steps={steps}', '--warmup=5']
  with tempfile.TemporaryDirectory() as tmp:
    results = os.path.join(tmp, 'results.json')
    command = [
      sys.executable,
      '-m',
      'benchmarks.vs_hf' if baseline else 'electra_jax.benchmark',
      f'--config={config}',
      *flags,
      *steps,
      f'--results_json={results}',
    ]
    print('$', ' '.join(command), flush=True)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=_CHILD_ENV)
    sys.stdout.write(done.stdout[-3000:])
    if done.returncode or not os.path.exists(results):
      return f'failed: {_why(done)}'
    with open(results) as f:
      return json.load(f)


def _variant_rows(
  config: str,
  common: list[str],
  variants: dict[str, list[str]],
  args,
  baseline_variant: str | None = None,
  steps: int = 30,
) -> tuple[list[list[str]], list[dict]]:
  rows, figures = [], []
  for name, flags in variants.items():
    if 'cudnn' in name and args.platform != 'gpu':
      rows.append([name, 'skipped: cuDNN needs an NVIDIA GPU', '', '', '', ''])
      continue
    result = _benchmark(
      config, common + flags, args, baseline=name == baseline_variant, steps=steps
    )
    if isinstance(result, str):
      rows.append([name, result, '', '', '', ''])
      continue
    figures.append({'variant': name, **result})
    peak = result.get('peak_bytes')
    rows.append(
      [
        name,
        f'{result["tokens_per_s"]:,.0f}',
        f'{result["mfu"]:.1%}',
        f'{result["step_time_s"] * 1e3:.1f}',
        f'{result["compile_s"]:.1f}',
        f'{peak / 2**30:.2f}' if peak else 'n/a',
      ]
    )
    if 'baseline_tokens_per_s' in result:
      base = result['baseline_tokens_per_s']
      rows.append(
        [
          f'HF transformers (PyTorch), as {name}',
          f'{base:,.0f}',
          f'ours / HF: {result["tokens_per_s"] / base:.2f}',
          '',
          '',
          '',
        ]
      )
  return rows, figures


_HEADER = ['variant', 'tokens/s', 'MFU', 'step ms', 'compile s', 'peak GiB']


def _attention_and_remat_variants(layers: int, args) -> dict[str, list[str]]:
  """The attention implementations, then the scan unrolled and remat on the fused one
  (cuDNN on a GPU; elsewhere, where cuDNN is skipped, XLA's). A dry run times two:
  explicit attention, and the fused one with both switches, which exercise every flag."""
  no_dropout = ['--config.model.attention_dropout_rate=0']
  fused = 'cudnn' if args.platform == 'gpu' else 'xla'
  if args.dry_run:
    return {
      'explicit attention': ['--config.model.attention_impl=explicit'],
      f'{fused}, scan unrolled, remat dots_saveable': [
        f'--config.model.attention_impl={fused}',
        *no_dropout,
        f'--config.model.scan_unroll={layers}',
        '--config.model.remat_policy=dots_saveable',
      ],
    }
  return {
    'explicit attention': ['--config.model.attention_impl=explicit'],
    'xla attention': ['--config.model.attention_impl=xla', *no_dropout],
    'cudnn attention': ['--config.model.attention_impl=cudnn', *no_dropout],
    f'{fused}, scan unrolled': [
      f'--config.model.attention_impl={fused}',
      *no_dropout,
      f'--config.model.scan_unroll={layers}',
    ],
    f'{fused}, remat dots_saveable': [
      f'--config.model.attention_impl={fused}',
      *no_dropout,
      '--config.model.remat_policy=dots_saveable',
    ],
  }


def _report(
  intro: str, rows: list[list[str]], figures: list[dict], key: str, target: float, show
) -> list[str]:
  """The stage's text: the intro, the table, and the best variant against the target."""
  best = max((f[key] for f in figures), default=0)
  return [
    intro,
    '',
    *_table(_HEADER, rows),
    '',
    f'Best: {show(best)} against the target of {show(target)} '
    f'({"met" if best >= target else "not met"}).',
  ]


def _profile(config: str, flags: list[str], args) -> list[str]:
  """benchmarks/profile_summary.py's text for a traced run of one variant; the trace
  and the step's HLO stay in OUT/profile for a closer look."""
  directory = args.out / 'profile'
  command = [
    sys.executable,
    '-m',
    'electra_jax.benchmark',
    f'--config={config}',
    *flags,
    '--steps=2',
    '--warmup=1',
    f'--profile_dir={directory}',
  ]
  print('$', ' '.join(command), flush=True)
  done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=_CHILD_ENV)
  if done.returncode == 0:
    summary = [sys.executable, 'benchmarks/profile_summary.py', str(directory)]
    done = subprocess.run(summary, cwd=REPO, capture_output=True, text=True)
  if done.returncode:
    return [f'The profile failed: {_why(done)}.']
  return ['```', *done.stdout.rstrip().splitlines(), '```']


def stage_small(args) -> list[str]:
  """ELECTRA-Small at its paper batch, 128 x 128 in bf16, and the HF baseline beside it;
  then a profile of the fastest variant."""
  if args.dry_run:
    config, common, layers = 'configs/tiny.py', ['--config.model.dtype=bfloat16'], 2
  else:
    config, layers = 'configs/small.py', 12
    common = ['--config.model.dtype=bfloat16', '--config.batch_size=128']
  variants = _attention_and_remat_variants(layers, args)
  # 100 timed steps: at 30 the same program's figure spread 1.06-1.15 M tokens/s on an
  # H100 (docs/experiments/2026-11-26_h100_followup.md); 100 steps of small take 1.5 s.
  rows, figures = _variant_rows(
    config, common, variants, args, baseline_variant='explicit attention', steps=100
  )
  intro = (
    f'`{config}`, bf16 activations, {"a few" if args.dry_run else 100} timed steps '
    'each (`python -m electra_jax.benchmark`); HF: `benchmarks/hf_baseline.py` on the '
    'same device.'
  )
  report = _report(
    intro, rows, figures, 'tokens_per_s', SMALL_TOKENS_PER_S_TARGET, lambda x: f'{x:,.0f} tokens/s'
  )
  if not figures:
    return report
  fastest = max(figures, key=lambda f: f['tokens_per_s'])['variant']
  return [
    *report,
    '',
    f'Where the step of the fastest variant ({fastest}) spends its time '
    '(`benchmarks/profile_summary.py`; the trace and the HLO are in OUT/profile):',
    '',
    *_profile(config, common + variants[fastest], args),
  ]


def _largest_batch(config: str, common: list[str], args) -> int | str:
  """The largest batch whose step compiles into the device's memory (electra_jax.aot)."""
  command = [
    sys.executable,
    '-m',
    'electra_jax.aot',
    f'--config={config}',
    *common,
    '--topology=local',
    '--find_max_batch',
  ]
  if args.platform == 'cpu':
    command.append('--device_memory_gib=0.25')  # CPU devices report no limit.
  print('$', ' '.join(command), flush=True)
  done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=_CHILD_ENV)
  sys.stdout.write(done.stdout[-3000:])
  found = re.search(r'largest (?:global )?batch[^0-9]*(\d+)', done.stdout, re.IGNORECASE)
  if done.returncode or not found:
    lines = (done.stderr or done.stdout).strip().splitlines()
    return f'failed: {lines[-1][:160] if lines else done.returncode}'
  return int(found.group(1))


def stage_base(args) -> list[str]:
  """ELECTRA-Base at sequence 512 in bf16, at the largest batch that fits."""
  if args.dry_run:
    config, layers = 'configs/tiny.py', 2
    common = ['--config.model.dtype=bfloat16', '--config.max_seq_length=128']
  else:
    config, layers = 'configs/base.py', 12
    common = ['--config.model.dtype=bfloat16']
  variants = _attention_and_remat_variants(layers, args)
  # The batch that the fused attention fits (on a GPU, cuDNN's: the MFU target's
  # best case); a variant that needs more memory at it says so in its row.
  fused = ['--config.model.attention_impl=cudnn', '--config.model.attention_dropout_rate=0']
  batch = _largest_batch(config, common + (fused if args.platform == 'gpu' else []), args)
  if isinstance(batch, str):
    return [f'The largest batch could not be found: {batch}']
  rows, figures = _variant_rows(config, common + [f'--config.batch_size={batch}'], variants, args)
  intro = (
    f'`{config}`, bf16, sequence {128 if args.dry_run else 512}, batch {batch} (the '
    'largest whose step fits, `python -m electra_jax.aot --topology=local '
    '--find_max_batch`).'
  )
  return _report(intro, rows, figures, 'mfu', BASE_MFU_TARGET, lambda x: f'{x:.1%} MFU')


# --- quality: pretrain in resumable chunks, then GLUE -----------------------------------

# The paper's ELECTRA-Small trained for part of its 1M steps (Clark et al. 2020):
# GLUE dev score at that fraction.
_PAPER_SMALL_GLUE = {0.0625: 74.1, 0.125: 76.0}
_PAPER_SMALL_STEPS = 1_000_000
# The GLUE tasks the kit carries: (folder, dev metric).
_GLUE = {
  'cola': ('CoLA', 'mcc'),
  'sst-2': ('SST-2', 'accuracy'),
  'mrpc': ('MRPC', 'f1'),
  'wnli': ('WNLI', 'accuracy'),
}


def _latest_step(workdir: pathlib.Path) -> int:
  steps = [int(p.name) for p in (workdir / 'checkpoints').glob('[0-9]*') if p.name.isdigit()]
  return max(steps, default=0)


def _run(
  command: list[str],
  timeout_s: float | None = None,
  log: pathlib.Path | None = None,
  env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
  """Runs a CLI, appending its stderr to `log`; at `timeout_s` its process group gets
  SIGTERM, on which the main job saves its checkpoint and exits (two more minutes are
  allowed for that), as do the processes a script started."""
  print('$', ' '.join(command), flush=True)
  process = subprocess.Popen(
    command,
    cwd=REPO,
    env=env or _CHILD_ENV,
    stdout=subprocess.PIPE,
    stderr=subprocess.PIPE,
    text=True,
    start_new_session=True,
  )
  try:
    out, err = process.communicate(timeout=timeout_s)
  except subprocess.TimeoutExpired:
    os.killpg(process.pid, signal.SIGTERM)
    try:
      out, err = process.communicate(timeout=120)
    except subprocess.TimeoutExpired:
      os.killpg(process.pid, signal.SIGKILL)
      out, err = process.communicate()
  sys.stdout.write(out[-2000:])
  sys.stderr.write(err[-2000:])
  if log is not None:
    with open(log, 'a') as f:
      f.write(err)
  return subprocess.CompletedProcess(command, process.returncode, out, err)


def stage_quality(args) -> list[str]:
  """ELECTRA-Small pretrained on the kit's slice for QUALITY_STEPS, at most
  QUALITY_MINUTES of pretraining per invocation (SIGTERM makes the main job save), so
  that jobs of 10 minutes add up; once there, held-out metrics and GLUE (one seed)."""
  steps = int(os.environ.get('QUALITY_STEPS', 4 if args.dry_run else 62_500))
  minutes = float(os.environ.get('QUALITY_MINUTES', 8))
  workdir = args.out / 'quality' / 'pretrain'
  if args.dry_run:
    model = [
      '--config=configs/tiny.py',
      '--config.model.vocab_size=30522',
      '--config.max_seq_length=128',
      '--config.model.max_position_embeddings=128',
    ]
  else:
    model = ['--config=configs/small.py', '--config.model.dtype=bfloat16']
    if args.platform == 'gpu':
      # The small stage's fastest variant on an H100 (2026-11-25): 1.6x the rolled scan.
      model += [
        '--config.model.attention_impl=cudnn',
        '--config.model.attention_dropout_rate=0',
        '--config.model.scan_unroll=12',
      ]
  start = _latest_step(workdir)
  workdir.mkdir(parents=True, exist_ok=True)
  if start < steps:
    done = _run(
      [
        sys.executable,
        '-m',
        'electra_jax.main',
        *model,
        f'--workdir={workdir}',
        f'--config.data.prepared_dir={args.kit / "data" / "wiki_train"}',
        f'--config.num_train_steps={steps}',
        '--config.checkpoint.every_steps=2000',
        f'--config.compilation_cache_dir={args.out / "xla_cache"}',
      ],
      timeout_s=60 * minutes,
      log=args.out / 'quality' / 'pretrain.log',
    )
    reached = _latest_step(workdir)
    if reached < steps:
      # 143 is a run that SIGTERM stopped after its save (electra_jax.loop.Preempted).
      failed = done.returncode not in (0, 143)
      tail = done.stderr.strip().splitlines()[-1:] if failed else []
      return [
        f'Pretraining went from step {start} to {reached} of {steps} in this job'
        f'{" and failed: " + tail[0] if tail else ""}; run STAGE=quality again to '
        'continue.'
      ]
  figures = _quality_figures(args, workdir, steps, model)
  return figures


def _quality_figures(args, workdir: pathlib.Path, steps: int, model: list[str]) -> list[str]:
  evaluated = _run(
    [
      sys.executable,
      '-m',
      'electra_jax.evaluate',
      f'--workdir={workdir}',
      f'--data={args.kit / "data" / "wiki_held_out"}',
      '--num_batches=8',
    ]
  )
  held_out = (evaluated.stdout.strip().splitlines() or ['evaluation failed'])[-1]
  rows = []
  tasks = os.environ.get('QUALITY_TASKS', ' '.join(_GLUE)).split()
  for task, (folder, metric) in _GLUE.items():
    if task not in tasks or not (args.kit / 'glue' / folder).exists():
      continue
    run = args.out / 'quality' / f'finetune_step_{steps}' / task
    if not (run / 'results.json').exists():
      extra = ['--config.max_train_examples=32', '--config.num_train_epochs=1'] * args.dry_run
      _run(
        [
          sys.executable,
          '-m',
          'electra_jax.finetune',
          f'--task={task}',
          f'--glue_dir={args.kit / "glue"}',
          f'--init={workdir}',
          f'--workdir={run}',
          '--config.num_seeds=1',
          *extra,
        ]
      )
    if (run / 'results.json').exists():
      result = json.loads((run / 'results.json').read_text())
      rows.append([task, metric, f'{result["median"]["dev"][metric]:.3f}'])
    else:
      rows.append([task, metric, 'failed'])
  batch = 16 if args.dry_run else 128
  metadata = json.loads((args.kit / 'data' / 'wiki_train' / 'metadata.json').read_text())
  examples = metadata['counts']['examples']
  passes = steps * batch / examples
  fraction = steps / _PAPER_SMALL_STEPS
  anchors = ', '.join(f'{f:.2%} of training: GLUE {s}' for f, s in _PAPER_SMALL_GLUE.items())
  return [
    f"`{model[0].split('=')[1]}` pretrained for {steps:,} steps on the kit's slice "
    f'({steps * batch * 128:,} tokens, {passes:.1f} passes over its '
    f"{examples:,} examples; {fraction:.2%} of the paper's 1M-step "
    'schedule for Small, which never repeats its data).',
    '',
    f'Held-out (`electra_jax.evaluate`, kit `wiki_held_out`): {held_out}',
    '',
    *_table(['task', 'dev metric', 'one seed'], rows),
    '',
    f"The paper's partly trained ELECTRA-Small: {anchors}.",
  ]


# --- objectives: the objective ablation's comparison at a budget a CPU cannot reach -----

# Budgets (train TFLOP per row) the probe chooses from: 600 is the CPU's largest.
# The ladder reaches ELECTRA-Small's shape in bf16 (PRETRAIN_FLAGS), which does far
# more TFLOP a second than the recipe's model, too small to fill a GPU.
_OBJECTIVE_BUDGETS = (24000, 18000, 12000, 9000, 6000, 4800, 3600, 2400, 1800, 1200, 600, 200)
# Seconds each probe trains after its first logged rate (its compilation done); its
# rate is the mean since then.
_PROBE_SECONDS = 20


def _objective_corpus(args) -> pathlib.Path:
  """The kit's objective corpus, unpacked into OUT once."""
  corpus = args.out / 'objectives' / 'objective_corpus'
  packed = args.kit / 'data' / 'objective_corpus.tar.xz'
  if not (corpus / 'metadata.json').exists():
    if not packed.exists():
      raise SystemExit(
        f'error: the kit has no {packed.name}; build the objectives kit with '
        'OBJECTIVE_CORPUS=OUT/wiki_spm8k bash benchmarks/accelerator_kit.sh (OUT of '
        'benchmarks/objective_ablation.sh, which prepares that corpus)'
      )
    with tarfile.open(packed) as tar:
      tar.extractall(corpus.parent, filter='data')
  return corpus


def _train_step_flops(config_args: list[str], env: dict[str, str]) -> float:
  """electra_jax.flops' count for a config given as flags, by its command."""
  done = subprocess.run(
    [sys.executable, '-m', 'electra_jax.flops', *config_args],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    check=True,
  )
  return float(done.stdout)


def _probe(args, env: dict[str, str], model: list[str], seconds_left: float) -> tuple[int, str]:
  """Runs both train loops at once, as the lanes will, for _PROBE_SECONDS after each
  has compiled, and returns the largest budget whose pretraining leaves
  OBJECTIVES_FINETUNE_S (default 200) for fine-tuning before the stage's deadline,
  with a line on the rates."""
  start = time.perf_counter()
  probes = {}
  for name in ('electra', 'mlm'):
    log = args.out / 'objectives' / f'probe-{name}.log'
    workdir = args.out / 'objectives' / f'probe-{name}'
    shutil.rmtree(workdir, ignore_errors=True)  # A finished run would only restore.
    with open(log, 'w') as stderr:
      probes[name] = (
        log,
        subprocess.Popen(
          [
            sys.executable,
            '-m',
            'electra_jax.main',
            *model,
            f'--workdir={workdir}',
            f'--config.objective.name={name}',
            '--config.num_train_steps=10000000',  # Stopped below.
            '--config.progress_every_seconds=2',
          ],
          cwd=REPO,
          env=env,
          stderr=stderr,
          stdout=subprocess.DEVNULL,
        ),
      )
  rated_at: dict[str, float] = {}  # When each probe logged its first rate.
  # A probe that has logged no rate by then (a failed start) is reported below.
  deadline = time.perf_counter() + 180
  while time.perf_counter() < deadline:
    now = time.perf_counter()
    for name, (log, _) in probes.items():
      if name not in rated_at and 'steps/s' in log.read_text():
        rated_at[name] = now
    if all(
      process.poll() is not None or now - rated_at.get(name, now) >= _PROBE_SECONDS
      for name, (_, process) in probes.items()
    ):
      break
    time.sleep(1)
  seconds_per_tflop, rates_read = [], []
  for name, (log, process) in probes.items():
    process.kill()  # Its workdir is thrown away.
    process.wait()
    text = log.read_text()
    rates = re.findall(r'([\d.]+) steps/s', text)
    if not rates:
      last = (text.strip().splitlines() or ['(empty)'])[-1]
      raise SystemExit(f'error: the {name} probe logged no speed; its last line: {last} ({log})')
    flops_per_step = _train_step_flops([*model, f'--config.objective.name={name}'], env)
    seconds_per_tflop.append(1e12 / flops_per_step / float(rates[-1]))
    rates_read.append(
      f'{name} {float(rates[-1]):.3g} steps/s ({float(rates[-1]) * flops_per_step / 1e12:.3g} '
      'model TFLOP/s)'
    )
  finetune_s = float(os.environ.get('OBJECTIVES_FINETUNE_S', 200))
  # 40 s: each lane's start-up and compilation.
  left = seconds_left - (time.perf_counter() - start) - finetune_s - 40
  fits = [b for b in _OBJECTIVE_BUDGETS if b * max(seconds_per_tflop) <= left]
  budget = fits[0] if fits else _OBJECTIVE_BUDGETS[-1]
  return budget, (
    f'Probe, both train loops at once: {", ".join(rates_read)}; the largest budget '
    f'that fits: {budget} TFLOP{"" if fits else " (none fits: the smallest)"}.'
  )


def stage_objectives(args) -> list[str]:
  """benchmarks/objective_ablation.sh on the kit's corpus, its rows in two lanes
  sharing the GPU, at OBJECTIVE_BUDGET TFLOP per row, or, by default, the largest
  budget that a probe says fits OBJECTIVES_MINUTES (default 9); rerun it to finish an
  interrupted table (the ablation resumes)."""
  start = time.perf_counter()
  corpus = _objective_corpus(args)
  vocab_size = json.loads((corpus / 'metadata.json').read_text())['tokenizer']['vocab_size']
  run = args.out / 'objectives' / 'run'
  # The ablation calls `python`, which a node's image may only have as python3.
  bin_dir = args.out / 'objectives' / 'bin'
  bin_dir.mkdir(parents=True, exist_ok=True)
  (bin_dir / 'python').write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
  (bin_dir / 'python').chmod(0o755)
  env = {
    **_CHILD_ENV,
    'PATH': f'{bin_dir}:{os.environ["PATH"]}',
    'XLA_PYTHON_CLIENT_PREALLOCATE': 'false',
    'ELECTRA_JAX_DATA': str(args.kit),  # Its glue/ folder.
    'prepared': str(corpus),
    'vocab_size': str(vocab_size),
    'ROWS': os.environ.get('ROWS', 'electra_t3 mlm'),
    'LRS': os.environ.get('LRS', '1e-3'),
    'PARALLEL': '2',
    'RANDOM_INIT': os.environ.get('RANDOM_INIT', '0'),
  }
  # A dry run's CPU gets time enough for its few steps whatever the load.
  seconds = 60 * float(os.environ.get('OBJECTIVES_MINUTES', 30 if args.dry_run else 9))
  budget = os.environ.get('OBJECTIVE_BUDGET', '')
  # The ablation's model and data flags: the recipe's, PRETRAIN_FLAGS included.
  model = subprocess.run(
    ['bash', '-c', 'source benchmarks/cpu_recipe.sh && printf "%s\\n" "${model[@]}"'],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    check=True,
  ).stdout.splitlines()
  probed = []
  if not budget:
    chosen, line = _probe(args, env, model, seconds - (time.perf_counter() - start))
    budget, probed = str(chosen), [line, '']
  if args.dry_run:
    # The probe ran, but a CPU has no time for its budgets: two steps of the costliest
    # row, whatever the model's size (electra_t3 is ELECTRA at another temperature).
    objectives = {'electra' if row == 'electra_t3' else row for row in env['ROWS'].split()}
    per_step = max(
      _train_step_flops([*model, f'--config.objective.name={o}'], env) for o in objectives
    )
    budget = f'{2 * per_step / 1e12:.4g}'
    # After the user's FINETUNE_FLAGS, which the dry run checks too.
    few = '--config.max_train_examples=32 --config.num_train_epochs=1'
    env['FINETUNE_FLAGS'] = f'{env.get("FINETUNE_FLAGS", "")} {few}'.strip()
  print(f'budget {budget} TFLOP per row', flush=True)
  done = _run(
    ['bash', 'benchmarks/objective_ablation.sh', str(run), budget],
    timeout_s=max(seconds - (time.perf_counter() - start), 60),
    log=args.out / 'objectives' / 'ablation.log',
    env=env,
  )
  table = subprocess.run(
    [sys.executable, 'benchmarks/objective_table.py', str(run), budget, *env['LRS'].split()],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    check=False,
  ).stdout
  finished = done.returncode == 0
  return probed + [
    f"`benchmarks/objective_ablation.sh` on the kit's corpus (vocabulary of "
    f'{vocab_size:,}), rows {env["ROWS"]!r} at learning rates {env["LRS"]!r}, two lanes '
    f'sharing the device, {budget} TFLOP of pretraining per row'
    + (
      '.'
      if finished
      else f'; stopped unfinished (exit {done.returncode}): run '
      f'STAGE=objectives OBJECTIVE_BUDGET={budget} again to go on.'
    ),
    '',
    '```',
    table.rstrip(),
    '```',
  ]


STAGES = {
  'env': stage_env,
  'small': stage_small,
  'base': stage_base,
  'quality': stage_quality,
  'objectives': stage_objectives,
}


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__)
  parser.add_argument('--stage', required=True, choices=sorted(STAGES))
  parser.add_argument('--kit', type=pathlib.Path, default=REPO / 'accelerator_kit')
  parser.add_argument('--out', type=pathlib.Path, default=REPO / 'accelerator_results')
  parser.add_argument('--dry_run', action='store_true')
  args = parser.parse_args()
  import jax  # pylint: disable=import-outside-toplevel

  args.platform = jax.devices()[0].platform
  start = time.perf_counter()
  body = STAGES[args.stage](args)
  body.append(f'\nStage time: {time.perf_counter() - start:.0f} s.')
  _write(args.out, args.stage, args.kit, body, args.dry_run)


if __name__ == '__main__':
  main()
