# Recommended XLA flags per platform, for the main job and the benchmark.
#
#   source launch/xla_flags.sh v5p      # or v4, v5e, v6e, gpu, cpu
#   python -m electra_jax.main --config=configs/base.py --workdir=...
#
# Sets LIBTPU_INIT_ARGS (TPU), XLA_FLAGS (GPU) or the host allocator (CPU),
# keeping what is already set,
# and a persistent compilation cache so that restarts after preemption skip
# compilation. Kept here, not in the code, so that a run's flags are visible
# and easy to change. The GPU flags are checked against the installed jaxlib
# by tests/test_launch.py (XLA stops at start-up on an unknown flag).

_platform="${1:-}"

# TPU, every generation: overlap the data-parallel all-reduce and FSDP's
# all-gathers with compute (async collective fusion), as MaxText does.
_tpu_common="--xla_tpu_enable_data_parallel_all_reduce_opt=true \
--xla_tpu_data_parallel_opt_different_sized_ops=true \
--xla_tpu_enable_async_collective_fusion=true \
--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true \
--xla_tpu_enable_async_collective_fusion_multiple_steps=true \
--xla_tpu_overlap_compute_collective_tc=true \
--xla_enable_async_all_gather=true"

# GPU: the latency-hiding scheduler overlaps collectives with compute;
# combining thresholds batch small all-reduces (many small parameter
# tensors); pipelining overlaps FSDP's per-layer collectives across the scan.
_gpu="--xla_gpu_enable_latency_hiding_scheduler=true \
--xla_gpu_enable_highest_priority_async_stream=true \
--xla_gpu_all_reduce_combine_threshold_bytes=134217728 \
--xla_gpu_all_gather_combine_threshold_bytes=134217728 \
--xla_gpu_reduce_scatter_combine_threshold_bytes=67108864 \
--xla_gpu_enable_pipelined_all_gather=true \
--xla_gpu_enable_pipelined_reduce_scatter=true \
--xla_gpu_enable_pipelined_all_reduce=true \
--xla_gpu_enable_while_loop_double_buffering=true"

case "${_platform}" in
  v4|v5p)
    export LIBTPU_INIT_ARGS="${_tpu_common} ${LIBTPU_INIT_ARGS:-}" ;;
  v5e|v6e)
    # The single-core generations: more scoped VMEM for larger fusions.
    export LIBTPU_INIT_ARGS="${_tpu_common} --xla_tpu_scoped_vmem_limit_kib=98304 ${LIBTPU_INIT_ARGS:-}" ;;
  gpu)
    export XLA_FLAGS="${_gpu} ${XLA_FLAGS:-}"
    # Let XLA take 90% of GPU memory up front instead of the default 75%.
    export XLA_PYTHON_CLIENT_MEM_FRACTION="${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.9}" ;;
  cpu)
    # XLA's CPU defaults are right. The host allocator is not: XLA takes a
    # step's temporaries (880 MiB for small at 16 x 128) as one block that
    # glibc maps and unmaps at every step, and faulting it back in cost small
    # 12% of its step (docs/experiments/2026-11-22_cpu_step.md). tcmalloc, told
    # never to give freed memory back, keeps it mapped (Debian/Ubuntu: apt
    # install libtcmalloc-minimal4); without it, glibc's transparent huge pages
    # fault 2 MiB at a time.
    # '|| true': a caller under 'set -eo pipefail' must not exit when grep finds none.
    _tcmalloc="$(ldconfig -p 2>/dev/null | grep -o '/[^ ]*/libtcmalloc_minimal\.so\.4$' | head -n 1 || true)"
    if [ -n "${_tcmalloc}" ]; then
      export LD_PRELOAD="${_tcmalloc}${LD_PRELOAD:+:${LD_PRELOAD}}"
      export TCMALLOC_RELEASE_RATE="${TCMALLOC_RELEASE_RATE:-0}"
    else
      export GLIBC_TUNABLES="glibc.malloc.hugetlb=1${GLIBC_TUNABLES:+:${GLIBC_TUNABLES}}"
    fi
    unset _tcmalloc ;;
  *)
    echo "usage: source launch/xla_flags.sh {v4|v5e|v5p|v6e|gpu|cpu}" >&2
    return 2 2>/dev/null || exit 2 ;;
esac

export JAX_COMPILATION_CACHE_DIR="${JAX_COMPILATION_CACHE_DIR:-${HOME}/.cache/electra_jax_xla}"
echo "xla_flags.sh (${_platform}): LIBTPU_INIT_ARGS='${LIBTPU_INIT_ARGS:-}' XLA_FLAGS='${XLA_FLAGS:-}' LD_PRELOAD='${LD_PRELOAD:-}' GLIBC_TUNABLES='${GLIBC_TUNABLES:-}' JAX_COMPILATION_CACHE_DIR=${JAX_COMPILATION_CACHE_DIR}" >&2
unset _platform _tpu_common _gpu
