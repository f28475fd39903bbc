# The CPU pretraining recipe that benchmarks/pretraining_gain.sh,
# benchmarks/objective_ablation.sh and benchmarks/korean_gain.sh share; sourced, with
# $out and $data set. A caller with its own corpus sets $prepared (a prepared
# directory) and $vocab_size first. PRETRAIN_FLAGS, from the environment, adds flags
# after the recipe's (later flags win), e.g. a larger model on a GPU.
#
# By default, English Wikipedia with an 8,000-piece sentencepiece vocabulary trained
# on it: a quarter of BERT's 30,522 WordPiece ids, so the embedding table and the
# generator's softmax cost less and rare pieces are fewer.
if [[ -z ${prepared:-} ]]; then
  prepared=$out/wiki_spm8k
  vocab_size=8000
  if [[ ! -f $prepared/metadata.json ]]; then
    python -m electra_jax.prepare_data --corpus="wiki:$data/wikipedia/*/wiki_*" \
      --output_dir="$prepared" --spm_vocab_size=8000 \
      --config.data.spm_sample_sentences=300000 --max_seq_length=128
  fi
fi

# ELECTRA-Small's recipe scaled to a CPU: 4 layers of width 128 (2 heads, embeddings
# 128), a generator of half that width, batch 32, no dropout (a run this short does
# not overfit), and the layer scan unrolled 4 times (276 against 358 ms a step in
# electra_jax.benchmark, docs/experiments/2026-11-22_cpu_step.md).
model=(--config=configs/small.py --config.data.prepared_dir="$prepared"
       --config.model.vocab_size="$vocab_size" --config.model.num_layers=4
       --config.model.hidden_size=128 --config.model.generator_hidden_fraction=0.5
       --config.batch_size=32 --config.model.dropout_rate=0
       --config.model.attention_dropout_rate=0 --config.model.scan_unroll=4
       --config.log_every_steps=200 --config.checkpoint.every_steps=2000)
read -r -a pretrain_flags <<< "${PRETRAIN_FLAGS:-}"
model+=("${pretrain_flags[@]}")
