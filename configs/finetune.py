"""GLUE fine-tuning hyperparameters, per model size.

  python -m electra_jax.finetune --config=configs/finetune.py:base --task=mrpc ...

Values are those of Clark et al. (ICLR 2020), Appendix A, Table 7, unless a
comment says otherwise. The size (small, base or large; default small)
picks the learning rate and the layer-wise decay; it should match the
pretrained model's size, and the CLI warns when it does not.
"""

import ml_collections
from ml_collections.config_dict import placeholder

from configs import common

# Paper, Table 7.
_LEARNING_RATE = {'small': 3e-4, 'base': 1e-4, 'large': 5e-5}
_LAYERWISE_DECAY = {'small': 0.8, 'base': 0.8, 'large': 0.9}
# Discriminator hidden sizes, for the CLI's size check.
HIDDEN_SIZE = {'small': 256, 'base': 768, 'large': 1024}


def get_config(size: str = 'small') -> ml_collections.ConfigDict:
  if size not in _LEARNING_RATE:
    raise ValueError(
      f'configs/finetune.py:{size}: the size must be one of {sorted(_LEARNING_RATE)}'
    )
  config = ml_collections.ConfigDict()
  config.size = size

  # --- Optimizer ----------------------------------------------------------------
  config.learning_rate = _LEARNING_RATE[size]
  # Layer-wise learning-rate decay: a layer at depth d of n gets
  # lr * decay ** (n + 1 - d), so the embeddings get the most decayed rate
  # (see electra_jax.optim.layerwise_lr_scales).
  config.layerwise_lr_decay = _LAYERWISE_DECAY[size]
  # The released code applies one extra factor of the decay below the head
  # (decay ** (n + 2 - d)); True reproduces it.
  config.layerwise_decay_released_off_by_one = False
  # Paper (Table 7): weight decay 0. The released code (configure_finetuning.py)
  # uses 0.01; set it to reproduce the released numbers.
  config.weight_decay = 0.0
  config.warmup_fraction = 0.1  # Linear warmup over 10% of steps, then linear decay.
  config.adam_b1 = 0.9
  config.adam_b2 = 0.999
  config.adam_eps = 1e-6
  config.adam_bias_correction = True  # False: the released optimizer (no bias correction).
  config.max_grad_norm = 1.0  # As the released code.

  # --- Data and schedule ------------------------------------------------------------
  config.batch_size = 32
  config.eval_batch_size = 128
  config.max_seq_length = 128
  # None: 3 epochs, 10 for RTE and STS-B (paper, Table 7).
  config.num_train_epochs = placeholder(float)
  config.default_epochs = 3.0
  # SQuAD: 2 epochs (paper, Table 7).
  config.task_epochs = ml_collections.ConfigDict(
    {'rte': 10.0, 'sts-b': 10.0, 'squad': 2.0, 'squad_v2': 2.0}
  )
  # Caps the training examples read (0: all), e.g. for a fixed small budget.
  config.max_train_examples = 0
  # Each batch is cut to the shortest of 16, 32, 48, 64, 96, 128, ... max_seq_length tokens
  # that holds its longest row: attention ignores padding, so outputs are the
  # same, and short GLUE sentences run shorter programs (one compile per
  # length). False pads every batch to max_seq_length, as the released code.
  config.trim_padding = True
  # N > 0 sorts each run of N batches' examples by length and shuffles the
  # epoch's batches: a batch's rows have like lengths, so trim_padding cuts it
  # shorter (SST-2's batches of 32 at 32 batches a run, 8,000-piece tokenizer:
  # 26.7 padded tokens on average, against 63.8 for random batches; its seeds
  # train in 0.35 of the time). 0 draws each batch at random, as
  # the released code does. HF transformers' group_by_length sorts runs of up to
  # 50 batches too, but keeps each run's batches together, longest first.
  config.length_grouped_batches = 0
  # Paraphrase and similarity tasks (MRPC, STS-B) also train on each pair
  # with its texts swapped, as the released code does (double_unordered).
  config.double_unordered = True

  # --- SQuAD (--task=squad, squad_v2) ---------------------------------------------------
  # As the released code's question answering (configure_finetuning.py), except
  # windows of 384 pieces (BERT's SQuAD length; the released code uses 512).
  # The paper's hyperparameter table covers only the learning rate and epochs.
  config.squad = ml_collections.ConfigDict()
  # 'released': the released code's head (its joint_prediction and
  # answerable_uses_start_logits): end scores conditioned on the start, decoded
  # with a beam, and answerability read from [CLS] and the start distribution
  # (model.SpanPredictor). 'independent': BERT's head, start and end scored on
  # their own, with the answerability from [CLS] alone, decoded from the
  # n_best_size best starts and ends.
  config.squad.head = 'released'
  config.squad.beam_size = 20  # Starts, and ends for each, in the released head's beam.
  config.squad.max_seq_length = 384  # Replaces max_seq_length for SQuAD.
  config.squad.max_query_length = 64
  config.squad.doc_stride = 128
  config.squad.n_best_size = 20  # The independent head's starts and ends.
  config.squad.max_answer_length = 30
  config.squad.answerable_weight = 0.5
  # v2.0 answers nothing when the null odds (minus the answerability logit)
  # exceed this: 0 is an even chance. Dev also reports the best threshold.
  config.squad.null_threshold = 0.0

  # --- Model ----------------------------------------------------------------------------
  config.model = ml_collections.ConfigDict()
  config.model.dtype = 'float32'
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  config.model.attention_impl = 'explicit'
  config.model.remat_policy = 'none'
  # Layers per iteration of the layer scan; the pretraining run's value is not
  # inherited. trim_padding compiles a train and an eval program per length,
  # and unrolled programs compile two to three times longer.
  config.model.scan_unroll = 1
  config.model.head_dropout_rate = 0.1  # Dropout on [CLS] before the head.
  # Keep the pretrained model's sizes and tokenizer but start from random
  # weights: the baseline that shows what pretraining is worth.
  config.random_init = False

  # --- Runs -------------------------------------------------------------------------------
  # The paper reports the median of 10 runs; seeds seed, seed + 1, ...
  config.seed = 0
  config.num_seeds = 3
  config.log_every_steps = 50
  # At a log step at least this long after the last such line: the seed's step /
  # total, steps/s, examples/s and the time left; 0 turns it off.
  config.progress_every_seconds = 30.0
  # A seed in training saves its state in OUT/seed_N/checkpoints this often
  # (0: never), and when SIGTERM arrives; a rerun of the same command goes on from
  # the newest save, bit for bit. Deleted once the seed's result is written.
  config.checkpoint = ml_collections.ConfigDict({'every_minutes': 10.0})
  config.mesh = common.get_config().mesh
  return config
