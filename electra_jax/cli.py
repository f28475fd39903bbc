"""What every command shares: flag parsing and error reporting.

`cli.run(main)` replaces absl's `app.run(main)`. A user error, whether absl or
ml_collections finds it while parsing the flags or the command raises
errors.UserError, prints one line, `error: ...`, naming the flag as it was typed,
and exits with status 2 (1 for a run that had to stop). Anything else is a bug and shows its traceback.
"""

from collections.abc import Callable
import glob
import logging as std_logging
import os
import re
import signal
import sys
from typing import NoReturn

from absl import app, flags, logging
import jax
from ml_collections import config_flags

from electra_jax import errors


def fail(message: str, status: int = errors.UserError.exit_status) -> NoReturn:
  """Prints `error: message` to stderr and exits with `status`."""
  print(f'error: {message}', file=sys.stderr, flush=True)
  sys.exit(status)


def _typed_flag(argv: list[str], key: str) -> str:
  """The flag in argv whose dotted name holds `key` (--config.model.x for x), or --key."""
  for arg in argv[1:]:
    name = arg.split('=', 1)[0]
    if name.startswith('-') and key in name.lstrip('-').split('.'):
      return arg if key == name.lstrip('-') else name
  return f'--{key}'


def _one_line(error: Exception, argv: list[str]) -> str:
  """A flag-parsing error of absl or ml_collections, as one line naming the flag."""
  text = str(error).strip()
  # A config file that is not Python, or that failed before an override of its keys.
  if isinstance(error, SyntaxError) or (isinstance(error, OSError) and 'config file' in text):
    return _cannot_load(error, argv)
  if isinstance(error, (KeyError, AttributeError)):  # An unknown --config.* key.
    key = re.split(r"['\\\s]", text.strip('"\'\\'), maxsplit=1)[0]
    typed = _typed_flag(argv, key)
    guess = re.search(r'Did you mean "([^"]+)"', text)
    hint = f'; did you mean {typed.rsplit(".", 1)[0]}.{guess[1]}?' if guess else ''
    return f'{typed}: no such config key{hint}'
  required = re.match(r'flag --(\S+)=None: Flag --\1 must have a value other than None', text)
  if required:
    return f'--{required[1]} is required (see --helpshort)'
  text = re.sub(r'^flag (--\S+)', r'\1', text)  # absl's "flag --x=1: ..." names the flag.
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  # ml_collections puts a whole traceback in the message of a config file that fails.
  return lines[0] if len(lines) == 1 else f'{lines[0]} {lines[-1]}'


def _config_file_error(argv: list[str]) -> str | None:
  """A --config file that did not load, named as it was typed, or None."""
  if 'config' not in flags.FLAGS or flags.FLAGS['config'].value is None:
    return None
  try:
    getattr(flags.FLAGS['config'].value, 'lock', None)  # ml_collections defers the error to here.
  except OSError as e:
    return _cannot_load(e, argv)
  return None


def _cannot_load(error: OSError | SyntaxError, argv: list[str]) -> str:
  """The --config file behind the error, as typed, and why it did not load."""
  typed = _typed_flag(argv, 'config')
  path = typed.split('=', 1)[-1].split(':', 1)[0]
  if isinstance(error, SyntaxError):
    cause = f'{error.msg} (line {error.lineno})'
  elif not os.path.exists(path):
    cause = 'no such file'
  else:
    cause = str(error.__cause__ or error).splitlines()[-1]
  return f'{typed}: cannot load the config file: {cause.strip()}'


# What absl and ml_collections raise for a bad flag.
_FLAG_ERRORS = (flags.Error, KeyError, AttributeError, ValueError, TypeError, OSError, SyntaxError)


def define_config(default: str | None, help_text: str) -> flags.FlagHolder:
  """--config, a locked config file whose keys --config.KEY=VALUE overrides.

  With a default file and no --config on the command line, ml_collections reads the
  overrides as it defines the flag, at import, before cli.run: a bad one gets the
  same one line and status 2 here.
  """
  try:
    return config_flags.DEFINE_config_file('config', default, help_text, lock_config=True)
  except _FLAG_ERRORS as e:
    fail(_one_line(e, sys.argv))


def parse_flags(argv: list[str]) -> list[str]:
  """absl's flag parsing, with any error as one line and status 2."""
  try:
    rest = flags.FLAGS(argv)
  except _FLAG_ERRORS as e:
    fail(_one_line(e, argv))
  problem = _config_file_error(argv)
  if problem:
    fail(problem)
  return rest


def _no_tpu_here() -> bool:
  """True where no TPU, NVIDIA or AMD device is present, so JAX can use the CPU alone.

  libtpu, which the test extra installs for AOT compiles, otherwise tries to start
  a TPU on every machine and prints a page of warnings when there is none. Google's
  PCI vendor id is 0x1ae0, which is also how JAX looks for TPU chips.
  """
  for vendor in glob.glob('/sys/bus/pci/devices/*/vendor'):
    try:
      with open(vendor) as f:
        if f.read().strip() == '0x1ae0':
          return False
    except OSError:
      continue
  accelerators = ('/dev/accel*', '/dev/vfio/[0-9]*', '/dev/nvidia*', '/dev/kfd', '/dev/dxg')
  return not any(glob.glob(pattern) for pattern in accelerators)


def use_cpu_without_accelerator() -> None:
  """Keeps JAX to the CPU where no accelerator is present, unless JAX_PLATFORMS says
  which platforms to use; every command calls it before JAX starts."""
  if 'JAX_PLATFORMS' not in os.environ and _no_tpu_here():
    jax.config.update('jax_platforms', 'cpu')


class _HideLibraryInfo(std_logging.Filter):
  """orbax logs dozens of INFO lines per checkpoint, and gcsfs one per file it
  opens, burying the training log; they show again with --verbosity=1, and
  their warnings and errors always show."""

  _LIBRARIES = tuple(f'{os.sep}{name}{os.sep}' for name in ('orbax', 'gcsfs'))

  def filter(self, record: std_logging.LogRecord) -> bool:
    return (
      record.levelno >= std_logging.WARNING
      or not any(library in record.pathname for library in self._LIBRARIES)
      or logging.get_verbosity() >= logging.DEBUG
    )


def run(main: Callable[[list[str]], None], *, takes_arguments: bool = False) -> None:
  """Runs a command's main(argv) as absl's app.run does, with one-line user errors.

  Unless takes_arguments, words on the command line that are not flags are refused.
  """

  def guarded(argv: list[str]) -> None:
    if not takes_arguments and len(argv) > 1:
      fail(f'unexpected arguments {" ".join(argv[1:])}; flags take the form --name=value')
    use_cpu_without_accelerator()
    logging.get_absl_handler().addFilter(_HideLibraryInfo())
    try:
      main(argv)
    except errors.UserError as e:
      fail(str(e), e.exit_status)
    except KeyboardInterrupt:
      fail('interrupted', 128 + signal.SIGINT)  # The shell's status for a SIGINT.

  app.run(guarded, flags_parser=parse_flags)
