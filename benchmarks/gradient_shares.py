"""Which loss moves which parameters: each part's gradient from the generator's MLM
loss and from the full-size network's, at one checkpoint of a pretraining run.

  python benchmarks/gradient_shares.py --workdir=WORKDIR [--step=N] [--data=PREPARED] \
      [--num_batches=4]

For each top-level part of the parameters (the shared embeddings, each network and
head) it prints the norm of gen_weight x the generator's MLM gradient and of
main_weight x the full-size network's (disc_weight x the BCE for ELECTRA), their
ratio and their cosine, each the gradient of the mean over `num_batches` training
batches, with the masks, samples and dropout of the training steps from that step on
(objectives.pretraining_gradients with one weight set to 0). Where both losses reach
a part (the embeddings; the whole transformer under
model.tie_generator_to_discriminator) this says which one its update follows.
The data default to the run's own training data (its config's data_dir). It takes
the objectives with a discriminator (objectives.RTD_OBJECTIVES) and refuses the
masked-LM ones.
"""

import dataclasses
from typing import Any

from absl import flags
import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import optax

from electra_jax import checkpointing, cli, config_lib, objectives, train
from electra_jax.data import pipeline, shards
from electra_jax.model import ElectraPretrainingModel
from electra_jax.objectives import Batch, Settings

_WORKDIR = flags.DEFINE_string('workdir', None, 'A pretraining workdir.')
_STEP = flags.DEFINE_integer('step', None, 'A saved step (default: the newest).')
_DATA = flags.DEFINE_string('data', None, "Prepared data (default: the run's training data).")
_NUM_BATCHES = flags.DEFINE_integer('num_batches', 4, 'Training batches to average over.')
flags.mark_flags_as_required(['workdir'])


def split_gradients(
  params: Any, batch: Batch, rng: jax.Array, *, model: ElectraPretrainingModel, obj: Settings
) -> tuple[Any, Any]:
  """(gen_weight x the generator MLM loss's gradient, main_weight x the full-size
  network's): the training step's gradient, objectives.pretraining_gradients, in two
  terms that sum to it, each from the same masks, samples and dropout."""
  return tuple(
    objectives.pretraining_gradients(params, batch, rng, model=model, obj=o)[0]
    for o in (dataclasses.replace(obj, disc_weight=0.0), dataclasses.replace(obj, gen_weight=0.0))
  )


@dataclasses.dataclass
class Checkpoint:
  """A saved step of a pretraining run, with what its training step was built from."""

  step: int
  params: Any
  config: ml_collections.ConfigDict
  data: shards.PreparedData
  model: ElectraPretrainingModel
  obj: Settings


def load_checkpoint(workdir: str, step: int | None, data_dir: str | None) -> Checkpoint:
  """WORKDIR's newest checkpoint or `step`, on `data_dir` or the run's own training data."""
  step, params, meta = checkpointing.restore_for_inference(workdir, step=step)
  config = config_lib.with_defaults(meta['config'])
  name = config.objective.name
  if name not in objectives.RTD_OBJECTIVES:
    # The masked-LM objectives weigh their full-size network's loss by 1, not a
    # weight of its own that could be set to 0.
    raise config_lib.ConfigError(
      f'{workdir}: objective {name!r} has no discriminator; the split is of '
      f'disc_weight x the BCE from the generator loss ({", ".join(objectives.RTD_OBJECTIVES)})'
    )
  data = shards.PreparedData.load(data_dir or meta['data_dir'])
  pipeline.check_compatible(data, config)
  obj = Settings.from_config(config, data.special_ids, data.tokenizer())
  return Checkpoint(step, params, config, data, train.build_model(config), obj)


def gradient_shares(
  workdir: str, step: int | None, data_dir: str | None, num_batches: int
) -> tuple[int, dict[str, tuple[float, float, float]]]:
  """(step, {part: (generator-loss norm, main-loss norm, cosine)}); the cosine is 0
  where one of the two is."""
  c = load_checkpoint(workdir, step, data_dir)

  @jax.jit
  def split(params, batch, rng):
    with nn.logical_axis_rules(c.config.mesh.logical_axis_rules):
      return split_gradients(params, batch, rng, model=c.model, obj=c.obj)

  # Batch i gets the draws of training step `step + i`, on the data's first batches.
  batches = pipeline.train_iterator(c.data, c.config, process_index=0, process_count=1)
  sums = None
  for i in range(num_batches):
    batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
    grads = split(c.params, batch, jax.random.fold_in(jax.random.key(c.config.seed), c.step + i))
    sums = grads if sums is None else jax.tree.map(jnp.add, sums, grads)
  batches.close()
  gen, main = jax.tree.map(lambda g: g / num_batches, sums)
  shares = {}
  for part in c.params:
    g, m = float(optax.tree.norm(gen[part])), float(optax.tree.norm(main[part]))
    dot = sum(
      jnp.vdot(a, b) for a, b in zip(jax.tree.leaves(gen[part]), jax.tree.leaves(main[part]))
    )
    shares[part] = (g, m, float(dot) / (g * m) if g > 0 and m > 0 else 0.0)
  return c.step, shares


def main(argv: list[str]) -> None:
  del argv
  step, shares = gradient_shares(_WORKDIR.value, _STEP.value, _DATA.value, _NUM_BATCHES.value)
  print(f'{_WORKDIR.value}, step {step}, mean gradient of {_NUM_BATCHES.value} batches')
  print(f'{"part":<24} {"generator MLM":>14} {"main loss":>14} {"main/gen":>9} {"cosine":>7}')
  for part, (g, m, cosine) in shares.items():
    ratio = f'{m / g:9.2f}' if g > 0 else f'{"-":>9}'
    both = f'{cosine:7.3f}' if g > 0 and m > 0 else f'{"-":>7}'
    print(f'{part:<24} {g:14.4g} {m:14.4g} {ratio} {both}')


if __name__ == '__main__':
  cli.run(main)
