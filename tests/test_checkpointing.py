"""Checkpoints and failures through the CLI, with real subprocesses, signals and files.

Exact resume after SIGKILL, SIGTERM, non-finite steps, damaged checkpoints,
restoring onto another mesh, config mismatches and init_from.
"""

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time

from etils import epath
import jax
import numpy as np
import pytest

from electra_jax import checkpointing, config_lib, train
from tests.conftest import REPO, cpu_env, wait_for
from tests.main_runs import (
  checkpoint_params,
  every_step_args,
  last_per_step,
  logged_steps,
  run_main,
  start_main,
  wait_for_step,
)


@pytest.fixture(scope='module')
def run_a(tmp_path_factory, prepared_tiny):
  """40 uninterrupted steps, a checkpoint every 10."""
  workdir = tmp_path_factory.mktemp('run_a')
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny, '--config.num_train_steps=40', '--config.checkpoint.every_steps=10'
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


def test_exact_resume_after_sigkill(tmp_path, prepared_tiny, run_a):
  workdir = tmp_path / 'b'
  args = every_step_args(
    prepared_tiny, '--config.num_train_steps=40', '--config.checkpoint.every_steps=10'
  )
  process, log = start_main(workdir, *args)
  wait_for_step(process, log, 20)  # N = 20 steps done (and saved), then a moment
  time.sleep(random.uniform(0, 1.5))  # that the test does not choose.
  process.send_signal(signal.SIGKILL)
  assert process.wait() == -signal.SIGKILL, 'the run finished before it could be killed'
  print('killed after step', max(logged_steps(log)))

  result = run_main(workdir, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  a, b = last_per_step(run_a), last_per_step(workdir)
  assert set(a) == set(b)
  for tag in a:
    assert sorted(b[tag]) == list(range(1, 41)), tag
    for step in range(21, 41):
      assert a[tag][step] == b[tag][step], (tag, step, a[tag][step], b[tag][step])
  for x, y in zip(checkpoint_params(run_a, 40), checkpoint_params(workdir, 40), strict=True):
    np.testing.assert_array_equal(x, y)


def test_a_run_stopped_at_a_step_then_rerun_is_one_run(tmp_path, prepared_tiny, run_a):
  # objective_ablation.sh compares learning rates at such a stop, then runs the
  # winner on: its result must be the uninterrupted run's.
  workdir = tmp_path / 'in_two'
  args = every_step_args(
    prepared_tiny,
    '--config.num_train_steps=40',
    '--config.checkpoint.every_steps=10',
    '--config.progress_every_seconds=0.001',
  )
  first = run_main(workdir, *args, '--stop_at_step=25')
  assert first.returncode == 0, first.stderr[-3000:]
  assert 'Stopped as asked (a rerun without stop_at_step goes on to 40) at step 25:' in first.stderr
  assert '] to step 25 of 40: step ' in first.stderr  # The progress line counts to the stop.
  saved = sorted(int(p.name) for p in (workdir / 'checkpoints').iterdir() if p.name.isdigit())
  assert saved == [10, 20, 25]

  rest = run_main(workdir, *args)
  assert rest.returncode == 0, rest.stderr[-3000:]
  assert 'Resumed at step 25 ' in rest.stderr
  assert 'another machine setup' not in rest.stderr
  a, b = last_per_step(run_a), last_per_step(workdir)
  assert set(a) == set(b)
  for tag in a:
    assert a[tag] == b[tag], tag
  for x, y in zip(checkpoint_params(run_a, 40), checkpoint_params(workdir, 40), strict=True):
    np.testing.assert_array_equal(x, y)


# Two CLI runs at a large batch: a minute. test_multiprocess's heavy test sends
# SIGTERM to two processes.
@pytest.mark.heavy
def test_sigterm_saves_within_max_steps_ahead_and_resumes(tmp_path, prepared_tiny):
  # Slow steps (a large batch), and metrics read only at the end: only
  # max_steps_ahead keeps the host from dispatching far beyond the device. A
  # progress line at every step names the newest finished one.
  ahead, steps = 2, 12
  args = every_step_args(
    prepared_tiny,
    f'--config.num_train_steps={steps}',
    '--config.checkpoint.every_steps=1000',
    '--config.batch_size=64',
    f'--config.log_every_steps={steps}',
    '--config.progress_every_seconds=0.001',
    f'--config.max_steps_ahead={ahead}',
  )
  workdir = tmp_path / 'preempted'
  process, log = start_main(workdir, *args)
  finished = lambda text: [int(s) for s in re.findall(rf'\] step (\d+)/{steps}', text)]
  last = max(finished(wait_for(process, log, lambda text: max(finished(text), default=0) >= 2)))
  sent = time.monotonic()
  process.send_signal(signal.SIGTERM)
  # It saves, says how to go on, and exits with the shell's status for SIGTERM.
  assert process.wait(timeout=300) == 143, open(log).read()[-3000:]
  saved = int(
    re.search(r'error: SIGTERM: saved the checkpoint of step (\d+) of 12', open(log).read())[1]
  )
  print(f'step {last} finished; saved {saved}, {time.monotonic() - sent:.1f} s after SIGTERM')
  # The step after `last` was running; the host had dispatched at most `ahead` more.
  assert last < saved <= last + 1 + ahead + 1, (last, saved)
  assert os.path.isdir(workdir / 'checkpoints' / str(saved))

  result = run_main(workdir, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Resumed at step {saved} ' in result.stderr
  assert os.path.isdir(workdir / 'checkpoints' / str(steps))


def test_nonfinite_steps_are_skipped_then_stop_the_run(tmp_path, prepared_tiny):
  workdir = tmp_path / 'diverged'
  # A learning rate of 1e30 overflows the parameters within a few steps. The
  # flags are read with each log window of 5 steps, not at every step. It stops
  # at step 5, so it compiles more than it runs: without LLVM's optimisations
  # the run took 29 s of CPU instead of 47.
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny,
      '--config.num_train_steps=50',
      '--config.checkpoint.every_steps=2',
      '--config.log_every_steps=5',
      '--config.learning_rate=1e30',
      '--config.max_consecutive_nonfinite_steps=3',
    ),
    optimize=False,
  )
  assert result.returncode == 1
  bad_steps = [
    int(s)
    for s in re.findall(
      r'Step (\d+): non-finite loss and gradients .* the update was skipped', result.stderr
    )
  ]
  stop = re.search(r'error: 3 non-finite steps in a row up to step (\d+);', result.stderr)
  assert stop and bad_steps[-3:] == [
    int(stop.group(1)) - 2,
    int(stop.group(1)) - 1,
    int(stop.group(1)),
  ], result.stderr[-3000:]
  steps = sorted(int(s) for s in os.listdir(workdir / 'checkpoints') if s.isdigit())
  assert steps and steps[-1] < 50
  assert all(np.isfinite(x).all() for x in checkpoint_params(workdir, steps[-1]))

  # The logged learning rate is the applied one: the schedule at the count of
  # updates applied before each step, which skipped steps do not advance.
  from configs import tiny
  from electra_jax import optim

  config = tiny.get_config()
  config.learning_rate, config.num_train_steps = 1e30, 50
  schedule = optim.learning_rate_schedule(config)
  skipped = {int(s) for s in re.findall(r'Step (\d+): non-finite ', result.stderr)}
  applied = lambda step: sum(1 for s in range(1, step) if s not in skipped)
  logged = last_per_step(workdir)['train/learning_rate']
  assert logged and skipped & set(range(1, max(logged)))
  for window_end, value in logged.items():
    expected = np.mean([schedule(applied(s)) for s in range(window_end - 4, window_end + 1)])
    assert value == pytest.approx(float(expected), rel=1e-5), window_end


