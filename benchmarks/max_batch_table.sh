#!/usr/bin/env bash
# The largest per-chip batch that fits, for each model size, TPU generation and
# parameter sharding: one `python -m electra_jax.aot --find_max_batch` per cell,
# compiled for a 4-chip slice of each generation (v4-8, v5e-4, v5p-8) with
# libtpu on this machine's CPU, at each config's own sequence length and remat
# policy. "data" replicates parameters and optimizer state on every chip;
# "fsdp" shards them over the 4 chips.
#
#   bash benchmarks/max_batch_table.sh [CONFIGS] [TOPOLOGIES] [SHARDINGS] | tee table.md
#
# e.g. bash benchmarks/max_batch_table.sh "small base" "v5e-4" "data fsdp". Each
# cell cost four to eight compiles in the runs of
# docs/experiments/2026-11-23_tpu_compile_and_memory.md, 0.5-5 minutes each on a
# 2-core CPU for base and large (a refusal far over the HBM stops early; one
# just over it takes a full compile). A cell's log is kept in ${LOG_DIR:-/tmp/max_batch_logs}.
set -euo pipefail

configs=${1:-small base large}
topologies=${2:-v4-8 v5e-4 v5p-8}
shardings=${3:-data fsdp}
logs=${LOG_DIR:-/tmp/max_batch_logs}
mkdir -p "$logs"

echo '| config | slice | sharding | largest global batch | per chip | memory per chip |'
echo '|---|---|---|---|---|---|'
for config in $configs; do
  for topology in $topologies; do
    for shard in $shardings; do
      case $shard in
        data) mesh=(--config.mesh.data=-1 --config.mesh.fsdp=1) ;;
        fsdp) mesh=(--config.mesh.data=1 --config.mesh.fsdp=-1) ;;
        *) echo "error: sharding $shard is not data or fsdp" >&2; exit 2 ;;
      esac
      log=$logs/$config-$topology-$shard.log
      if python -m electra_jax.aot --config="configs/$config.py" --topology="$topology" \
          --find_max_batch "${mesh[@]}" > "$log" 2>&1; then
        batch=$(sed -n 's/^largest batch that fits: //p' "$log")
        chips=$(sed -n 's/^[^ ]* ([^,]*, \([0-9]*\) chips.*/\1/p' "$log" | head -1)
        memory=$(sed -n 's/^memory per chip: \([0-9.]* GiB of [0-9]* GiB\).*/\1/p' "$log")
        echo "| $config | $topology | $shard | $batch | $((batch / chips)) | $memory |"
      else
        echo "| $config | $topology | $shard | none: $(tail -1 "$log") | | |"
      fi
    done
  done
done
