#!/usr/bin/env bash
# The offline GPU suite: speed on a GPU node without network, one stage per invocation
# so that each job stays well under 10 minutes.
#
#   STAGE=env|small|base|quality|objectives bash benchmarks/accelerator_suite.sh
#
# Run from the repository root, with the kit that benchmarks/accelerator_kit.sh built
# beside it (KIT, default accelerator_kit). Each invocation installs the kit's wheels
# offline into KIT/site-PYTHON (pip --no-index --no-deps; once), puts them and this
# repository on PYTHONPATH ahead of the node's own packages (its JAX, flax, optax,
# orbax, PyTorch and transformers are used as they are), sources
# launch/xla_flags.sh for the platform, and runs the stage
# (benchmarks/accelerator_suite.py), which writes OUT/STAGE.md (OUT, default
# accelerator_results):
#   env    the devices, the versions, and bf16 and f32 matmul peaks measured now;
#   small  configs/small.py at 128 x 128 in bf16: tokens/s and MFU for explicit, xla
#          and cudnn attention, the scan unrolled, remat dots_saveable, and HF
#          transformers' PyTorch step on the same device, then a profile of the
#          fastest (benchmarks/profile_summary.py; the trace in OUT/profile);
#   base   configs/base.py at 512 in bf16 at the largest batch that fits: the same
#          variants;
#   quality  configs/small.py pretrained on the kit's Wikipedia to QUALITY_STEPS
#          (default 62,500: 6.25% of the paper's schedule), at most QUALITY_MINUTES
#          (default 8) per job: rerun it until it reports the held-out metrics and
#          one GLUE seed per task (OUT/quality holds the workdir between jobs;
#          QUALITY_TASKS, default 'cola sst-2 mrpc wnli', names the tasks);
#   objectives  benchmarks/objective_ablation.sh on the objectives kit's corpus
#          (OBJECTIVE_CORPUS, in benchmarks/accelerator_kit.sh), its rows (ROWS,
#          default 'electra_t3 mlm'; LRS, default 1e-3; PRETRAIN_FLAGS, e.g. a
#          larger model in bf16) in two lanes sharing the
#          device, at OBJECTIVE_BUDGET train TFLOP per row or, by default, the
#          largest budget that a probe of both train loops says fits
#          OBJECTIVES_MINUTES (default 9) with OBJECTIVES_FINETUNE_S (default 200)
#          left for fine-tuning; the table in OUT/objectives.md, the runs in
#          OUT/objectives (rerun with the same budget to finish a table).
# SUITE_DRY_RUN=1 runs a stage on the tiny config for a few steps on whatever
# devices there are (a CPU included), installing from the kit the same way: the
# check that the suite works before it meets a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."

stage=${STAGE:?usage: STAGE=env|small|base|quality|objectives bash benchmarks/accelerator_suite.sh}
kit=${KIT:-accelerator_kit}
out=${OUT:-accelerator_results}
if [[ ! -d $kit/wheels ]]; then
  echo "error: no kit at $kit; build it with 'bash benchmarks/accelerator_kit.sh' on a" \
    "machine with network access, and copy it beside the repository (or set KIT)" >&2
  exit 1
fi

python_version=$(python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
site=$kit/site-$python_version
if [[ ! -f $site/.installed ]]; then
  python3 -m pip install --quiet --no-index --no-deps --find-links="$kit/wheels" \
    --target="$site" ml-collections grain array-record tensorboardX cloudpickle portpicker
  touch "$site/.installed"
fi
export PYTHONPATH="$PWD:$PWD/$site${PYTHONPATH:+:$PYTHONPATH}"

dry_run=()
[[ -n ${SUITE_DRY_RUN:-} ]] && dry_run=(--dry_run)
platform=cpu
command -v nvidia-smi > /dev/null && platform=gpu
# shellcheck source=launch/xla_flags.sh
source launch/xla_flags.sh "$platform"
python3 benchmarks/accelerator_suite.py --stage="$stage" --kit="$kit" --out="$out" "${dry_run[@]}"
