"""The analytic FLOPs formula against XLA's cost analysis of the train step."""

import types

import jax
import pytest

from configs import small
from electra_jax import flops, sharding, train
from electra_jax.data import tokenizers
from tests.conftest import run_module


def _step_flops(config) -> float:
  """XLA's count for the lowered step: the program as traced, before compilation
  (which takes six times longer and moves the count by under 3%)."""
  mesh = sharding.make_mesh(config.mesh, jax.devices()[:1])
  with jax.set_mesh(mesh):
    lowered, _ = train.lower_abstract_train_step(config, mesh, tokenizers.TRAINED_SPECIAL_IDS)
  analysis = lowered.cost_analysis()
  return (analysis[0] if isinstance(analysis, list) else analysis)['flops']


@pytest.mark.parametrize(
  'overrides',
  [
    dict(),  # ELECTRA-Small shapes: embedding 128 != hidden 256, 1/4 generator.
    dict(max_seq_length=256, generator_hidden_fraction=1.0),
    dict(objective='electra_15'),
    dict(objective='mlm'),
    dict(objective='replace_mlm'),
    dict(objective='all_tokens_mlm'),
    dict(objective='electric'),
  ],
)
def test_formula_matches_xla_cost_analysis(overrides):
  config = small.get_config()
  config.batch_size = 4
  config.model.num_layers = 1  # One layer of each network keeps the compile short.
  # Unrolled: XLA's cost analysis counts a while loop's body (the nn.scan over
  # layers) once, not once per iteration.
  config.model.scan_layers = False
  config.max_seq_length = overrides.get('max_seq_length', 128)
  config.model.generator_hidden_fraction = overrides.get('generator_hidden_fraction', 0.25)
  config.objective.name = overrides.get('objective', 'electra')
  analytic = flops.train_step_flops(config)
  xla = _step_flops(config)
  print(f'analytic {analytic:.4e} vs XLA {xla:.4e}: ratio {analytic / xla:.3f}')
  # XLA also counts elementwise work (LayerNorm, GELU, softmax, Adam), which
  # the model-FLOPs convention leaves out: the formula must cover at least 85%
  # of XLA's count and never exceed it.
  assert 0.85 * xla < analytic <= xla


def test_peak_table():
  assert flops.device_peak_flops('TPU v5 lite') == 197e12
  assert flops.device_peak_flops('TPU v5p') == 459e12
  assert flops.device_peak_flops('NVIDIA H100 80GB HBM3') == 989e12
  # A variant is matched before its family's SXM figure.
  assert flops.device_peak_flops('NVIDIA H100 PCIe') == 756e12
  assert flops.device_peak_flops('NVIDIA A100-SXM4-80GB') == 312e12
  assert flops.device_peak_flops('cpu') is None


def test_peak_of_a_device_list():
  # Accelerators: the listed peak, once per device.
  chips = [types.SimpleNamespace(device_kind='TPU v5 lite', process_index=i // 4) for i in range(8)]
  assert flops.peak_flops(chips) == (8 * 197e12, 'listed bf16 peak')
  # CPU devices of one process share its cores: one measured peak, not one per device.
  peak, source = flops.peak_flops(jax.devices())
  assert source == 'measured f32 matmul peak'
  assert 1e9 < peak < 1e14


def test_command_prints_the_count_and_the_steps_that_spend_a_budget():
  overrides = ['--config.model.num_layers=4', '--config.objective.name=mlm']
  config = small.get_config()
  config.model.num_layers = 4
  config.objective.name = 'mlm'
  expected = flops.train_step_flops(config)
  per_step, steps = (
    run_module('electra_jax.flops', '--config=configs/small.py', *overrides, *budget)
    for budget in ([], ['--budget_tflop=600'])
  )
  assert per_step.returncode == 0 and steps.returncode == 0, per_step.stderr + steps.stderr
  assert float(per_step.stdout) == expected
  assert int(steps.stdout) == round(600e12 / expected)
