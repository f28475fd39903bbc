"""Bad command lines, through the real commands: one `error:` line each, status 2."""

import os
import shutil
import subprocess
import sys

import pytest

from electra_jax import cli
from tests.conftest import REPO, data_dir

_TINY = '--config=configs/tiny.py'


def _bad_inputs(workdir: str) -> list[tuple[str, list[str], str]]:
  """(command, flags, the error line's expected start)."""
  w = f'--workdir={workdir}'
  program = os.path.join(workdir, 'program.txt')  # A binary, named as if it were text.
  empty = os.path.join(workdir, 'empty')
  os.makedirs(empty)
  shutil.copy(sys.executable, program)
  vocab = data_dir() / 'vocab' / 'bert-base-uncased-vocab.txt'
  return [
    (
      'electra_jax.prepare_data',
      [f'--corpus=text:{program}', f'--vocab={vocab}', f'--output_dir={workdir}/prepared'],
      f'{program}: does not look like text (line 1 holds a NUL byte); ',
    ),
    ('electra_jax.main', [_TINY], '--workdir is required'),
    ('electra_jax.flops', [_TINY, '--budget_tflop=0'], '--budget_tflop=0.0: must be positive'),
    (
      'electra_jax.flops',
      [_TINY, '--budget_tflop=1e-9'],
      '--budget_tflop=1e-09: buys no train step',
    ),
    # A config the trainer would refuse gets no count.
    (
      'electra_jax.flops',
      [_TINY, '--config.model.attention_head_size=48'],
      'config.model.hidden_size: must be a multiple of model.attention_head_size (48), got 128',
    ),
    (
      'electra_jax.main',
      ['--config=configs/nope.py', w],
      '--config=configs/nope.py: cannot load the config file: no such file',
    ),
    # Its overrides fail too; the file is the error to report.
    (
      'electra_jax.flops',
      ['--config=configs/nope.py', '--config.learning_rat=1'],
      '--config=configs/nope.py: cannot load the config file: no such file',
    ),
    (
      'electra_jax.main',
      ['--config=README.md', w],
      '--config=README.md: cannot load the config file: ',
    ),
    (
      'electra_jax.main',
      [_TINY, w, '--config.learning_rate=fast'],
      "--config.learning_rate=fast: could not convert string to float: 'fast'",
    ),
    (
      'electra_jax.main',
      [_TINY, w, '--config.learning_rat=1'],
      '--config.learning_rat: no such config key; did you mean --config.learning_rate?',
    ),
    (
      'electra_jax.main',
      [_TINY, w, '--config.model.hiden_size=1'],
      '--config.model.hiden_size: no such config key; did you mean --config.model.hidden_size?',
    ),
    # More devices than this machine has; it is refused before any data is read.
    (
      'electra_jax.main',
      [_TINY, w, '--config.mesh.data=64', f'--config.data.prepared_dir={workdir}'],
      "config.mesh: {'data': 64, 'fsdp': 1, 'tensor': 1} needs 64 devices per slice but ",
    ),
    ('electra_jax.main', [_TINY, w, 'stray'], 'unexpected arguments stray; flags take'),
    # Commands with a default config file read its overrides as they define --config.
    (
      'electra_jax.finetune',
      ['--config.learning_rat=1'],
      '--config.learning_rat: no such config key; did you mean --config.learning_rate?',
    ),
    ('electra_jax.prepare_data', ['--config.data.no_such_key=1'], '--config.data.no_such_key: '),
    ('electra_jax.finetune', [f'--init={workdir}', f'--glue_dir={workdir}'], '--task is required'),
    (
      'electra_jax.finetune',
      [
        '--task=sst-2',
        f'--glue_dir={data_dir() / "glue"}',
        f'--init={workdir}',
        f'--workdir={workdir}/grouped',
        '--config.trim_padding=False',
        '--config.length_grouped_batches=8',
      ],
      'config.length_grouped_batches: saves time only with trim_padding=True',
    ),
    (
      # Its own folder: the main job's cases write config.json into theirs.
      'electra_jax.export',
      [f'--workdir={empty}', f'--output={workdir}/hf'],
      f'{empty}: neither a pretraining workdir',
    ),
  ]


def test_each_bad_input_is_one_line_and_status_2(tmp_path):
  cases = _bad_inputs(str(tmp_path))
  # Without JAX_PLATFORMS, as users run: a machine without a TPU must not try to
  # start one (libtpu, from the test extra, prints a page of warnings).
  env = {k: v for k, v in os.environ.items() if k != 'JAX_PLATFORMS'}
  processes = [
    subprocess.Popen(
      [sys.executable, '-m', command, *args],
      cwd=REPO,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for command, args, _ in cases
  ]
  for (command, args, expected), process in zip(cases, processes):
    _, stderr = process.communicate(timeout=300)
    errors = [line for line in stderr.splitlines() if line.startswith('error: ')]
    where = f'{command} {" ".join(args)}:\n{stderr[-3000:]}'
    assert process.returncode == 2, where
    assert len(errors) == 1 and errors[0] == stderr.strip().splitlines()[-1], where
    assert errors[0].startswith(f'error: {expected}'), where
    assert 'Traceback' not in stderr, where
    assert 'libtpu' not in stderr and "backend 'tpu'" not in stderr, where


@pytest.mark.parametrize(
  'text, expected',
  [
    # absl's message for a flag of the wrong type names it with "flag".
    (
      "flag --config.batch_size=x: invalid literal for int() with base 10: 'x'",
      "--config.batch_size=x: invalid literal for int() with base 10: 'x'",
    ),
    # ml_collections puts a config file's traceback into the message.
    (
      'flag --config=c.py: Error whilst parsing config file:\n\nTraceback (most recent call '
      'last):\n  File "c.py", line 2\nNameError: name \'x\' is not defined',
      "--config=c.py: Error whilst parsing config file: NameError: name 'x' is not defined",
    ),
  ],
)
def test_flag_errors_become_one_line(text, expected):
  assert cli._one_line(ValueError(text), ['prog']) == expected
