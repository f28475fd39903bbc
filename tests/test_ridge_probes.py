"""Linear probes: the ridge fit and its leave-one-out penalty choice against
brute force, the effective rank beside them, and pooled layer features that
padding does not change. The CLI on a pretrained model is tested in
test_finetune.py, beside the model it reuses."""

import numpy as np
import pytest

from configs import finetune as finetune_configs
from configs import tiny
from electra_jax import config_lib
from electra_jax.finetune import ridge_probes


def test_leave_one_out_errors_match_refitting_without_each_row():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(30, 6)) * rng.uniform(0.1, 10, size=6)
  targets = x[:, :2] @ rng.normal(size=(2, 3)) + rng.normal(size=(30, 3))
  penalties = np.array([1e-3, 1e-1, 1.0, 10.0])
  fitted = ridge_probes.fit_ridge(x, targets, penalties)

  xs = (x - x.mean(0)) / x.std(0)  # The fit's standardisation, held fixed.
  for penalty, loo_error in zip(penalties, fitted.loo_errors):
    squared = []
    for i in range(len(x)):
      keep = np.arange(len(x)) != i
      xk, yk = xs[keep], targets[keep]
      # Intercept unpenalised: centre on the kept rows; penalty times all N rows.
      w = np.linalg.solve(
        (xk - xk.mean(0)).T @ (xk - xk.mean(0)) + penalty * len(x) * np.eye(6),
        (xk - xk.mean(0)).T @ (yk - yk.mean(0)),
      )
      prediction = (xs[i] - xk.mean(0)) @ w + yk.mean(0)
      squared.append(np.square(targets[i] - prediction))
    np.testing.assert_allclose(loo_error, np.mean(squared), rtol=1e-9)
  assert fitted.penalty == penalties[np.argmin(fitted.loo_errors)]


def test_ridge_recovers_a_linear_map_and_ignores_constant_features():
  rng = np.random.default_rng(1)
  x = np.concatenate([rng.normal(size=(500, 4)), np.full((500, 1), 3.0)], axis=1)
  targets = x[:, :4] @ np.array([[1.0], [-2.0], [0.5], [0.0]]) + 4.0
  fitted = ridge_probes.fit_ridge(x, targets + 0.01 * rng.normal(size=targets.shape))
  test = np.concatenate([rng.normal(size=(50, 4)), np.full((50, 1), 3.0)], axis=1)
  np.testing.assert_allclose(
    fitted.predict(test), test[:, :4] @ np.array([[1.0], [-2.0], [0.5], [0.0]]) + 4.0, atol=0.01
  )
  assert fitted.penalty == ridge_probes._PENALTY_GRID[0]  # Little noise: the least shrinkage.
  # A feature that never varies predicts the mean, not NaN.
  constant = ridge_probes.fit_ridge(np.ones((10, 3)), np.arange(10.0)[:, None])
  np.testing.assert_allclose(constant.predict(np.ones((2, 3))), 4.5)


def test_effective_rank_tells_a_collapsed_layer_from_a_spread_one():
  # k orthogonal directions of equal spread: exactly k, in any basis.
  rotation = np.linalg.qr(np.random.default_rng(2).normal(size=(8, 8)))[0]
  for k in (1, 2, 5):
    rows = np.concatenate([np.eye(8)[:k], -np.eye(8)[:k]]) @ rotation
    assert ridge_probes.effective_rank(rows + 3.0) == pytest.approx(k)
  # One direction of spread 10 beside nine of spread 1 still counts the nine,
  # though it holds 92% of the variance: exp of the singular values' entropy,
  # -(10/19) log(10/19) - 9 (1/19) log(1/19), is 5.655.
  spreads = np.r_[10.0, np.ones(9)]
  rows = np.concatenate([np.diag(spreads), -np.diag(spreads)])
  assert ridge_probes.effective_rank(rows) == pytest.approx(5.655, abs=1e-3)
  rng = np.random.default_rng(3)
  # Isotropic samples use nearly all 64 directions.
  assert 60 < ridge_probes.effective_rank(rng.normal(size=(2000, 64))) <= 64
  # Rows on one line, with a large shared offset (a layer's bias), and a trace
  # of noise across the other 63 directions: one direction.
  line = 50.0 + rng.normal(size=(2000, 1)) * rng.normal(size=64)
  assert ridge_probes.effective_rank(line + 1e-6 * rng.normal(size=(2000, 64))) < 1.01
  # A vector that is the same in every row has no direction.
  assert ridge_probes.effective_rank(np.ones((10, 4))) is None


def test_pooled_features_do_not_depend_on_padding():
  # Attention ignores padding and the mean leaves it out, so a row's features
  # are the same padded to 32 tokens as to 16.
  config = finetune_configs.get_config()
  config.max_seq_length = 32
  config.trim_padding = False
  config.eval_batch_size = 8
  cfg = config_lib.discriminator_config(tiny.get_config())
  rng = np.random.default_rng(0)
  ids = np.zeros((8, 32), np.int32)
  for row, length in enumerate(rng.integers(3, 16, size=8)):
    ids[row, :length] = rng.integers(5, 1000, size=length)
  data = {
    'input_ids': ids,
    'attention_mask': (ids > 0).astype(np.int32),
    'token_type_ids': np.zeros_like(ids),
  }
  feats = ridge_probes.layer_features(config, cfg, None, {'long': data})['long']
  config.max_seq_length = 16
  short = ridge_probes.layer_features(
    config, cfg, None, {'short': {k: v[:, :16] for k, v in data.items()}}
  )['short']
  assert feats.shape == (8, cfg.num_layers + 1, 2, cfg.hidden_size)
  np.testing.assert_allclose(feats, short, rtol=1e-4, atol=1e-5)
  # The two poolings, and the layers, give different features.
  assert np.abs(feats[:, :, 0] - feats[:, :, 1]).max(axis=-1).min() > 1e-2
  assert np.abs(np.diff(feats[:, :, 1], axis=1)).max(axis=-1).min() > 1e-2
