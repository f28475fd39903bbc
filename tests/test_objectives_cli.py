"""Every objective through the CLI: it trains, resumes bit for bit after SIGKILL, exports,
and a workdir of one objective is refused as another."""

import random
import signal
import time

import numpy as np
import pytest

from tests.conftest import run_module
from tests.main_runs import (
  checkpoint_params,
  every_step_args,
  last_per_step,
  logged_steps,
  run_main,
  start_main,
  wait_for_step,
)

# One layer per network: the compile is what each of the runs below mostly spends.
_STEPS = (
  '--config.num_train_steps=10',
  '--config.checkpoint.every_steps=5',
  '--config.model.num_layers=1',
)


@pytest.mark.parametrize(
  'objective, extra',
  [
    # Heavy, one to two minutes each, so that the default run stays near its 15
    # minutes: test_checkpointing resumes ELECTRA through the CLI, test_export
    # trains Replace MLM through it and evaluates and predicts with that masked
    # LM, and test_objective_family checks each objective's step in process.
    # BERT with whole-word masking, over the trained sentencepiece tokenizer's words.
    pytest.param('mlm', ('--config.objective.masking=whole_word',), marks=pytest.mark.heavy),
    # ELECTRA 15% runs ELECTRA's step with other loss weights.
    pytest.param('electra_15', (), marks=pytest.mark.heavy),
    pytest.param(
      'replace_mlm', ('--config.model.embedding_sharing=gdes',), marks=pytest.mark.heavy
    ),
    pytest.param('all_tokens_mlm', (), marks=pytest.mark.heavy),
    pytest.param('electric', ('--config.objective.temperature=2.0',), marks=pytest.mark.heavy),
  ],
)
def test_objective_trains_resumes_exactly_and_exports(tmp_path, prepared_tiny, objective, extra):
  args = every_step_args(prepared_tiny, *_STEPS, f'--config.objective.name={objective}', *extra)
  result = run_main(tmp_path / 'a', *args)
  assert result.returncode == 0, result.stderr[-3000:]

  process, log = start_main(tmp_path / 'b', *args)
  wait_for_step(process, log, 5)  # Step 5 is saved; the kill comes a moment later.
  time.sleep(random.uniform(0, 0.5))
  process.send_signal(signal.SIGKILL)
  assert process.wait() == -signal.SIGKILL, 'the run finished before it could be killed'
  print('killed after step', max(logged_steps(log)))
  result = run_main(tmp_path / 'b', *args)
  assert result.returncode == 0, result.stderr[-3000:]

  a, b = last_per_step(tmp_path / 'a'), last_per_step(tmp_path / 'b')
  assert set(a) == set(b) and 'train/loss' in a
  for tag in a:
    assert a[tag] == b[tag], tag
  for x, y in zip(
    checkpoint_params(tmp_path / 'a', 10), checkpoint_params(tmp_path / 'b', 10), strict=True
  ):
    np.testing.assert_array_equal(x, y)

  exported = run_module(
    'electra_jax.export', f'--workdir={tmp_path / "a"}', f'--output={tmp_path / "hf"}'
  )
  assert exported.returncode == 0, exported.stderr[-3000:]
  assert (tmp_path / 'hf' / 'model.safetensors').exists()

  if objective == 'electric':
    # Its token scores need the cloze model's noise odds, with and without corruption.
    for corrupt in ('--nocorrupt', '--corrupt'):
      shown = run_module('electra_jax.predict', f'--workdir={tmp_path / "a"}', corrupt, 'A day.')
      assert shown.returncode == 0 and 'p(replaced)' in shown.stdout, shown.stderr[-3000:]
    # No HF class holds the two towers.
    refused = run_module(
      'electra_jax.export',
      f'--workdir={tmp_path / "a"}',
      f'--output={tmp_path / "hf2"}',
      '--generator',
    )
    assert refused.returncode == 2 and 'two-tower cloze generator' in refused.stderr

  if objective == 'mlm':
    # Resuming as another objective, or starting from it, is refused, naming both.
    other = run_main(tmp_path / 'a', *every_step_args(prepared_tiny, '--config.num_train_steps=20'))
    assert other.returncode == 2
    assert (
      'error: objective.name: ' in other.stderr
      and "objective 'mlm'" in other.stderr
      and "objective 'electra'" in other.stderr
    ), other.stderr[-2000:]
    other = run_main(
      tmp_path / 'c',
      *every_step_args(
        prepared_tiny,
        '--config.num_train_steps=2',
        f'--config.checkpoint.init_from={tmp_path / "a"}',
      ),
    )
    assert other.returncode == 2
    assert "was pretrained with objective 'mlm', this run with 'electra'" in other.stderr, (
      other.stderr[-2000:]
    )
