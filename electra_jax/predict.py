"""Shows what the pretrained network sees in a text.

  python -m electra_jax.predict --workdir=DIR "The chef cooked the meal."
  python -m electra_jax.predict --workdir=DIR --corrupt "The chef cooked the meal."

For a discriminator (objectives electra and electra_15), each token with the
probability it was replaced. --workdir is a pretraining workdir or an HF
ELECTRA discriminator directory. With --corrupt (pretraining workdirs, which
keep the generator), the text is first corrupted as in pretraining: positions
are masked, the generator samples replacements, and the table shows which
tokens were replaced against which ones the discriminator flags (probability
> 0.5).

For a masked LM (objectives mlm, replace_mlm, all_tokens_mlm), the text is
always corrupted as in pretraining ([MASK], or the generator's samples), and
the table shows, at each masked position, the network's best guess and the
probability it gives the original token.
"""

import sys

from absl import flags
import jax
import jax.numpy as jnp
import numpy as np

from electra_jax import cli, config_lib, errors, objectives, pretrained
from electra_jax.data import tokenizers

_WORKDIR = flags.DEFINE_string('workdir', None, 'A pretraining workdir or an HF directory.')
_CORRUPT = flags.DEFINE_boolean('corrupt', False, 'Corrupt the text with the generator first.')
_SEED = flags.DEFINE_integer('seed', 0, 'Key for masking and sampling with --corrupt.')
_MASK_PROB = flags.DEFINE_float(
  'mask_prob', None, "Fraction masked with --corrupt (default: the run's objective.mask_prob)."
)
flags.mark_flags_as_required(['workdir'])

_BAR_WIDTH = 20


def _row(tokenizer: tokenizers.Tokenizer, text: str, max_length: int) -> dict[str, np.ndarray]:
  ids = [tokenizer.cls_id, *tokenizer.encode([text])[0][: max_length - 2], tokenizer.sep_id]
  ids = np.asarray([ids], np.int32)
  return {'input_ids': ids, 'attention_mask': np.ones_like(ids), 'token_type_ids': ids * 0}


def _bar(p: float, color: bool) -> str:
  bar = '█' * int(round(p * _BAR_WIDTH))
  return f'\033[31m{bar}\033[0m' if color and p > 0.5 else bar


def describe(
  source: pretrained.Pretrained,
  text: str,
  *,
  corrupt: bool,
  seed: int = 0,
  mask_prob: float | None = None,
  color: bool = False,
) -> str:
  """The table for one text."""
  tokenizer = source.tokenizer
  model = source.pretraining_model()
  batch = _row(tokenizer, text, source.discriminator_cfg.max_position_embeddings)
  variables = {'params': source.params}
  original = batch['input_ids'][0]
  if corrupt or source.objective not in objectives.RTD_OBJECTIVES:
    config = source.config
    if mask_prob is not None:
      config = config.copy_and_resolve_references()
      config.objective.mask_prob = mask_prob
    obj = objectives.Settings.from_config(config, tokenizer.special_ids, tokenizer)
    out = objectives.pretraining_outputs(
      source.params,
      jax.tree.map(jnp.asarray, batch),
      jax.random.key(seed),
      model=model,
      obj=obj,
      deterministic=True,
    )
    shown = np.asarray(out.corruption.corrupted)[0]
    if source.objective not in objectives.RTD_OBJECTIVES:
      return _describe_masked_lm(tokenizer, original, shown, out)
    is_replaced = np.asarray(out.corruption.is_replaced)[0]
    logits = np.asarray(out.main_logits)[0]
  else:
    shown, is_replaced = original, np.zeros_like(original, bool)
    if source.objective == 'electric':
      obj = objectives.Settings.from_config(source.config, tokenizer.special_ids, tokenizer)
      logits = objectives.electric_logits(
        source.params, jax.tree.map(jnp.asarray, batch), model=model, obj=obj
      )
    else:
      logits = model.apply(
        variables,
        batch['input_ids'],
        batch['token_type_ids'],
        batch['attention_mask'],
        True,
        method=model.discriminator_logits,
      )
    logits = np.asarray(logits)[0]
  probs = 1 / (1 + np.exp(-logits))
  names, originals = tokenizer.tokens(shown), tokenizer.tokens(original)
  width = max(len(t) for t in names) + 2
  header = f'{"#":>4}  {"token":<{width}}{"p(replaced)":>11}'
  if corrupt:
    header += f'  {"":<{_BAR_WIDTH}}  {"replaced?":<18} flagged?'
  lines = [header]
  for i, (name, p) in enumerate(zip(names, probs)):
    line = f'{i:>4}  {name:<{width}}{p:>11.3f}  {_bar(p, color):<{_BAR_WIDTH}}'
    if corrupt:
      was = f'yes (was {originals[i]})' if is_replaced[i] else 'no'
      line += f'  {was:<18} {"yes" if p > 0.5 else "no"}'
    lines.append(line)
  if corrupt:
    flagged = probs > 0.5
    lines.append(
      f'{int(is_replaced.sum())} of {len(names)} tokens replaced; the discriminator '
      f'flags {int(flagged.sum())}, {int((flagged & is_replaced).sum())} of them '
      'rightly'
    )
  return '\n'.join(lines)


