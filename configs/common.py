"""Hyperparameters shared by every ELECTRA size.

Values are those of Clark et al., "ELECTRA: Pre-training Text Encoders as
Discriminators Rather Than Generators" (ICLR 2020), Appendix A, Table 6, unless
a comment says otherwise. The size files (tiny/small/base/large) start from
`get_config()` here and override only what differs. Derived values
(`max_predictions_per_seq`, generator widths, attention heads) are computed
once, in `electra_jax.config_lib`, never stored here.
"""

import ml_collections
from ml_collections.config_dict import placeholder


def get_config() -> ml_collections.ConfigDict:
  config = ml_collections.ConfigDict()

  config.seed = 0
  # Global batch over all devices and processes.
  config.batch_size = 128
  config.max_seq_length = 128
  config.num_train_steps = 1_000_000

  # --- Optimizer (paper, Table 6) ---------------------------------------------
  config.learning_rate = 5e-4
  config.warmup_steps = 10_000  # Linear warmup, then linear decay to 0.
  config.weight_decay = 0.01  # Not applied to LayerNorm parameters or biases.
  config.adam_b1 = 0.9
  config.adam_b2 = 0.999
  config.adam_eps = 1e-6
  config.max_grad_norm = 1.0  # Global-norm clipping, as the released code.
  # The released code's AdamWeightDecayOptimizer (inherited from BERT) has no
  # bias correction. True is standard AdamW; False reproduces the original.
  config.adam_bias_correction = True

  # --- Pretraining objective ---------------------------------------------------
  config.objective = ml_collections.ConfigDict()
  # 'electra': replaced token detection, the discriminator learning from every
  # token. The paper's ablations (Section 3.2, Table 5), all at equal compute
  # in benchmarks/objective_ablation.sh:
  #   'electra_15': the discriminator's loss counts only the masked positions;
  #   'mlm': BERT, one full-size masked LM, with no generator;
  #   'replace_mlm': a full-size masked LM reading generator samples instead
  #     of [MASK] (its MLM loss plus the generator's);
  #   'all_tokens_mlm': as replace_mlm, predicting every token through the
  #     paper's copy mechanism.
  # The full-size network is what fine-tuning and export keep. The last three
  # are not in the released code, which has 'electra' and, as
  # electra_objective=False, 'mlm'. And
  #   'electric': Electric (Clark et al. 2020b), the released code's
  #     electric_objective with two_tower_generator: the discriminator's output is
  #     an energy, trained by noise-contrastive estimation against a two-tower
  #     cloze generator (docs/pretraining.md).
  config.objective.name = 'electra'
  # The released code's uniform_generator: samples uniformly from the
  # vocabulary, with no generator network.
  config.objective.uniform_generator = False
  # The released code's disallow_correct: a sample never equals the original.
  config.objective.disallow_correct = False
  config.objective.mask_prob = 0.15  # Paper: 15% (25% for Large).
  # Of the masked positions, this fraction becomes [MASK]; the rest keep their
  # original token (the released code's behaviour; ELECTRA never uses BERT's
  # random-token replacement).
  config.objective.mask_token_prob = 0.85
  # 'token' masks pieces independently, as the paper. 'whole_word' masks every
  # piece of a chosen word (a WordPiece word: a piece and the '##' pieces after
  # it; a sentencepiece word: a piece starting with '▁' and those after it), as
  # BERT's later whole-word-masking models; the number masked keeps the same
  # formula, filled with whole words (a word that would overshoot is skipped).
  config.objective.masking = 'token'
  # Loss = gen_weight * MLM + disc_weight * BCE. The masked-LM objectives
  # weigh their full-size network's cross-entropy 1, as the generator's.
  config.objective.gen_weight = 1.0
  config.objective.disc_weight = 50.0  # Paper: lambda = 50.
  # Generator sampling temperature; the paper samples at 1. Short CPU runs
  # (benchmarks/pretraining_gain.sh) start at 3, then go on at 1: from the start
  # at 1, the discriminator of a small model stays on the constant-prediction
  # plateau for thousands of steps.
  config.objective.temperature = 1.0

  # --- Model -----------------------------------------------------------------
  config.model = ml_collections.ConfigDict()
  # Must equal the tokenizer's vocabulary size; 30522 is BERT's uncased
  # WordPiece vocabulary, which the released ELECTRA models use.
  config.model.vocab_size = 30522
  config.model.embedding_size = 128
  config.model.hidden_size = 256
  config.model.num_layers = 12
  # Attention heads are hidden_size / attention_head_size (at least one) and the
  # FFN is 4 x hidden_size, as in every ELECTRA size (the released code's
  # max(1, hidden_size // 64)); config_lib derives both, for the generator from
  # its own width, so a 64-wide generator has one head.
  config.model.attention_head_size = 64
  config.model.max_position_embeddings = 512
  config.model.type_vocab_size = 2
  config.model.dropout_rate = 0.1
  config.model.attention_dropout_rate = 0.1
  config.model.layer_norm_eps = 1e-12
  config.model.initializer_range = 0.02
  # The position table's initial values. 'normal': rows from N(0,
  # initializer_range), as the paper and the released code. 'sinusoidal': the
  # sin/cos table of Vaswani et al. (2017) at the same root-mean-square, so
  # that neighbouring positions start alike. Not in the paper: at CPU scale it
  # took BERT off the masked LM's token-frequency plateau about 700 steps
  # sooner (docs/experiments/2026-11-25_objective_ablation.md).
  config.model.position_embedding_init = 'normal'
  # Generator width as a fraction of the discriminator's (hidden size, heads
  # and FFN all scale). Paper, Section 3.2 and Table 6: 1/4 for Small and
  # Large, 1/3 for Base. The released ELECTRA-Small checkpoint used 1.0.
  config.model.generator_hidden_fraction = 0.25
  # Generator depth as a fraction of the discriminator's (the released code's
  # generator_layers; the paper keeps the depth, 1.0).
  config.model.generator_layers_fraction = 1.0
  # One full-size transformer serves as generator and discriminator, each with
  # its own head: the released code's untied_generator=False (paper, Section
  # 3.1, "weight sharing"). Needs both fractions at 1.0 and tied embeddings.
  config.model.tie_generator_to_discriminator = False
  # How the generator and discriminator share embeddings. 'tied': one module
  # (word, position and token-type tables and their LayerNorm), as the paper
  # (Section 3.1) and the released code. 'untied': one each. 'gdes':
  # DeBERTa-v3's gradient-disentangled sharing (He et al. 2021): the
  # discriminator reads stop_gradient(the generator's tables) + residual tables
  # of its own (initialised to zero) under its own LayerNorm, so the MLM loss
  # trains the shared tables and the discriminator's loss only its residual;
  # export folds the residual in.
  config.model.embedding_sharing = 'tied'
  # Activation dtype; parameters and optimizer state stay float32.
  config.model.dtype = 'float32'
  # nn.scan over layers keeps compile time flat in depth; False unrolls.
  config.model.scan_layers = True
  # Layers per iteration of that scan. num_layers unrolls it fully: faster
  # steps, compile time growing with depth, and the same stacked parameters
  # (checkpoints and sharding unchanged). On CPU only full unrolling paid;
  # 2-6 layers per iteration were slower than 1
  # (docs/experiments/2026-11-22_cpu_step.md).
  config.model.scan_unroll = 1
  # Rematerialisation of each encoder layer: 'none', 'full' or
  # 'dots_saveable' (keep matmul outputs, recompute the rest).
  config.model.remat_policy = 'none'
  # 'explicit': einsum attention with float32 softmax and attention dropout.
  # 'xla' / 'cudnn': jax.nn.dot_product_attention (no attention dropout, so
  # these require attention_dropout_rate = 0; 'cudnn', flash attention on an
  # NVIDIA GPU, also requires dtype = 'bfloat16').
  config.model.attention_impl = 'explicit'

  # --- Input -----------------------------------------------------------------
  # Training reads examples prepared by `python -m electra_jax.prepare_data`
  # (see docs/data.md). Either name such a directory, or give a corpus spec and the
  # main job prepares it into WORKDIR/data first (resuming if interrupted).
  config.data = ml_collections.ConfigDict()
  config.data.prepared_dir = ''
  # Comma-separated sources, each text:GLOB, lines:GLOB, wiki:GLOB, jsonl:GLOB
  # or tfds:NAME[@SPLIT]; a bare glob is text (or wiki when files start with
  # <doc). See electra_jax/data/sources.py.
  config.data.corpus = ''
  config.data.text_field = 'text'  # The text field of jsonl and TFDS records.
  config.data.tfds_data_dir = placeholder(str)  # None: TFDS's default.
  # Lines that are not UTF-8: 'skip' drops and counts them, but stops at a file
  # that looks binary (NUL bytes, or over 1% of 100+ lines); 'skip_all' drops
  # them however many; 'error' stops at the first.
  config.data.on_invalid_utf8 = 'skip'
  # Tokenizer: a WordPiece vocab.txt (the released ELECTRA models use BERT's
  # uncased one), or a sentencepiece model; with neither, a sentencepiece model
  # of model.vocab_size pieces is trained on spm_sample_sentences sentences.
  config.data.vocab = ''
  config.data.lower_case = True  # WordPiece only, as BERT uncased.
  config.data.strip_accents = placeholder(bool)  # None: follow lower_case, as BERT.
  config.data.spm_model = ''
  config.data.spm_model_type = 'unigram'  # or 'bpe'
  config.data.spm_sample_sentences = 1_000_000
  # Example packing, as google-research/electra's build_pretraining_dataset.py:
  # 10% single-segment examples, 5% with a random shorter target length.
  # Paragraph lines are split into sentences first so that segments end at
  # sentence boundaries.
  config.data.split_sentences = True
  config.data.single_segment_prob = 0.1
  config.data.short_seq_prob = 0.05
  config.data.prepare_workers = 0  # Processes preparing shards; 0: one per core.
  # Training input (Grain). Batches are read by `read_threads` threads in the
  # training process, or, when worker_processes > 0, by that many processes,
  # which scale with host cores (threads share the GIL). On a 2-core CPU, one
  # thread gave 11k and two worker processes 17k examples/s of 128 tokens
  # (docs/experiments/2026-11-22_input_and_checkpoints.md); use more threads for
  # remote storage such as gs://.
  config.data.read_threads = 1
  config.data.worker_processes = 0
  config.data.prefetch_batches = 4  # Batches kept ready per reader.
  # A prepared_dir in a bucket (gs://) is first copied into this local folder,
  # every host its own copy (kept for later runs): Grain reads one record per
  # request, and from a local GCS server that gave 1,100 examples/s of 128
  # tokens against 18,600 from disk (docs/scaling.md). '': read from the bucket.
  config.data.local_copy_dir = '~/.cache/electra_jax/prepared'

  # --- Evaluation on held-out data -------------------------------------------
  # Generator and discriminator metrics (with the discriminator's AUC) on
  # data kept out of training: a directory prepared by prepare_data with the
  # same tokenizer, e.g. from a held-out glob. Empty: no evaluation.
  config.eval = ml_collections.ConfigDict()
  config.eval.prepared_dir = ''
  config.eval.every_steps = 5_000  # And at the last step; used only with prepared_dir.
  config.eval.num_batches = 20
  config.eval.batch_size = placeholder(int)  # None: config.batch_size.
  config.eval.seed = 0  # Masking and sampling keys: the same batches every evaluation.

  # --- Device mesh -----------------------------------------------------------
  # Axis sizes; one may be -1 to take the remaining devices. The batch is
  # sharded over data x fsdp; parameters over fsdp (and tensor).
  config.mesh = ml_collections.ConfigDict()
  config.mesh.data = -1
  config.mesh.fsdp = 1
  config.mesh.tensor = 1
  # Multi-slice TPU (or multi-node GPU) runs: how many slices (nodes) each axis
  # spans over the data-centre network. The sizes above are then per slice,
  # the full axis being their product. Data parallelism across slices is the
  # usual choice: its one all-reduce per step tolerates DCN's bandwidth.
  config.mesh.dcn_data = 1
  config.mesh.dcn_fsdp = 1
  config.mesh.dcn_tensor = 1
  # Logical axis (named in electra_jax/model.py) -> mesh axes. Parameters are
  # sharded over fsdp on their hidden dimension and over tensor on heads, FFN
  # and vocabulary; the batch over data x fsdp. A dimension that a mesh axis
  # does not divide is replicated instead.
  config.mesh.logical_axis_rules = (
    ('batch', ('data', 'fsdp')),
    ('activation_batch', ('data', 'fsdp')),
    ('activation_length', None),
    ('activation_embed', None),
    ('vocab', 'tensor'),
    ('vocab_embed', 'fsdp'),
    ('embed', 'fsdp'),
    ('heads', 'tensor'),
    ('head_dim', None),
    ('mlp', 'tensor'),
    ('layers', None),
  )

  # --- Logging and checkpoints -----------------------------------------------
  config.log_every_steps = 100
  # Steps the host may dispatch beyond the newest finished one. More hides host
  # work (input, logging) behind the device; fewer bounds the time from SIGTERM
  # to a saved checkpoint, which waits for every dispatched step: at most
  # max_steps_ahead + 1 step times, plus the save.
  config.max_steps_ahead = 2
  # A short progress line (step / total, steps/s, tokens/s, time left) at least this
  # often, whatever log_every_steps is; 0 turns it off.
  config.progress_every_seconds = 30.0
  # Compiled programs are kept here and reused by later runs with the same
  # program (a restart after preemption compiles in seconds); '' turns it off.
  # Setting JAX_COMPILATION_CACHE_DIR in the environment does the same.
  config.compilation_cache_dir = ''
  # A step whose loss or gradients are NaN or Inf is not applied. This many in
  # a row stop the run, leaving the last checkpoint (which never holds an
  # applied non-finite update) as it is. The flags are read with the metrics,
  # at log steps, so the run stops at the first log step after the streak.
  config.max_consecutive_nonfinite_steps = 10

  config.checkpoint = ml_collections.ConfigDict()
  # Saves every every_steps steps (the released code: 1000) and at least
  # every every_minutes minutes (0: off), asynchronously, and at the end. With
  # several processes, process 0's clock decides at log steps, for all.
  config.checkpoint.every_steps = 1_000
  config.checkpoint.every_minutes = 30.0
  # Keeps the newest `keep` (the released code: 5) plus every checkpoint whose
  # step is a multiple of keep_every_steps (0: none).
  config.checkpoint.keep = 5
  config.checkpoint.keep_every_steps = 100_000
  # A failed save (full disk, lost bucket) is reported and training goes on,
  # the previous checkpoint still valid; this many failures in a row stop the
  # run, since work that cannot be saved would be lost.
  config.checkpoint.max_failed_saves_in_a_row = 3
  # Another run's workdir: start from its newest parameters (not its optimizer
  # state or step), e.g. for continued pretraining with a new schedule. Or a
  # released HF ElectraForPreTraining directory (google/electra-*-discriminator,
  # with its vocab.txt), and init_from_generator its ElectraForMaskedLM
  # (google/electra-*-generator; empty: the generator starts from random
  # weights). init_from_generator alone, another run's workdir: its generator, head
  # and the tables they embed with, the rest fresh (a discriminator trained from
  # the start on a generator past the masked LM's token-frequency plateau; with
  # tied embeddings the discriminator reads the loaded tables too). Used only
  # when this workdir has no checkpoint of its own.
  config.checkpoint.init_from = ''
  config.checkpoint.init_from_generator = ''
  # Resuming refuses a checkpoint whose architecture keys or tokenizer differ
  # from this config's; True resumes anyway.
  config.checkpoint.allow_config_change = False
  return config
