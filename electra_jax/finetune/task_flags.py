"""The flags that the fine-tuning commands (finetune, probe) share: the config, the
task, its files and the model."""

import dataclasses
import os

from absl import flags

from electra_jax import cli
from electra_jax.finetune import glue, squad, tagging, tasks, user_files

_DEFAULT_CONFIG = os.path.join(os.path.dirname(__file__), '..', '..', 'configs', 'finetune.py')
# Flags that only --task=csv reads.
_CSV_ONLY = ('text_column', 'text_pair_column', 'label_column', 'id_column')


@dataclasses.dataclass(frozen=True)
class TaskFlags:
  config: flags.FlagHolder
  task: flags.FlagHolder
  data_dir: flags.FlagHolder
  files: dict[str, flags.FlagHolder]  # 'train', 'dev', 'test' -> --*_file.
  columns: dict[str, flags.FlagHolder]  # user_files.Columns' fields -> --*_column.
  init: flags.FlagHolder

  def task_files(self) -> tasks.TaskFiles:
    """The task the flags name, and its files."""
    files = {split: holder.value for split, holder in self.files.items() if holder.value}
    name = self.task.value.lower()
    if name == 'csv':
      columns = user_files.Columns(**{k: v.value for k, v in self.columns.items()})
      return user_files.task_files(self.data_dir.value, files, columns)
    tagging_task = name in tagging.TASK_NAMES
    given = [
      f'--{flag}'
      for flag in _CSV_ONLY
      if flags.FLAGS[flag].present and not (tagging_task and flag == 'label_column')
    ]
    if given:
      raise tasks.TaskDataError(
        f'{", ".join(given)}: only --task=csv reads columns by name; '
        f'--task={self.task.value} reads '
        f"{'CoNLL' if tagging_task else 'SQuAD' if name in squad.FILES else 'GLUE'}'s layout"
      )
    if name in squad.FILES:
      return squad.task_files(name, self.data_dir.value, files, self.config.value.squad)
    if tagging_task:
      column = self.columns['label'].value if flags.FLAGS['label_column'].present else '-1'
      try:
        label_column = int(column)
      except ValueError:
        raise tasks.TaskDataError(
          f"--label_column={column}: for --task={name}, the number of the tag's column "
          '(0 is the word, -1 the last)'
        ) from None
      return tagging.task_files(name, self.data_dir.value, files, label_column)
    return glue.task_files(glue.get_task(self.task.value), self.data_dir.value, files)


def define_task_flags(config_help: str) -> TaskFlags:
  """Defines --config (configs/finetune.py), --task, --data_dir (alias --glue_dir),
  --{train,dev,test}_file, the csv task's --*_column flags and --init, which is
  required. Call once, at a command's module level."""
  holders = TaskFlags(
    cli.define_config(_DEFAULT_CONFIG, config_help),
    flags.DEFINE_string(
      'task',
      None,
      f'GLUE task ({", ".join(glue.TASKS)}; case-insensitive); csv: your own '
      'classification or regression files, read by the --*_column flags; tagging (or '
      'conll2003): token tags (NER, chunking) from CoNLL-format files; squad, squad_v2: '
      'extractive question answering from SQuAD-format JSON.',
    ),
    flags.DEFINE_string(
      'data_dir',
      None,
      "The task's files: for GLUE, the task folders as GLUE ships them (CoLA/train.tsv, ...); "
      'for csv, train.tsv, dev.tsv and an optional test.tsv; for tagging, train.txt and '
      'dev.txt, valid.txt or test.txt; for squad, train-v1.1.json and dev-v1.1.json '
      '(v2.0 for squad_v2).',
    ),
    {
      split: flags.DEFINE_string(
        f'{split}_file', None, f'The {split} file, instead of the one in --data_dir.'
      )
      for split in ('train', 'dev', 'test')
    },
    {
      'text': flags.DEFINE_string('text_column', 'text', 'csv: the column of the text.'),
      'text_pair': flags.DEFINE_string(
        'text_pair_column', None, "csv: the column of a pair's second text, if any."
      ),
      'label': flags.DEFINE_string(
        'label_column',
        'label',
        'csv: the column of the label; numbers that are not all integers make a regression. '
        'tagging: the number of the column of the tag (default -1, the last).',
      ),
      'id': flags.DEFINE_string(
        'id_column',
        'id',
        "csv: the column whose ids the test predictions keep (without it: the row's number).",
      ),
    },
    flags.DEFINE_string('init', None, 'A pretraining workdir or an HF ELECTRA directory.'),
  )
  flags.DEFINE_alias('glue_dir', 'data_dir')
  flags.mark_flags_as_required(['task', 'init'])
  return holders
