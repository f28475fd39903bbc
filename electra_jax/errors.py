"""The one user-error type.

Everything a user can get wrong (a flag, a config key, a corpus, a checkpoint, a
GLUE folder) raises a subclass of UserError whose message names the input and the
fix. The commands print it as one line and exit with its status (electra_jax/cli.py);
any other exception is a bug and keeps its traceback.
"""


class UserError(Exception):
  """A bad input; the message names it and says what to do instead."""

  # 2 as argparse and the shell's builtins use for a bad invocation; a run that
  # started well and then had to stop (divergence, failed saves) uses 1.
  exit_status = 2
