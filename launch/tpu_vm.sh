#!/usr/bin/env bash
# Pretraining on a Cloud TPU VM or pod slice, from this checkout, with gcloud.
#
#   export TPU_NAME=electra-base ZONE=us-east5-a TYPE=v5p-64   # TYPE as Cloud TPU names slices
#   export WORKDIR=gs://BUCKET/electra_base                    # checkpoints and TensorBoard
#   bash launch/tpu_vm.sh create [on-demand|spot|queued]       # default: on-demand
#   bash launch/tpu_vm.sh setup                                # copy this checkout, pip install on every worker
#   bash launch/tpu_vm.sh prepare --corpus='wiki:...' --vocab=... --max_seq_length=512 \
#       --output_dir=gs://BUCKET/wiki_wp512                    # on worker 0, into GCS
#   bash launch/tpu_vm.sh train --config=configs/base.py --config.data.prepared_dir=gs://BUCKET/wiki_wp512
#   bash launch/tpu_vm.sh logs [WORKER]                        # follow one worker's log (default 0)
#   bash launch/tpu_vm.sh delete
#
# `train` starts the same command on every worker, each in the background with
# its own log (~/electra_worker.log on that worker); ELECTRA_JAX_DISTRIBUTED=1
# makes jax.distributed find the peers from the TPU VM's metadata. It sources launch/xla_flags.sh for the
# slice's generation. A rerun of `train` resumes from WORKDIR's newest
# checkpoint, which is what to do after a spot slice is preempted and recreated.
# DRY_RUN=1 prints the gcloud commands instead of running them.
set -euo pipefail

: "${TPU_NAME:?set TPU_NAME}" "${ZONE:?set ZONE}" "${TYPE:?set TYPE, e.g. v5p-64}"
generation=${TYPE%%-*}
case $generation in
  v4) runtime=tpu-ubuntu2204-base ;;
  v5p) runtime=v2-alpha-tpuv5 ;;
  v5e|v5litepod) runtime=v2-alpha-tpuv5-lite; generation=v5e ;;
  v6e) runtime=v2-alpha-tpuv6e ;;
  *) echo "error: TYPE=$TYPE: expected a v4, v5p, v5e (v5litepod) or v6e slice" >&2; exit 2 ;;
esac
runtime=${RUNTIME_VERSION:-$runtime}
accelerator=$TYPE
[[ $generation == v5e ]] && accelerator=v5litepod-${TYPE#*-}  # gcloud's name for v5e slices.
remote_dir=electra_jax  # In each worker's home directory.

run() {
  if [[ -n ${DRY_RUN:-} ]]; then printf '%q ' "$@"; echo; else "$@"; fi
}

on_workers() {  # on_workers WORKERS COMMAND: one ssh command on the given workers.
  run gcloud compute tpus tpu-vm ssh "$TPU_NAME" --zone="$ZONE" --worker="$1" --command="$2"
}

command=${1:?usage: bash launch/tpu_vm.sh create|setup|prepare|train|logs|delete [ARGS]}
shift
case $command in
  create)
    case ${1:-on-demand} in
      on-demand) run gcloud compute tpus tpu-vm create "$TPU_NAME" --zone="$ZONE" \
                   --accelerator-type="$accelerator" --version="$runtime" ;;
      spot) run gcloud compute tpus tpu-vm create "$TPU_NAME" --zone="$ZONE" \
              --accelerator-type="$accelerator" --version="$runtime" --spot ;;
      # A queued resource waits for capacity instead of failing; `describe` shows its state.
      queued) run gcloud compute tpus queued-resources create "$TPU_NAME" --node-id="$TPU_NAME" \
                --zone="$ZONE" --accelerator-type="$accelerator" --runtime-version="$runtime" --spot
              echo "wait for ACTIVE: gcloud compute tpus queued-resources describe $TPU_NAME --zone=$ZONE" ;;
      *) echo "error: create $1: expected on-demand, spot or queued" >&2; exit 2 ;;
    esac ;;
  setup)
    # The checkout without its virtual environment, build outputs or git history.
    archive=$(mktemp --suffix=.tar.gz)
    tar -czf "$archive" --exclude=.venv --exclude=.git --exclude='*.egg-info' \
      --exclude=__pycache__ -C "$(dirname "$0")/.." .
    run gcloud compute tpus tpu-vm scp "$archive" "$TPU_NAME:electra_jax.tar.gz" --zone="$ZONE" \
      --worker=all
    on_workers all "rm -rf $remote_dir && mkdir $remote_dir && tar -xzf electra_jax.tar.gz \
-C $remote_dir && pip install -q -e './$remote_dir[tpu]' && python3 -c 'import electra_jax, jax; print(jax.__version__)'"
    rm -f "$archive" ;;
  prepare)
    on_workers 0 "cd $remote_dir && python3 -m electra_jax.prepare_data $(printf '%q ' "$@")" ;;
  train)
    : "${WORKDIR:?set WORKDIR, e.g. gs://BUCKET/electra_base}"
    on_workers all "cd $remote_dir && source launch/xla_flags.sh $generation && \
ELECTRA_JAX_DISTRIBUTED=1 nohup python3 -m electra_jax.main --workdir=$WORKDIR $(printf '%q ' "$@") \
> ~/electra_worker.log 2>&1 < /dev/null & echo started on \$(hostname)" ;;
  logs)
    on_workers "${1:-0}" "tail -n 100 -f ~/electra_worker.log" ;;
  delete)
    if run gcloud compute tpus queued-resources describe "$TPU_NAME" --zone="$ZONE" \
        > /dev/null 2>&1; then
      run gcloud compute tpus queued-resources delete "$TPU_NAME" --zone="$ZONE" --force --quiet
    else
      run gcloud compute tpus tpu-vm delete "$TPU_NAME" --zone="$ZONE" --quiet
    fi ;;
  *) echo "error: unknown command $command: expected create, setup, prepare, train, logs or delete" >&2
     exit 2 ;;
esac
