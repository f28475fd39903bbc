"""The ELECTRA pretraining step written with HF `transformers` in PyTorch.

The baseline that `python -m benchmarks.vs_hf` times beside ours, in the same
process. Made as fair as we can: the same generator and discriminator sizes,
one embedding module shared by both (as ours), 15% masking with [MASK] at 85%
of the masked positions, generator logits only at masked positions, Gumbel-max
sampling without gradient, loss MLM + 50 x BCE, AdamW with the same decay mask
and clipping; torch uses every core, or the GPU (bf16 autocast for bfloat16
configs, torch.compile where it compiles).
"""

import os
import statistics
import time

import numpy as np
import torch
import transformers

from electra_jax import config_lib, objectives
from electra_jax.data import tokenizers


def _hf_config(cfg: config_lib.EncoderConfig) -> transformers.ElectraConfig:
  return transformers.ElectraConfig(
    vocab_size=cfg.vocab_size,
    embedding_size=cfg.embedding_size,
    hidden_size=cfg.hidden_size,
    num_hidden_layers=cfg.num_layers,
    num_attention_heads=cfg.num_heads,
    intermediate_size=cfg.intermediate_size,
    max_position_embeddings=cfg.max_position_embeddings,
    type_vocab_size=cfg.type_vocab_size,
    hidden_act='gelu',
    hidden_dropout_prob=cfg.dropout_rate,
    attention_probs_dropout_prob=cfg.attention_dropout_rate,
    layer_norm_eps=cfg.layer_norm_eps,
  )


class ElectraPair(torch.nn.Module):
  """HF generator and discriminator sharing one embedding module."""

  def __init__(self, config):
    super().__init__()
    self.discriminator = transformers.ElectraForPreTraining(
      _hf_config(config_lib.discriminator_config(config))
    )
    self.generator = transformers.ElectraForMaskedLM(
      _hf_config(config_lib.generator_config(config))
    )
    self.generator.electra.embeddings = self.discriminator.electra.embeddings
    self.generator.generator_lm_head.weight = (
      self.discriminator.electra.embeddings.word_embeddings.weight
    )

  def generator_logits(self, ids, attention_mask, token_type_ids, positions):
    hidden = self.generator.electra(
      ids, attention_mask=attention_mask, token_type_ids=token_type_ids
    ).last_hidden_state
    hidden = torch.gather(hidden, 1, positions[..., None].expand(-1, -1, hidden.shape[-1]))
    return self.generator.generator_lm_head(self.generator.generator_predictions(hidden))


def _mask(ids, attention_mask, obj: objectives.Settings, generator):
  """As electra_jax.objectives.mask_tokens: round(mask_prob * non-padding tokens) per
  row, clipped to [1, max_predictions], never [CLS]/[SEP]/padding; a fraction
  mask_token_prob of them become [MASK]. `weights` marks the used slots."""
  special = obj.special
  candidates = attention_mask.bool() & (ids != special.cls) & (ids != special.sep)
  num_to_mask = (
    (attention_mask.sum(1).float() * obj.mask_prob).round().long().clamp(1, obj.max_predictions)
  )
  num_to_mask = torch.minimum(num_to_mask, candidates.sum(1))
  scores = torch.rand(ids.shape, generator=generator, device=ids.device).masked_fill(
    ~candidates, -1.0
  )
  positions = scores.topk(obj.max_predictions, dim=1).indices
  slots = torch.arange(obj.max_predictions, device=ids.device)
  weights = (slots[None, :] < num_to_mask[:, None]).float()
  labels = torch.gather(ids, 1, positions)
  use_mask = (
    torch.rand(positions.shape, generator=generator, device=ids.device) < obj.mask_token_prob
  )
  values = torch.where(use_mask, special.mask, labels)
  # Unused slots write the token that is already there.
  values = torch.where(weights > 0, values, labels)
  masked = ids.scatter(1, positions, values)
  return masked, positions, labels, weights


