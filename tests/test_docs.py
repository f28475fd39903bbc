"""The commands in the README and the docs/ pages name modules, flags, config keys
and files that exist. (docs/experiments/ is left out: a dated log records the
commands as they ran at its date.)

Every ```bash block is read; each command line (backslash continuations joined)
that runs `python -m electra_jax.X`, `python PATH` or `bash PATH` is checked: the
module or file exists, each --flag is one the command defines (from its
--helpfull, in a subprocess per command, since absl flags are global), and each
--config.key exists in the config the command names (its default otherwise).
"""

import concurrent.futures
import importlib
import re
import shlex
import subprocess
import sys

import pytest

from tests.conftest import REPO

_PAGES = [REPO / 'README.md', *sorted((REPO / 'docs').glob('*.md'))]
# The config file each command reads when --config is not given.
_DEFAULT_CONFIG = {'finetune': 'configs/finetune.py', 'probe': 'configs/finetune.py'}


def _commands() -> list[tuple[str, list[str]]]:
  """(where, argv) of each command in the bash blocks of the pages."""
  found = []
  for page in _PAGES:
    text = page.read_text()
    for block in re.findall(r'```bash\n(.*?)```', text, re.S):
      joined = re.sub(r'\\\n\s*', ' ', block)
      for number, line in enumerate(joined.splitlines(), start=1):
        for part in re.split(r'\s(?:&&|;|&|\|)\s|;\s*|\s&$', line):
          words = shlex.split(part, comments=True)
          while words and re.match(r'^[A-Z_]+=', words[0]):  # Environment assignments.
            words = words[1:]
          if words[:1] in (['do'], ['then']):
            words = words[1:]
          if words[:1] in (['python'], ['bash']):
            found.append((f'{page.relative_to(REPO)} (block line {number})', words))
  return found


def _defined_flags(module: str) -> set[str]:
  result = subprocess.run(
    [sys.executable, '-m', module, '--helpfull'],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
    env={'JAX_PLATFORMS': 'cpu', 'PATH': '/usr/bin:/bin'},
  )
  return set(re.findall(r'^\s+--(?:\[no\])?([\w.]+):', result.stdout, re.M))


def _config_has(spec: str, key: str) -> bool:
  path, _, arg = spec.partition(':')
  module = importlib.import_module(path.removesuffix('.py').replace('/', '.'))
  config = module.get_config(*([arg] if arg else []))
  for part in key.split('.'):
    if part not in config:
      return False
    config = config[part]
  return True


COMMANDS = _commands()


def test_the_pages_hold_commands():
  # A guard against a parser that silently finds nothing.
  modules = {argv[2] for _, argv in COMMANDS if argv[:2] == ['python', '-m']}
  assert len(COMMANDS) > 40 and {'electra_jax.main', 'electra_jax.finetune'} <= modules


def test_every_command_names_what_exists():
  modules = sorted(
    {argv[2] for _, argv in COMMANDS if argv[:2] == ['python', '-m'] and argv[2] != 'pytest'}
  )
  with concurrent.futures.ThreadPoolExecutor(4) as pool:
    flags = dict(zip(modules, pool.map(_defined_flags, modules)))
  problems = []
  for where, argv in COMMANDS:
    if argv[:2] != ['python', '-m']:
      if not (REPO / argv[1]).is_file():
        problems.append(f'{where}: {argv[1]} does not exist')
      continue
    module = argv[2]
    if module == 'pytest':  # The test files and folders it is given must exist.
      problems += [
        f'{where}: {arg} does not exist'
        for arg, before in zip(argv[3:], argv[2:])
        if not arg.startswith('-')
        and before not in ('-m', '-k', '-n', '--dist')
        and not (REPO / arg).exists()
      ]
      continue
    if not flags[module]:
      problems.append(f'{where}: python -m {module} has no --helpfull (no such command?)')
      continue
    config = _DEFAULT_CONFIG.get(module.rsplit('.', 1)[-1])
    for arg in argv[3:]:
      if arg.startswith('--config='):
        config = arg.split('=', 1)[1]
    for arg in argv[3:]:
      name = arg[2:].split('=', 1)[0] if arg.startswith('--') else None
      if name is None:
        continue
      if name.startswith('config.'):
        if config is None or not _config_has(config, name[len('config.') :]):
          problems.append(f'{where}: {module} {config}: no config key {name}')
      elif name not in flags[module] and name.removeprefix('no') not in flags[module]:
        problems.append(f'{where}: {module} has no flag --{name}')
  assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('page', _PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_between_pages_resolve(page):
  for target in re.findall(r'\]\(([^)#\s]+)(?:#[^)]*)?\)', page.read_text()):
    if '://' not in target:
      assert (page.parent / target).exists(), f'{page.name}: broken link {target}'
