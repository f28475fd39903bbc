#!/usr/bin/env bash
# Does pretraining pay on token tagging? CoNLL-2003 NER fine-tuned from a
# pretraining checkpoint and from the same architecture at random
# initialisation, 3 seeds each, then both tables (entity F1 as conlleval counts
# it, the dev split being CoNLL-2003's valid.txt).
#
#   bash benchmarks/tagging_gain.sh INIT OUT [TRAIN_SENTENCES] [flags for both runs...]
#
# INIT is a pretraining workdir (or an HF directory). TRAIN_SENTENCES (default
# 4000 of the 14,041) bounds the CPU time; 0 trains on all. Sentences are cut to
# 64 pieces (windows of whole words; CoNLL-2003's longest has 124 words).
# Rerunning resumes: finished seeds are read, not trained again.
set -euo pipefail

usage='usage: bash benchmarks/tagging_gain.sh INIT OUT [TRAIN_SENTENCES] [flags...]'
init=${1:?$usage}
out=${2:?$usage}
sentences=${3:-4000}
shift $(($# < 3 ? $# : 3))
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}

for run in pretrained random; do
  echo "== $run"
  python -m electra_jax.finetune --task=conll2003 --data_dir="$data/conll2003" \
    --init="$init" --workdir="$out/$run" --config.num_seeds=3 \
    --config.max_train_examples="$sentences" --config.max_seq_length=64 \
    --config.random_init=$([[ $run == random ]] && echo True || echo False) "$@" |
    tail -6
done
