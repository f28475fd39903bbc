"""Configs carry the paper's values; bad input fails early with the key's name."""

import subprocess
import sys

import pytest

from configs import base, large, small, tiny
from electra_jax import config_lib
from tests.conftest import REPO


def test_paper_hyperparameters():
  s, b, g = small.get_config(), base.get_config(), large.get_config()
  for config, layers, hidden, embed, seq, batch, lr, steps in (
    (s, 12, 256, 128, 128, 128, 5e-4, 1_000_000),
    (b, 12, 768, 768, 512, 256, 2e-4, 766_000),
    (g, 24, 1024, 1024, 512, 2048, 2e-4, 400_000),
  ):
    config_lib.validate(config, check_data=False)
    assert (
      config.model.num_layers,
      config.model.hidden_size,
      config.model.embedding_size,
      config.max_seq_length,
      config.batch_size,
      config.learning_rate,
      config.num_train_steps,
    ) == (layers, hidden, embed, seq, batch, lr, steps)
    disc = config_lib.discriminator_config(config)
    assert disc.num_heads == hidden // 64 and disc.intermediate_size == 4 * hidden
    assert (config.warmup_steps, config.weight_decay, config.adam_eps) == (10_000, 0.01, 1e-6)
    assert config.model.dropout_rate == 0.1
    assert (config.objective.gen_weight, config.objective.disc_weight) == (1.0, 50.0)
  assert s.objective.mask_prob == b.objective.mask_prob == 0.15
  assert g.objective.mask_prob == 0.25
  # Generator size: 1/4 (small, large) and 1/3 (base) of the discriminator.
  assert config_lib.generator_config(s).hidden_size == 64
  assert config_lib.generator_config(b).hidden_size == 256
  assert config_lib.generator_config(g).hidden_size == 256
  assert config_lib.generator_config(s).num_heads == 1
  narrow_heads = s.copy_and_resolve_references()
  narrow_heads.model.attention_head_size = 32  # Twice the heads in both networks.
  assert config_lib.discriminator_config(narrow_heads).num_heads == 8
  assert config_lib.generator_config(narrow_heads).num_heads == 2
  assert config_lib.max_predictions_per_seq(s) == 19  # int((0.15 + 0.005) * 128)
  # Large shards its parameters and optimizer state over every device.
  assert (g.mesh.data, g.mesh.fsdp, g.mesh.tensor) == (1, -1, 1)
  assert (s.mesh.data, s.mesh.fsdp, b.mesh.data, b.mesh.fsdp) == (-1, 1, -1, 1)
  config_lib.validate(tiny.get_config(), check_data=False)


@pytest.mark.parametrize(
  'key, value, expected',
  [
    ('objective.mask_prob', 0.0, 'config.objective.mask_prob'),
    ('objective.mask_prob', 1.5, 'config.objective.mask_prob'),
    ('model.dtype', 'float16', 'config.model.dtype'),
    ('batch_size', 0, 'config.batch_size'),
    ('max_seq_length', 1024, 'config.max_seq_length'),
    ('model.hidden_size', 100, 'config.model.hidden_size'),
    ('model.attention_head_size', 0, 'config.model.attention_head_size'),
    ('model.attention_head_size', 48, 'config.model.hidden_size'),
    ('checkpoint.every_steps', 0, 'config.checkpoint.every_steps'),
    ('checkpoint.max_failed_saves_in_a_row', 0, 'config.checkpoint.max_failed_saves_in_a_row'),
    ('checkpoint.every_minutes', -1.0, 'config.checkpoint.every_minutes'),
    ('mesh.dcn_data', 0, 'config.mesh.dcn_data'),
    ('model.scan_unroll', 0, 'config.model.scan_unroll'),
    ('model.scan_unroll', 3, 'config.model.scan_unroll'),  # tiny has 2 layers.
    ('objective.name', 'bert', 'config.objective.name'),
    ('model.embedding_sharing', 'shared', 'config.model.embedding_sharing'),
    ('model.position_embedding_init', 'rotary', 'config.model.position_embedding_init'),
    ('model.generator_layers_fraction', 0.0, 'config.model.generator_layers_fraction'),
    # One transformer for both needs a full-size generator.
    ('model.tie_generator_to_discriminator', True, 'config.model.tie_generator_to_discriminator'),
  ],
)
def test_bad_values_name_the_key(key, value, expected):
  config = tiny.get_config()
  target = config
  *path, last = key.split('.')
  for part in path:
    target = target[part]
  target[last] = value
  with pytest.raises(config_lib.ConfigError, match=expected.replace('.', r'\.')):
    config_lib.validate(config, check_data=False)


def _main(*args):
  return subprocess.run(
    [sys.executable, '-m', 'electra_jax.main', '--config=configs/tiny.py', *args],
    cwd=REPO,
    capture_output=True,
    text=True,
    timeout=300,
  )


def test_cli_unknown_key(tmp_path):
  result = _main(f'--workdir={tmp_path}', '--config.model.no_such_key=3')
  assert result.returncode == 2
  assert '--config.model.no_such_key: no such config key' in result.stderr
  assert 'Traceback' not in result.stderr


def test_cli_bad_value(tmp_path, wiki_glob):
  result = _main(
    f'--workdir={tmp_path}', f'--config.data.corpus={wiki_glob}', '--config.objective.mask_prob=0'
  )
  assert result.returncode == 2
  assert 'error: config.objective.mask_prob: must be in (0, 1], got 0.0' in result.stderr
  assert 'Traceback' not in result.stderr


def test_cli_needs_exactly_one_input(tmp_path, wiki_glob):
  for args in ([], [f'--config.data.corpus={wiki_glob}', f'--config.data.prepared_dir={tmp_path}']):
    result = _main(f'--workdir={tmp_path}', *args)
    assert result.returncode == 2
    assert 'error: config.data.corpus: name the input with exactly one of' in result.stderr


def test_cli_missing_corpus(tmp_path):
  result = _main(f'--workdir={tmp_path}', f'--config.data.corpus={tmp_path}/nothing/*.txt')
  assert result.returncode == 2
  assert (
    f"error: corpus source '{tmp_path}/nothing/*.txt': no files match '{tmp_path}/nothing/*.txt'"
  ) in result.stderr
  assert 'Traceback' not in result.stderr


def test_cli_cudnn_attention_needs_a_gpu(tmp_path, wiki_glob):
  # JAX's own error here is a traceback ending in 'cuDNN is not detected'.
  result = _main(
    f'--workdir={tmp_path}',
    f'--config.data.corpus={wiki_glob}',
    '--config.model.attention_impl=cudnn',
    '--config.model.attention_dropout_rate=0',
    '--config.model.dtype=bfloat16',
  )
  assert result.returncode == 2, result.stderr[-2000:]
  assert (
    "error: config.model.attention_impl: 'cudnn' runs on NVIDIA GPUs only, and this run's "
    "devices are cpu; use 'xla' (fused, on any device) or 'explicit'"
  ) in result.stderr
  assert 'Traceback' not in result.stderr


def test_cudnn_attention_needs_bfloat16():
  config = tiny.get_config()
  config.model.attention_impl, config.model.attention_dropout_rate = 'cudnn', 0.0
  with pytest.raises(config_lib.ConfigError, match=r'config\.model\.dtype: cuDNN flash'):
    config_lib.validate(config, check_data=False)
  config.model.dtype = 'bfloat16'
  config_lib.validate(config, check_data=False)
