"""Evaluates a pretraining checkpoint on held-out data.

  python -m electra_jax.evaluate --workdir=DIR [--data=PREPARED_DIR] [--num_batches=N]
      [--temperature=T]

Prints what the run's objective has: the generator's MLM loss and accuracy and
its sampled-token accuracy; then the discriminator's loss, accuracy,
precision, recall and AUC over the held-out tokens, with two AUCs that say how
much of it needs the context: a detector's that reads each token's id alone
(context_free_auc: what the generator's choice of ids gives away), and the
discriminator's own between a replaced and an original token of the same id
(same_token_auc: 0.5 for a detector that ignores the context); or the
full-size masked LM's loss and accuracy at the masked positions (mlm_* for
BERT's one network, main_mlm_* beside a generator). It writes them to the
workdir's TensorBoard files as eval/* at the checkpoint's step, beside the
training curves (eval_tT/* with --temperature=T).
--data defaults to the run's config.eval.prepared_dir; it must be prepared with
the run's tokenizer. --temperature samples the generator at T instead of the
run's own config.objective.temperature: whether a discriminator trained on
flattened samples also detects the paper's.
"""

from absl import flags
import jax

from electra_jax import cli, config_lib, metric_writer, pretrain_eval, pretrained, sharding, train

_WORKDIR = flags.DEFINE_string('workdir', None, 'A pretraining workdir.')
_DATA = flags.DEFINE_string(
  'data', None, "Held-out prepared data (default: the run's config.eval.prepared_dir)."
)
_NUM_BATCHES = flags.DEFINE_integer(
  'num_batches', None, "Batches to evaluate (default: the run's config.eval.num_batches)."
)
_TEMPERATURE = flags.DEFINE_float(
  'temperature',
  None,
  "Sample the generator at this temperature (default: the run's config.objective.temperature).",
)
flags.mark_flags_as_required(['workdir'])


def run(
  workdir: str, data_dir: str | None, num_batches: int | None, temperature: float | None = None
) -> dict[str, float]:
  source = pretrained.load(workdir)
  config = source.config
  prefix = 'eval'
  if temperature is not None:
    if not temperature > 0:
      raise config_lib.ConfigError(f'--temperature: must be > 0, got {temperature}')
    if config.objective.name == 'mlm':
      raise config_lib.ConfigError(
        f"--temperature: {workdir} was pretrained with objective 'mlm', which samples nothing"
      )
    config = config.copy_and_resolve_references()
    config.objective.temperature = temperature
    prefix = f'eval_t{temperature:g}'
  key = '--data' if data_dir else 'config.eval.prepared_dir'
  data_dir = data_dir or config.eval.prepared_dir
  if not data_dir:
    command = pretrain_eval.held_out_command(source.tokenizer, config.max_seq_length)
    raise config_lib.ConfigError(
      '--data: the run has no config.eval.prepared_dir; prepare held-out text with the '
      f"run's tokenizer, then pass --data=HELD_OUT_DIR: {command}"
    )
  mesh = sharding.make_mesh(config.mesh)
  config_lib.require_backend(config)
  model = train.build_model(config)
  with jax.set_mesh(mesh):
    shardings = train.param_shardings(config, model, mesh)
    held_out = pretrain_eval.HeldOut(
      config,
      data_dir,
      model,
      shardings,
      sharding.batch_sharding(mesh, config.mesh.logical_axis_rules),
      tokenizer=source.tokenizer,
      num_batches=num_batches,
      key=key,
    )
    results = held_out.run(jax.device_put(source.params, shardings))
  writer = metric_writer.MetricWriter(workdir)
  writer.write(source.step, results, prefix=prefix)
  writer.close()
  return {'step': source.step, **results}


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  results = run(_WORKDIR.value, _DATA.value, _NUM_BATCHES.value, _TEMPERATURE.value)
  step = results.pop('step')
  for name, value in results.items():
    print(f'{name:>18}: {value:.4f}' if name != 'tokens' else f'{name:>18}: {value:,.0f}')
  print(f'step {step}: ' + ', '.join(f'{k}={v:.4f}' for k, v in results.items() if k != 'tokens'))


if __name__ == '__main__':
  cli.run(main)