def _describe_masked_lm(
  tokenizer: tokenizers.Tokenizer,
  original: np.ndarray,
  shown: np.ndarray,
  out: objectives.PretrainingOutputs,
) -> str:
  """The masked LM's table: its guess and p(original) at each masked position."""
  masked = out.corruption.masked
  used = np.asarray(masked.weights)[0] > 0
  positions = np.asarray(masked.positions)[0][used]
  logits = np.asarray(out.main_logits, np.float64)[0][used]
  probs = np.exp(logits - logits.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  guesses = dict(
    zip(
      positions.tolist(), zip(probs.argmax(-1), probs[np.arange(len(probs)), original[positions]])
    )
  )
  names, originals = tokenizer.tokens(shown), tokenizer.tokens(original)
  width = max(len(t) for t in names + originals) + 2
  lines = [f'{"#":>4}  {"input":<{width}}{"original":<{width}}{"guess":<{width}}p(original)']
  right = 0
  for i, name in enumerate(names):
    if i not in guesses:
      lines.append(f'{i:>4}  {name}')
      continue
    guess, p = guesses[i]
    right += int(guess == original[i])
    lines.append(
      f'{i:>4}  {name:<{width}}{originals[i]:<{width}}'
      f'{tokenizer.tokens([int(guess)])[0]:<{width}}{p:.3f}'
    )
  lines.append(
    f'{len(guesses)} of {len(names)} tokens masked; the network guesses {right} of them right'
  )
  return '\n'.join(lines)


def main(argv: list[str]) -> None:
  texts = argv[1:]
  if not texts:
    raise errors.UserError('give one or more texts to examine, each as one argument')
  source = pretrained.load(_WORKDIR.value)
  if source.tokenizer is None:
    raise tokenizers.TokenizerError(f'{_WORKDIR.value}: has no tokenizer (vocab.txt)')
  if source.objective in objectives.RTD_OBJECTIVES and 'discriminator_head' not in source.params:
    raise config_lib.ConfigError(
      f'{_WORKDIR.value}: holds no discriminator head (an HF '
      'ElectraModel or a fine-tuned model); use a pretraining '
      'workdir or an ElectraForPreTraining directory'
    )
  if _CORRUPT.value and source.config is None:
    raise config_lib.ConfigError(
      '--corrupt needs the generator, which only pretraining workdirs keep'
    )
  for text in texts:
    print(
      describe(
        source,
        text,
        corrupt=_CORRUPT.value,
        seed=_SEED.value,
        mask_prob=_MASK_PROB.value,
        color=sys.stdout.isatty(),
      )
    )


if __name__ == '__main__':
  cli.run(main, takes_arguments=True)
