"""benchmarks/gradient_shares.py on a 20-step run of the tiny config: its two terms sum
to the training step's gradient, each reaches only the parts its loss can, and the
command reads a chosen step and refuses one that was not saved."""

import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.gradient_shares import load_checkpoint, split_gradients
from electra_jax import objectives
from electra_jax.data import pipeline
from tests.conftest import REPO, prepared_tiny  # noqa: F401 (a fixture)
from tests.main_runs import every_step_args, run_main


@pytest.fixture(scope='module')
def run(tmp_path_factory, prepared_tiny):  # noqa: F811
  workdir = tmp_path_factory.mktemp('run')
  result = run_main(
    workdir,
    *every_step_args(
      prepared_tiny, '--config.num_train_steps=20', '--config.checkpoint.every_steps=10'
    ),
  )
  assert result.returncode == 0, result.stderr[-3000:]
  return workdir


def test_the_two_terms_sum_to_the_training_gradient(run):
  c = load_checkpoint(str(run), 10, None)
  assert c.step == 10
  batches = pipeline.train_iterator(c.data, c.config, process_index=0, process_count=1)
  batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
  batches.close()
  rng = jax.random.fold_in(jax.random.key(c.config.seed), c.step)
  with nn.logical_axis_rules(c.config.mesh.logical_axis_rules):
    gen, main = split_gradients(c.params, batch, rng, model=c.model, obj=c.obj)
    full, _ = objectives.pretraining_gradients(c.params, batch, rng, model=c.model, obj=c.obj)
  summed = jax.tree.map(jnp.add, gen, main)
  for a, b in zip(jax.tree.leaves(summed), jax.tree.leaves(full)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
  norm = lambda tree: float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(tree)))
  # The discriminator's loss reaches neither generator part (the sample is behind
  # stop_gradient); the generator's loss never reaches the discriminator.
  assert norm(main['generator']) == norm(main['generator_head']) == 0
  assert norm(gen['discriminator']) == norm(gen['discriminator_head']) == 0
  # Both reach the shared embeddings.
  assert norm(gen['embeddings']) > 0 and norm(main['embeddings']) > 0


def _shares(run, *flags):
  return subprocess.run(
    [sys.executable, 'benchmarks/gradient_shares.py', f'--workdir={run}', *flags],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_the_command_prints_each_part_and_refuses_an_unsaved_step(run):
  done = _shares(run, '--step=10', '--num_batches=2')
  assert done.returncode == 0, done.stderr[-3000:]
  assert f'{run}, step 10, mean gradient of 2 batches' in done.stdout
  rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[2:]}
  assert sorted(rows) == [
    'discriminator',
    'discriminator_head',
    'embeddings',
    'generator',
    'generator_head',
  ]
  assert rows['discriminator'][0] == '0' and rows['generator'][1] == '0'
  assert float(rows['embeddings'][2]) > 0  # main/gen: both losses reach the shared table.
  refused = _shares(run, '--step=15')
  assert refused.returncode == 2
  assert f'error: step 15: {run} holds checkpoints at steps [10, 20] only' in refused.stderr
