"""Fine-tunes a pretrained network on a GLUE, SQuAD or tagging task, or on your own files.

  python -m electra_jax.finetune --task=mrpc --data_dir=GLUE --init=WORKDIR_OR_HF_DIR \
      --workdir=OUT [--config=configs/finetune.py:base] [--config.key=value ...]
  python -m electra_jax.finetune --task=csv --train_file=train.tsv --dev_file=dev.tsv \
      [--test_file=test.tsv] --text_column=text --label_column=label --init=... --workdir=OUT

Runs config.num_seeds seeds and prints a table of each seed's dev metrics, their
median and what always giving the training set's most frequent label scores;
its last line gives the task's dev metrics. OUT receives
results.json, TensorBoard logs per seed and test predictions: in GLUE's
submission format (OUT/seed_N/TASK.tsv), or for csv OUT/seed_N/predictions.tsv
with the test file's ids.
"""

from absl import flags

from electra_jax import cli
from electra_jax.finetune import task_flags, train

_FLAGS = task_flags.define_task_flags('configs/finetune.py[:small|base|large].')
_WORKDIR = flags.DEFINE_string('workdir', None, 'Output folder.')
flags.mark_flags_as_required(['workdir'])


def main(argv: list[str]) -> None:
  del argv  # cli.run refuses words that are not flags.
  results = train.finetune(
    _FLAGS.config.value, _FLAGS.task_files(), _FLAGS.init.value, _WORKDIR.value
  )
  print(train.results_table(results))
  summary = train.dev_summary(results['median'])
  n = len(results['seeds'])
  print(f'{results["task"]} dev, {"1 seed" if n == 1 else f"median of {n} seeds"}: {summary}')


if __name__ == '__main__':
  cli.run(main)
