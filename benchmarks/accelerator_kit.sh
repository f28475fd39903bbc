#!/usr/bin/env bash
# Builds the offline GPU kit: everything benchmarks/accelerator_suite.sh needs on a
# GPU node without network, beside the repository, in at most 64 MiB.
#
#   bash benchmarks/accelerator_kit.sh [KIT]          (default: accelerator_kit/, ignored by git)
#
# Run it from the repository root on any machine that reaches PyPI; it only prepares:
#   KIT/wheels/  the wheels a site image with JAX, flax, optax, orbax, PyTorch and
#                transformers lacks (ml_collections, grain, array_record,
#                tensorboardX and what they need beyond such an image), for
#                CPython 3.12 on manylinux x86_64, and also for this machine's
#                Python when it differs, so the CPU dry run installs them the same way;
#   KIT/data/    Wikipedia prepared with BERT's uncased WordPiece vocabulary at
#                sequence 128 (WIKI_TRAIN files for pretraining, WIKI_HELD_OUT for
#                held-out evaluation), from $ELECTRA_JAX_DATA;
#   KIT/glue/    the GLUE tasks at hand (CoLA, SST-2, MRPC, WNLI).
# With OBJECTIVE_CORPUS=DIR (a prepared folder, such as the wiki_spm8k that
# benchmarks/objective_ablation.sh prepares in its OUT) it builds the kit of the
# suite's objectives stage instead: KIT/data/objective_corpus.tar.xz holds DIR
# (xz: the 58 MB corpus packs to 42), in place of the WordPiece data, which would
# not fit beside it.
# It ends by printing the kit's size and fails if it is over 64 MiB.
set -euo pipefail

kit=${1:-accelerator_kit}
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}
wiki_train=${WIKI_TRAIN:-'AA/wiki_[0-3]?'}
wiki_held_out=${WIKI_HELD_OUT:-'AA/wiki_99'}
limit_mib=64

# What the node lacks, with the bounds setup.py puts on them; portpicker and
# cloudpickle are grain's, which an image without grain need not hold.
wheels=('ml-collections>=1.1,<2' 'grain>=0.2.18,<0.3' 'array-record>=0.8.6,<0.9'
        'tensorboardX>=2.6' 'cloudpickle' 'portpicker')
here=$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
mkdir -p "$kit/wheels"
for version in $(printf '%s\n' 3.12 "$here" | sort -u); do
  python -m pip download --quiet --only-binary=:all: --no-deps --dest "$kit/wheels" \
    --python-version "$version" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 "${wheels[@]}"
done

prepare() {  # prepare NAME GLOB: WordPiece, sequence 128, into KIT/data/NAME.
  [[ -f $kit/data/$1/metadata.json ]] && return
  python -m electra_jax.prepare_data --corpus="wiki:$data/wikipedia/$2" \
    --output_dir="$kit/data/$1" --vocab="$data/vocab/bert-base-uncased-vocab.txt" \
    --max_seq_length=128
}
if [[ -n ${OBJECTIVE_CORPUS:-} ]]; then
  if [[ ! -f $OBJECTIVE_CORPUS/metadata.json ]]; then
    echo "error: OBJECTIVE_CORPUS=$OBJECTIVE_CORPUS is not a prepared folder (no" \
      "metadata.json); prepare it with python -m electra_jax.prepare_data" >&2
    exit 1
  fi
  packed=$kit/data/objective_corpus.tar.xz
  mkdir -p "$kit/data"
  # -h: a corpus reached through a link (OUT/wiki_spm8k often is one) is packed, not the link.
  [[ -f $packed ]] || tar -chJf "$packed" -C "$(dirname "$OBJECTIVE_CORPUS")" \
    --transform="s|^$(basename "$OBJECTIVE_CORPUS")|objective_corpus|" \
    "$(basename "$OBJECTIVE_CORPUS")"
else
  prepare wiki_train "$wiki_train"
  prepare wiki_held_out "$wiki_held_out"
fi

git rev-parse --short HEAD > "$kit/commit.txt"  # The suite names it: a copied tree has no .git.
mkdir -p "$kit/glue"
for task in CoLA SST-2 MRPC WNLI; do
  [[ -d $data/glue/$task ]] && cp -r "$data/glue/$task" "$kit/glue/"
done

du -sh "$kit/wheels" "$kit/data"/* "$kit/glue"
size=$(du -sm "$kit" | cut -f1)
echo "kit: $kit, $size MiB"
if (( size > limit_mib )); then
  echo "error: the kit is $size MiB, over the $limit_mib MiB that travel beside the repository;" \
    "prepare fewer files (WIKI_TRAIN)" >&2
  exit 1
fi