def test_damaged_checkpoints_fall_back_and_never_restart_silently(tmp_path, run_a, prepared_tiny):
  workdir = tmp_path / 'damaged'
  shutil.copytree(run_a, workdir)
  state_files = [
    os.path.join(root, name)
    for root, _, names in os.walk(workdir / 'checkpoints' / '40' / 'state')
    for name in names
  ]
  biggest = max(state_files, key=os.path.getsize)
  with open(biggest, 'r+b') as f:
    f.truncate(os.path.getsize(biggest) // 2)
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny, '--config.num_train_steps=40', '--config.checkpoint.every_steps=10'
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Checkpoint 40 in' in result.stderr and 'cannot be restored' in result.stderr
  assert 'Resumed at step 30 ' in result.stderr
  assert any(name.startswith('40.unreadable-') for name in os.listdir(workdir / 'checkpoints'))
  # The redone steps 31-40 equal the original ones.
  a, b = last_per_step(run_a), last_per_step(workdir)
  assert all(a[tag][s] == b[tag][s] for tag in a for s in range(31, 41))

  for name in os.listdir(workdir / 'checkpoints'):
    if name.isdigit():
      shutil.rmtree(workdir / 'checkpoints' / name / 'state')
  result = run_main(workdir, *every_step_args(prepared_tiny, '--config.num_train_steps=40'))
  assert result.returncode == 2
  assert 'no checkpoint could be restored' in result.stderr.strip().splitlines()[-1]
  assert not any(name.isdigit() for name in os.listdir(workdir / 'checkpoints'))


def test_a_long_save_error_keeps_its_os_cause():
  # Orbax can gather several writes' failures into one long message, with the
  # OS error in the part that the report elides.
  error = ValueError(
    f'{"/bucket/run/checkpoints/30/state " * 20}[Errno 27] File too large, '
    f'{"while writing chunk 0.0.1; " * 20}'
  )
  brief = checkpointing._brief(error)
  assert len(brief) < 700 and ' ... ' in brief
  assert brief.startswith('ValueError: /bucket') and brief.endswith('(OS error: File too large)')


def test_failed_saves_are_reported_and_keep_the_previous_checkpoint(tmp_path, run_a, prepared_tiny):
  workdir = tmp_path / 'full_disk'
  shutil.copytree(run_a, workdir)
  for step in ('30', '40'):  # Back to step 20, so that steps 30 and 40 save again.
    shutil.rmtree(workdir / 'checkpoints' / step)
  args = every_step_args(
    prepared_tiny, '--config.num_train_steps=40', '--config.checkpoint.every_steps=10'
  )
  # Files over 1 MiB cannot be written: a write fails with EFBIG (Python ignores
  # SIGXFSZ), as it would with ENOSPC on a full disk.
  result = run_main(workdir, *args, shell_setup='ulimit -f 1024')
  assert result.returncode == 1
  # Each failure is reported against its own step; the run does not claim success.
  for step in (30, 40):
    assert re.search(
      rf'saving the checkpoint of step {step} in .* failed \(.*File too large', result.stderr
    )
    assert f'Saved the checkpoint of step {step} ' not in result.stderr
  # Orbax's dying writer threads may print around it, even on the same line, so the
  # message is searched for anywhere.
  assert re.search(
    r'error: saving the checkpoint of step 40.*the newest valid checkpoint is '
    r'step 20',
    result.stderr,
  ), result.stderr[-3000:]
  assert max(int(s) for s in os.listdir(workdir / 'checkpoints') if s.isdigit()) == 20

  # With space again, the run resumes from 20 and redoes the same steps.
  result = run_main(workdir, *args)
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resumed at step 20 ' in result.stderr
  assert sorted(os.listdir(workdir / 'checkpoints'))[-1] == '40'
  assert not [n for n in os.listdir(workdir / 'checkpoints') if 'tmp' in n]
  a, b = last_per_step(run_a), last_per_step(workdir)
  assert all(a[tag][s] == b[tag][s] for tag in a for s in range(21, 41))


def test_restore_onto_a_different_mesh(tmp_path):
  """Saved on 8 devices (data 4 x fsdp 2), restored on 4 (fsdp 4), in two processes."""

  def run(devices: int, *args: str) -> subprocess.CompletedProcess:
    result = subprocess.run(
      [sys.executable, '-m', 'tests.mesh_restore', *args],
      cwd=REPO,
      capture_output=True,
      text=True,
      timeout=300,
      env=cpu_env(devices),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result

  run(8, 'save', str(tmp_path), '4', '2')
  restored = run(4, 'restore', str(tmp_path), '1', '4')
  printed = restored.stdout
  assert "restored step 7 onto {'data': 1, 'fsdp': 4, 'tensor': 1}" in printed
  assert "'fsdp'" in printed and "{'next_index': 7}" in printed
  # The arrays are the same, but the run's sums will not be: it says so.
  assert 'was saved on another machine setup (devices 8 -> 4)' in restored.stderr
  assert 'not bit for bit' in restored.stderr


def test_a_resume_names_what_differs_from_the_machine_that_saved(caplog):
  here = checkpointing.machine()
  path = epath.Path('/ckpt/30')
  with caplog.at_level('WARNING'):
    checkpointing._warn_if_other_machine(path, {'machine': here})
    checkpointing._warn_if_other_machine(path, {})  # Saved before checkpoints recorded it.
    assert not caplog.records
    other = {**here, 'cpu_threads': 96, 'jax': '0.4.30'}
    checkpointing._warn_if_other_machine(path, {'machine': other})
  (record,) = caplog.records
  assert (
    f'/ckpt/30 was saved on another machine setup (cpu_threads 96 -> {here["cpu_threads"]}, '
    f'jax 0.4.30 -> {jax.__version__})' in record.getMessage()
  )


def test_config_changes_are_refused_or_named(tmp_path, run_a, prepared_tiny):
  workdir = tmp_path / 'changed'
  shutil.copytree(run_a, workdir)
  result = run_main(
    workdir,
    *every_step_args(prepared_tiny, '--config.num_train_steps=40', '--config.model.hidden_size=64'),
  )
  assert result.returncode == 2
  last = result.stderr.strip().splitlines()[-1]
  assert 'model.hidden_size: 128 -> 64' in last and 'allow_config_change=true' in last

  # Other settings may change; the run resumes with a warning naming them.
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny, '--config.num_train_steps=40', '--config.checkpoint.every_steps=8'
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert 'Resuming step 40 under a changed config: checkpoint.every_steps: 10 -> 8' in (
    result.stderr
  )


def _abstract_params(config):
  """The config's parameters as ShapeDtypeStructs, allocating nothing."""
  from electra_jax import optim, sharding, train

  mesh = sharding.make_mesh(config.mesh)
  model, tx = train.build_model(config), optim.create_optimizer(config)
  return train.abstract_train_state(config, model, tx, mesh)[0].params


# Another valid value for every key of config.model and config.objective, from
# configs/tiny.py with a full-width generator (which tying the generator needs) and
# no attention dropout (which attention_impl='xla' needs).
_ANOTHER_VALUE = {
  'model.attention_dropout_rate': 0.2,
  'model.attention_head_size': 32,
  'model.attention_impl': 'xla',
  'model.dropout_rate': 0.2,
  'model.dtype': 'bfloat16',
  'model.embedding_sharing': 'untied',
  'model.embedding_size': 32,
  'model.generator_hidden_fraction': 0.5,
  'model.generator_layers_fraction': 0.5,
  'model.hidden_size': 64,
  'model.initializer_range': 0.05,
  'model.layer_norm_eps': 1e-6,
  'model.max_position_embeddings': 256,
  'model.num_layers': 1,
  'model.position_embedding_init': 'sinusoidal',
  'model.remat_policy': 'full',
  'model.scan_layers': False,
  'model.scan_unroll': 2,
  'model.tie_generator_to_discriminator': True,
  'model.type_vocab_size': 3,
  'model.vocab_size': 2008,
  'objective.disallow_correct': True,
  'objective.disc_weight': 10.0,
  'objective.gen_weight': 2.0,
  'objective.mask_prob': 0.2,
  'objective.mask_token_prob': 0.5,
  'objective.masking': 'whole_word',
  'objective.name': 'mlm',
  'objective.temperature': 3.0,
  'objective.uniform_generator': True,
}


def test_architecture_keys_are_the_keys_that_change_the_parameters():
  """A resume under a changed key that reshapes the parameters must be refused by
  name (ARCHITECTURE_KEYS), not left to fail inside orbax; a key that does not
  reshape them must not block a resume."""
  from configs import tiny
  from electra_jax import config_lib

  def config_with(**changes):
    config = tiny.get_config()
    config.model.generator_hidden_fraction = 1.0
    config.model.attention_dropout_rate = 0.0
    config.data.prepared_dir = '/prepared'  # Validation asks for an input; none is read.
    for key, value in changes.items():
      section, name = key.split('.')
      config[section][name] = value
    config_lib.validate(config)
    return config

  def parameters(config):
    params = _abstract_params(config)
    return jax.tree.structure(params), [x.shape for x in jax.tree.leaves(params)]

  base = config_with()
  keys = [f'{section}.{name}' for section in ('model', 'objective') for name in base[section]]
  assert sorted(keys) == sorted(_ANOTHER_VALUE), 'give each new key another value above'
  reference = parameters(base)
  reshaping = set()
  for key, value in _ANOTHER_VALUE.items():
    assert base[key] != value, key
    if parameters(config_with(**{key: value})) != reference:
      reshaping.add(key)
  assert reshaping == set(checkpointing.ARCHITECTURE_KEYS)


@pytest.mark.heavy  # A 40-step run, after run_a's: about a minute.
def test_init_from_starts_from_another_runs_parameters(tmp_path, run_a, prepared_tiny):
  # Another run's parameters, with a fresh optimizer and step: one whose state
  # differs from the source's (Adam without bias correction keeps no count).
  fresh = tmp_path / 'continued'
  result = run_main(
    fresh,
    *every_step_args(
      prepared_tiny,
      '--config.num_train_steps=40',
      '--config.checkpoint.every_steps=10',
      f'--config.checkpoint.init_from={run_a}',
      '--config.adam_bias_correction=false',
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert f'Initialised the parameters from step 40 of {run_a}' in result.stderr
  losses = last_per_step(fresh)['train/loss']
  assert sorted(losses) == list(range(1, 41))
  # Starting from trained parameters, the first step's loss is far below a
  # fresh model's (the same data and RNG reach both at step 1).
  assert losses[1] < last_per_step(run_a)['train/loss'][1] - 5


def _tiny_params(**model):
  from configs import tiny

  config = tiny.get_config()
  config.model.update(model)
  return _abstract_params(config)


def test_init_from_refuses_another_tokenizer_and_other_shapes(run_a):
  meta = checkpointing.restore_for_inference(str(run_a))[2]
  with pytest.raises(checkpointing.CheckpointError, match='another tokenizer') as error:
    checkpointing.restore_params(str(run_a), _tiny_params(), 'electra', '0' * 64)
  assert f'{run_a}/tokenizer' in str(error.value)
  sha = meta['tokenizer']['sha256']
  with pytest.raises(checkpointing.CheckpointError, match=r'params\.embeddings\.\S+: \(') as error:
    checkpointing.restore_params(str(run_a), _tiny_params(embedding_size=32), 'electra', sha)
  print(error.value)


def test_restore_for_inference_reads_a_chosen_step_and_names_the_saved_ones(run_a):
  newest, params, _ = checkpointing.restore_for_inference(str(run_a))
  step, earlier, _ = checkpointing.restore_for_inference(str(run_a), step=20)
  assert (newest, step) == (40, 20)
  embeddings = lambda p: np.asarray(p['embeddings']['word_embeddings']['embedding'])
  assert not np.array_equal(embeddings(params), embeddings(earlier))
  with pytest.raises(
    checkpointing.CheckpointError, match=r'step 15: .* holds checkpoints at steps \['
  ) as error:
    checkpointing.restore_for_inference(str(run_a), step=15)
  assert '20, 30, 40]' in str(error.value)


def test_init_from_generator_takes_another_runs_generator_whatever_the_sharing(run_a, tmp_path):
  _, saved, meta = checkpointing.restore_for_inference(str(run_a))
  sha = meta['tokenizer']['sha256']
  # run_a shares its tables with its discriminator; this run keeps its own.
  loaded, step = checkpointing.restore_generator(
    str(run_a), _tiny_params(embedding_sharing='untied'), sha
  )
  assert step == 40
  assert sorted(loaded) == ['generator', 'generator_embeddings', 'generator_head']
  for ours, theirs in [
    ('generator', 'generator'),
    ('generator_head', 'generator_head'),
    ('generator_embeddings', 'embeddings'),
  ]:
    jax.tree.map(np.testing.assert_array_equal, jax.device_get(loaded[ours]), saved[theirs])

  # No generator of its own, other generator shapes, another tokenizer: refused by name.
  for model, match in [
    ({'tie_generator_to_discriminator': True}, 'no generator network of its own'),
    ({'generator_hidden_fraction': 0.25}, r'params\.generator\.\S+: \('),
  ]:
    with pytest.raises(checkpointing.CheckpointError, match=match):
      checkpointing.restore_generator(str(run_a), _tiny_params(**model), sha)
  with pytest.raises(checkpointing.CheckpointError, match='another tokenizer'):
    checkpointing.restore_generator(str(run_a), _tiny_params(), '0' * 64)
  # Alone, it takes a workdir of this code: an HF generator goes with an HF init_from.
  with pytest.raises(config_lib.ConfigError, match='an HF generator goes with an HF'):
    train._init_generator_from(str(tmp_path), None, sha)


@pytest.mark.heavy  # A 2-step run, after run_a's.
def test_a_run_starts_its_generator_from_another_runs(tmp_path, run_a, prepared_tiny):
  workdir = tmp_path / 'fresh_discriminator'
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny,
      '--config.num_train_steps=2',
      '--config.model.embedding_sharing=untied',
      f'--config.checkpoint.init_from_generator={run_a}',
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  assert (
    'Initialised the generator (generator, generator_embeddings, generator_head) from step '
    f'40 of {run_a}' in result.stderr
  )
  # The same data and RNG reach both at step 1: the generator starts where run_a's
  # ended (MLM loss 7.61 fresh, 6.74 loaded), the discriminator as fresh as run_a's
  # did (0.695 and 0.693; run_a's own had reached 0.41 by step 40).
  ours, theirs = last_per_step(workdir), last_per_step(run_a)
  assert ours['train/mlm_loss'][1] < theirs['train/mlm_loss'][1] - 0.5
  assert ours['train/disc_loss'][1] == pytest.approx(theirs['train/disc_loss'][1], abs=0.05)


def test_a_save_is_reported_when_it_is_on_disk_not_when_the_next_starts(tmp_path, caplog):
  from configs import tiny

  manager = checkpointing.create_manager(str(tmp_path), tiny.get_config())
  saver = checkpointing.AsyncSaver(manager, max_failures_in_a_row=1)
  saved = lambda: [r.getMessage() for r in caplog.records if r.getMessage().startswith('Saved')]
  state = {'w': jax.numpy.arange(1000.0)}
  with caplog.at_level('INFO', logger='absl'):
    saver.save(7, state, {'next_index': 7}, {'step': 7})
    deadline = time.monotonic() + 60
    while not saved():  # The loop calls report_finished after every step.
      assert time.monotonic() < deadline, 'the finished save was never reported'
      saver.report_finished()
      time.sleep(0.01)
    assert saved() == [f'Saved the checkpoint of step 7 in {manager.directory}']
    assert (manager.directory / '7' / 'state').exists()
    saver.wait()  # Collecting the save does not report it twice.
    assert len(saved()) == 1
  manager.close()


def test_saves_leave_the_preemption_sync_point_to_the_loop(tmp_path, monkeypatch):
  # JAX's sync protocol keeps the step of the newest call from any thread; orbax
  # asking from its finalize thread with the saved step rewound it, and two
  # processes then disagreed on the step to stop at.
  from jax.experimental import multihost_utils

  from configs import tiny

  asked = []
  monkeypatch.setattr(
    multihost_utils, 'reached_preemption_sync_point', lambda step: asked.append(step) or False
  )
  manager = checkpointing.create_manager(str(tmp_path), tiny.get_config())
  saver = checkpointing.AsyncSaver(manager, max_failures_in_a_row=1)
  for step in (3, 6):
    manager.should_save(step)
    saver.save(step, {'w': jax.numpy.arange(10.0)}, {'next_index': step}, {'step': step})
  saver.wait()
  assert manager.all_steps() == [3, 6]
  manager.close()
  assert asked == []
