#!/usr/bin/env bash
# Does pretraining pay on question answering? SQuAD fine-tuned from a
# pretraining checkpoint and from the same architecture at random
# initialisation, 3 seeds each, then both tables (exact match and F1, the
# official scripts' definitions, in percent; for 2.0 also the answerable and
# unanswerable questions apart, and the best null threshold).
#
#   [SQUAD_VERSION=2.0] bash benchmarks/squad_gain.sh INIT OUT [TRAIN_QUESTIONS] [flags...]
#
# The data folder has SQuAD v1.1 train, no v1.1 dev, and half of the 2.0 dev
# set (dev-v2.0-part-a.json, 17 articles). v1.1 (the default) trains on v1.1
# train and scores the answerable questions of those 17 articles (written to
# OUT/dev-answerable.json). 2.0 splits the 17 articles: every third one
# (5 articles, 1,571 questions, 781 unanswerable) is dev, the other 12 (4,349)
# train, written to OUT/train-v2.0.json and OUT/dev-v2.0.json.
# TRAIN_QUESTIONS (default 8000) bounds the CPU time; 0 trains on all.
# Windows are 256 pieces, 64 apart.
# Rerunning resumes: finished seeds are read, and an interrupted one goes on.
set -euo pipefail

usage='usage: [SQUAD_VERSION=2.0] bash benchmarks/squad_gain.sh INIT OUT [TRAIN_QUESTIONS] [flags...]'
init=${1:?$usage}
out=${2:?$usage}
questions=${3:-8000}
shift $(($# < 3 ? $# : 3))
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}
version=${SQUAD_VERSION:-1.1}

mkdir -p "$out"
case $version in
  1.1) task=squad train=$data/squad/train-v1.1.json dev=$out/dev-answerable.json ;;
  2.0) task=squad_v2 train=$out/train-v2.0.json dev=$out/dev-v2.0.json ;;
  *) echo "SQUAD_VERSION=$version: must be 1.1 or 2.0" >&2; exit 2 ;;
esac
python - "$version" "$data/squad/dev-v2.0-part-a.json" "$out" <<'PY'
import json, pathlib, sys
version, source, out = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
squad = json.load(open(source))
if version == '1.1':
  for article in squad['data']:
    for paragraph in article['paragraphs']:
      paragraph['qas'] = [q for q in paragraph['qas'] if q['answers'] and not q.get('is_impossible')]
  json.dump(squad, open(out / 'dev-answerable.json', 'w'))
else:
  articles = squad['data']
  for name, keep in (('train', lambda i: i % 3 != 2), ('dev', lambda i: i % 3 == 2)):
    part = {**squad, 'data': [a for i, a in enumerate(articles) if keep(i)]}
    json.dump(part, open(out / f'{name}-v2.0.json', 'w'))
PY

for run in pretrained random; do
  echo "== $run"
  python -m electra_jax.finetune --task="$task" --train_file="$train" \
    --dev_file="$dev" --init="$init" --workdir="$out/$run" \
    --config.num_seeds=3 --config.max_train_examples="$questions" \
    --config.squad.max_seq_length=256 --config.squad.doc_stride=64 \
    --config.random_init=$([[ $run == random ]] && echo True || echo False) "$@"
done