def pretraining_losses(
  model: ElectraPair,
  ids,
  attention_mask,
  token_type_ids,
  *,
  obj: objectives.Settings,
  generator: torch.Generator,
  with_metrics: bool = False,
):
  """(total loss, metrics) of one replaced-token-detection pass, in PyTorch.

  Metrics (as our train step logs them) only when `with_metrics`, so the timed
  baseline step does no extra work.
  """
  masked, positions, labels, weights = _mask(ids, attention_mask, obj, generator)
  logits = model.generator_logits(masked, attention_mask, token_type_ids, positions)
  nll = torch.nn.functional.cross_entropy(
    logits.flatten(0, 1), labels.flatten(), reduction='none'
  ).view(labels.shape)
  mlm_loss = (nll * weights).sum() / weights.sum()
  with torch.no_grad():
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device)
    gumbel = -torch.log(-torch.log(uniform + 1e-9) + 1e-9)
    sampled = (logits.float() / obj.temperature + gumbel).argmax(-1)
    sampled = torch.where(weights > 0, sampled, labels)
  corrupted = ids.scatter(1, positions, sampled)
  disc_logits = model.discriminator(
    corrupted, attention_mask=attention_mask, token_type_ids=token_type_ids
  ).logits
  is_replaced = (corrupted != ids).float()
  tokens = attention_mask.float()
  bce = torch.nn.functional.binary_cross_entropy_with_logits(
    disc_logits, is_replaced, reduction='none'
  )
  disc_loss = (bce * tokens).sum() / tokens.sum()
  loss = obj.gen_weight * mlm_loss + obj.disc_weight * disc_loss
  if not with_metrics:
    return loss, {}
  with torch.no_grad():
    predicted = (disc_logits > 0).float() * tokens
    replaced = is_replaced * tokens
    true_positives = (predicted * replaced).sum().item()
    metrics = {
      'mlm_loss': mlm_loss.item(),
      'disc_loss': disc_loss.item(),
      'mlm_accuracy': ((logits.argmax(-1) == labels).float() * weights).sum().item()
      / weights.sum().item(),
      'disc_precision': true_positives / max(predicted.sum().item(), 1),
      'disc_recall': true_positives / max(replaced.sum().item(), 1),
      'replaced_fraction': replaced.sum().item() / tokens.sum().item(),
    }
  return loss, metrics


def apply_update(
  optimizer: torch.optim.Optimizer, params: list, loss: torch.Tensor, max_grad_norm: float
) -> None:
  """Backward, global-norm clipping and one optimizer step, as our train step."""
  optimizer.zero_grad(set_to_none=True)
  loss.backward()
  torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
  optimizer.step()


def make_optimizer(config, model: ElectraPair) -> tuple[torch.optim.AdamW, list]:
  """AdamW with the same decay mask as ours: no decay on LayerNorm and biases."""
  params = dict(model.named_parameters())  # Deduplicated: shared tensors appear once.
  skips_decay = {n: 'LayerNorm' in n or n.endswith('bias') for n in params}
  no_decay = [p for n, p in params.items() if skips_decay[n]]
  decay = [p for n, p in params.items() if not skips_decay[n]]
  optimizer = torch.optim.AdamW(
    [
      {'params': decay, 'weight_decay': config.weight_decay},
      {'params': no_decay, 'weight_decay': 0.0},
    ],
    lr=config.learning_rate,
    betas=(config.adam_b1, config.adam_b2),
    eps=config.adam_eps,
  )
  return optimizer, list(params.values())


def run(
  config, batch: dict[str, np.ndarray], *, steps: int, warmup: int, special: tokenizers.SpecialIds
) -> list[float]:
  """Times `steps` train steps on one fixed batch after `warmup`; returns seconds per step.

  On a CUDA device when torch sees one, with bf16 autocast when the config's
  activations are bfloat16, and each network under torch.compile when it
  compiles (eager otherwise); on CPU, eager with every core.
  """
  device = 'cuda' if torch.cuda.is_available() else 'cpu'
  torch.set_num_threads(os.cpu_count() or 1)
  torch.manual_seed(config.seed)
  model = ElectraPair(config).train().to(device)
  optimizer, params = make_optimizer(config, model)
  ids, attention_mask, token_type_ids = (
    torch.from_numpy(batch[name]).long().to(device)
    for name in ('input_ids', 'attention_mask', 'token_type_ids')
  )
  rng = torch.Generator(device=device).manual_seed(config.seed)
  obj = objectives.Settings.from_config(config, special)
  autocast = torch.autocast(device, dtype=torch.bfloat16, enabled=config.model.dtype == 'bfloat16')
  compiled = device == 'cuda'
  if compiled:
    model.generator.electra = torch.compile(model.generator.electra)
    model.discriminator = torch.compile(model.discriminator)

  def step():
    with autocast:
      loss, _ = pretraining_losses(
        model, ids, attention_mask, token_type_ids, obj=obj, generator=rng
      )
    apply_update(optimizer, params, loss, config.max_grad_norm)
    if device == 'cuda':
      torch.cuda.synchronize()

  try:
    for _ in range(warmup):
      step()
  except Exception as e:  # pylint: disable=broad-except (any compiler failure)
    if not compiled:
      raise
    print(f'torch.compile failed ({type(e).__name__}: {str(e)[:200]}); timing eager')
    model.generator.electra = model.generator.electra._orig_mod  # pylint: disable=protected-access
    model.discriminator = model.discriminator._orig_mod  # pylint: disable=protected-access
    compiled = False
    for _ in range(warmup):
      step()
  times = []
  for _ in range(steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
  where = (
    f'{torch.cuda.get_device_name()}, {"compiled" if compiled else "eager"}'
    if device == 'cuda'
    else f'{torch.get_num_threads()} threads'
  )
  print(
    f'HF transformers {transformers.__version__} / torch {torch.__version__} ({where}, '
    f'{"bf16 autocast" if config.model.dtype == "bfloat16" else "float32"}): median step '
    f'{statistics.median(times) * 1e3:.1f} ms (min {min(times) * 1e3:.1f}, '
    f'max {max(times) * 1e3:.1f})'
  )
  return times
