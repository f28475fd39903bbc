#!/usr/bin/env bash
# Korean end to end: a WordPiece vocabulary built on Korean Wikipedia, that corpus
# prepared, the CPU recipe's small ELECTRA pretrained on it (benchmarks/cpu_recipe.sh,
# as benchmarks/pretraining_gain.sh), its discriminator and the same architecture from
# random initialisation fine-tuned on Naver movie-review sentiment (NSMC) with the
# user-dataset task, 3 seeds each, and the model exported to HF and checked there.
#
#   bash benchmarks/korean_gain.sh OUT [STEPS]
#
# Reads $ELECTRA_JAX_DATA/korean/{kowiki,nsmc}. The vocabulary has 16,000 ids;
# pretraining runs STEPS (default 8,000) at generator temperature 3, as
# pretraining_gain.sh's first stage. Fine-tuning has two protocols:
#   few-labels: the same seeded 1,000 reviews for 10 epochs, lr 1e-3, no layer-wise decay;
#   20k: 20,000 reviews for 3 epochs with configs/finetune.py:small's rate and decay.
# Both are scored on the first 5,000 reviews of NSMC's test file (2,522 positive),
# written to OUT/nsmc_dev.tsv, so that 24 evaluations of 50,000 reviews do not
# dominate a CPU run. Source launch/xla_flags.sh for the platform first. Rerunning
# resumes: the vocabulary and the prepared corpus are kept, pretraining continues from
# its newest checkpoint, and fine-tuning runs whose results.json exists are skipped.
# Extra flags for every fine-tuning run go in FINETUNE_FLAGS, for pretraining in
# PRETRAIN_FLAGS (after the recipe's).
set -euo pipefail

usage='usage: bash benchmarks/korean_gain.sh OUT [STEPS]'
out=${1:?$usage}
steps=${2:-8000}
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}
read -r -a finetune_flags <<< "${FINETUNE_FLAGS:-}"
corpus="wiki:$data/korean/kowiki/*/wiki_*"
mkdir -p "$out"

if [[ ! -f $out/vocab/vocab.txt ]]; then
  python -m electra_jax.build_vocab --corpus="$corpus" --output="$out/vocab" --vocab_size=16000
fi
prepared=$out/kowiki
vocab_size=16000
if [[ ! -f $prepared/metadata.json ]]; then
  python -m electra_jax.prepare_data --corpus="$corpus" --vocab="$out/vocab/vocab.txt" \
    --output_dir="$prepared" --max_seq_length=128 2>&1 | tee "$out/prepare.log"
fi
source "$(dirname "$0")/cpu_recipe.sh"
python -m electra_jax.main "${model[@]}" --workdir="$out/pretrain" \
  --config.objective.temperature=3 --config.learning_rate=1e-3 \
  --config.num_train_steps="$steps" --config.warmup_steps=$((steps * 15 / 220))

head -n 5001 "$data/korean/nsmc/test.tsv" > "$out/nsmc_dev.tsv"
few_labels=(--config.max_train_examples=1000 --config.num_train_epochs=10
            --config.learning_rate=1e-3 --config.layerwise_lr_decay=1.0)
twenty_k=(--config.max_train_examples=20000 --config.num_train_epochs=3)
for protocol in few-labels 20k; do
  for init in pretrained random; do
    run=$out/finetune/$protocol-$init
    [[ -f $run/results.json ]] && continue
    if [[ $protocol == few-labels ]]; then flags=("${few_labels[@]}"); else flags=("${twenty_k[@]}"); fi
    python -m electra_jax.finetune --task=csv --train_file="$data/korean/nsmc/train.tsv" \
      --dev_file="$out/nsmc_dev.tsv" --text_column=document --label_column=label \
      --init="$out/pretrain" --workdir="$run" --config.max_seq_length=64 \
      --config.random_init=$([[ $init == random ]] && echo True || echo False) \
      --config.num_seeds=3 "${flags[@]}" "${finetune_flags[@]}" | tail -1
  done
done

python -m electra_jax.export --workdir="$out/pretrain" --output="$out/hf"

python - "$out" "$data/korean/nsmc/test.tsv" <<'EOF'
import csv, json, pathlib, sys

import numpy as np
import torch
import transformers

from electra_jax import pretrained, train

out, reviews = pathlib.Path(sys.argv[1]), sys.argv[2]
with open(reviews, newline='') as f:
  texts = [row['document'] for row in csv.DictReader(f, delimiter='\t', quoting=csv.QUOTE_NONE)]
texts = texts[5000:5200]  # reviews that fine-tuning was not scored on

# The exported tokenizer and model, loaded by transformers, against ours.
source = pretrained.load(str(out / 'pretrain'))
hf_tokenizer = transformers.AutoTokenizer.from_pretrained(out / 'hf')
ours_ids = source.tokenizer.encode(texts)
hf_ids = hf_tokenizer(texts, add_special_tokens=False)['input_ids']
same = sum(a == list(b) for a, b in zip(ours_ids, hf_ids))
unknown = sum(i == hf_tokenizer.unk_token_id for ids in ours_ids for i in ids)
pieces = sum(len(ids) for ids in ours_ids)
print(f'tokenizer: {same} of {len(texts)} reviews get the same ids from AutoTokenizer; '
      f'[UNK] {unknown / pieces:.2%} of {pieces:,} pieces')
batch = hf_tokenizer(texts[:16], padding=True, truncation=True, max_length=64, return_tensors='np')
ids, mask, types = batch['input_ids'], batch['attention_mask'], batch['token_type_ids']
model = train.build_model(source.config)
_, ours = model.apply({'params': source.params}, ids, types, mask, np.zeros((16, 1), np.int32))
hf_model = transformers.AutoModelForPreTraining.from_pretrained(out / 'hf').eval()
with torch.no_grad():
  theirs = hf_model(**{k: torch.tensor(v) for k, v in batch.items()}).logits.numpy()
error = np.abs(theirs - np.asarray(ours))[mask.astype(bool)].max()
print(f'discriminator logits, HF against ours on 16 reviews: max |difference| {error:.2e}')

print(f'{"protocol":11} {"dev accuracy, pretrained: seeds (median)":42} '
      f'{"random init: seeds (median)":34} pretrained > random, every seed')
for protocol in ('few-labels', '20k'):
  cells, seeds = [], {}
  for init in ('pretrained', 'random'):
    result = json.loads((out / 'finetune' / f'{protocol}-{init}' / 'results.json').read_text())
    seeds[init] = [s['dev']['dev']['accuracy'] for s in result['seeds'].values()]
    cells.append(', '.join(f'{v:.3f}' for v in seeds[init])
                 + f' ({result["median"]["dev"]["accuracy"]:.3f})')
  clear = min(seeds['pretrained']) > max(seeds['random'])
  print(f'{protocol:11} {cells[0]:42} {cells[1]:34} {"yes" if clear else "no"}')
EOF
