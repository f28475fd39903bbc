#!/usr/bin/env bash
# Pretrains on 8 simulated CPU devices with a data=4 x fsdp=2 mesh: a laptop
# rehearsal of sharded training. Extra arguments are passed to the main job.
#   bash launch/simulated_mesh.sh --config.data.corpus='../shared/data/wikipedia/AA/wiki_0*'
set -euo pipefail
export XLA_FLAGS="--xla_force_host_platform_device_count=8 ${XLA_FLAGS:-}"
export JAX_PLATFORMS=cpu
exec python -m electra_jax.main --config=configs/tiny.py \
  --workdir="${WORKDIR:-/tmp/electra_simulated_mesh}" \
  --config.mesh.data=4 --config.mesh.fsdp=2 "$@"
