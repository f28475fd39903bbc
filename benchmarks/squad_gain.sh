#!/usr/bin/env bash
# Does pretraining pay on question answering? SQuAD v1.1 fine-tuned from a
# pretraining checkpoint and from the same architecture at random
# initialisation, 3 seeds each, then both tables (exact match and F1, the
# official scripts' definitions, in percent).
#
#   bash benchmarks/squad_gain.sh INIT OUT [TRAIN_QUESTIONS] [flags for both runs...]
#
# The data folder has SQuAD v1.1 train but no v1.1 dev; the dev set here is the
# answerable questions of the SQuAD 2.0 dev articles it has (other articles,
# written to OUT/dev-answerable.json). TRAIN_QUESTIONS (default 8000 of the
# 87,599) bounds the CPU time; 0 trains on all. Windows are 256 pieces, 64
# apart. Rerunning resumes: finished seeds are read, not trained again.
set -euo pipefail

usage='usage: bash benchmarks/squad_gain.sh INIT OUT [TRAIN_QUESTIONS] [flags...]'
init=${1:?$usage}
out=${2:?$usage}
questions=${3:-8000}
shift $(($# < 3 ? $# : 3))
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}

mkdir -p "$out"
python - "$data/squad/dev-v2.0-part-a.json" "$out/dev-answerable.json" <<'PY'
import json, sys
squad = json.load(open(sys.argv[1]))
for article in squad['data']:
  for paragraph in article['paragraphs']:
    paragraph['qas'] = [q for q in paragraph['qas'] if q['answers'] and not q.get('is_impossible')]
json.dump(squad, open(sys.argv[2], 'w'))
PY

for run in pretrained random; do
  echo "== $run"
  python -m electra_jax.finetune --task=squad --train_file="$data/squad/train-v1.1.json" \
    --dev_file="$out/dev-answerable.json" --init="$init" --workdir="$out/$run" \
    --config.num_seeds=3 --config.max_train_examples="$questions" \
    --config.squad.max_seq_length=256 --config.squad.doc_stride=64 \
    --config.random_init=$([[ $run == random ]] && echo True || echo False) "$@" |
    tail -6
done
