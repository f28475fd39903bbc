#!/usr/bin/env bash
# The runs behind docs/healthy_runs.md: what the curves of a healthy run look like.
#
#   bash benchmarks/healthy_runs.sh OUT [SMALL_STEPS]
#
# 1. tiny: the README's first command (configs/tiny.py on two Wikipedia files,
#    300 steps, a 2,000-piece sentencepiece model trained on them), with held-out
#    metrics every 50 steps on wiki_99, which it never trains on;
# 2. tiny_t3: the same data for 2,000 steps with the generator sampled at
#    temperature 3, long enough for the discriminator to start flagging tokens;
# 3. small: configs/small.py (the paper's ELECTRA-Small, batch 128 x 128) with
#    BERT's WordPiece vocabulary on wiki_00 to wiki_98, for SMALL_STEPS steps
#    (default 100, some 15 s each on 2 CPU cores; still early in its
#    10,000-step warmup), held-out every 50.
# Then benchmarks/plot_runs.py draws them into OUT/healthy_runs.png. Rerunning
# resumes: finished preparations and runs are kept.
set -euo pipefail

usage='usage: bash benchmarks/healthy_runs.sh OUT [SMALL_STEPS]'
out=${1:?$usage}
small_steps=${2:-100}
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}
wiki=$data/wikipedia/AA

prepare() {  # prepare OUTPUT [flags...]: skipped once OUTPUT is complete.
  local output=$1
  shift
  [[ -f $output/metadata.json ]] || python -m electra_jax.prepare_data --output_dir="$output" "$@"
}

prepare "$out/tiny_data" --config=configs/tiny.py --corpus="wiki:$wiki/wiki_0[0-1]" \
  --spm_vocab_size=2000 --max_seq_length=64
prepare "$out/tiny_held_out" --config=configs/tiny.py --corpus="wiki:$wiki/wiki_99" \
  --spm_model="$out/tiny_data/tokenizer/spm.model" --max_seq_length=64
python -m electra_jax.main --config=configs/tiny.py --workdir="$out/tiny" \
  --config.data.prepared_dir="$out/tiny_data" --config.eval.prepared_dir="$out/tiny_held_out" \
  --config.eval.every_steps=50
python -m electra_jax.main --config=configs/tiny.py --workdir="$out/tiny_t3" \
  --config.data.prepared_dir="$out/tiny_data" --config.eval.prepared_dir="$out/tiny_held_out" \
  --config.eval.every_steps=250 --config.num_train_steps=2000 --config.log_every_steps=100 \
  --config.objective.temperature=3

vocab=$data/vocab/bert-base-uncased-vocab.txt
prepare "$out/wiki_wordpiece" --corpus="wiki:$wiki/wiki_[0-8]*,wiki:$wiki/wiki_9[0-8]" \
  --vocab="$vocab" --max_seq_length=128
prepare "$out/wiki_wordpiece_held_out" --corpus="wiki:$wiki/wiki_99" --vocab="$vocab" \
  --max_seq_length=128
python -m electra_jax.main --config=configs/small.py --workdir="$out/small" \
  --config.data.prepared_dir="$out/wiki_wordpiece" \
  --config.eval.prepared_dir="$out/wiki_wordpiece_held_out" --config.eval.every_steps=50 \
  --config.eval.num_batches=4 \
  --config.num_train_steps="$small_steps" --config.log_every_steps=10

python benchmarks/plot_runs.py --output="$out/healthy_runs.png" "tiny=$out/tiny" \
  "tiny at temperature 3=$out/tiny_t3" "small=$out/small"
