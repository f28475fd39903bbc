#!/usr/bin/env bash
# The paper's efficiency ablation (Clark et al. 2020, Table 5) at CPU scale: each
# objective pretrains the same network for the same train FLOPs, then its full-size
# network and the same architecture from random initialisation are fine-tuned on
# SST-2 and MRPC under the paper's protocol (3 seeds; batches grouped by length, for
# time, where the released code draws them at random:
# FINETUNE_FLAGS=--config.length_grouped_batches=0 for that), and a Table-5-style
# table is printed beside the paper's GLUE scores.
# TASKS (default 'sst-2 mrpc') names the fine-tuning tasks, in any order:
#   sst-2, mrpc     GLUE, the paper's protocol as above (accuracy, F1);
#   ner, chunking, pos   CoNLL-2003's columns 3, 2 and 1 (entity F1 and chunk F1 as
#                   conlleval counts them, word accuracy), from the first TAG_SENTENCES
#                   training sentences (default 4000 of the 14,041; 0 for all), cut to
#                   64 pieces, 3 seeds in random batches, as benchmarks/tagging_gain.sh.
#
#   bash benchmarks/objective_ablation.sh OUT [BUDGET_TFLOP]
#
# BUDGET_TFLOP (default 200) is each run's train FLOPs in TFLOP, as
# electra_jax.flops counts them: steps = budget / that objective's FLOPs per step
# (ELECTRA on this model: 33.4 GFLOP a step, so 200 TFLOP is 5,995 steps; BERT's
# one network at the masked positions only gets 7,592; All-Tokens MLM, with the
# MLM softmax at every token, 3,394). The model is benchmarks/cpu_recipe.sh's, the
# one that benchmarks/pretraining_gain.sh showed pays on SST-2 (4 layers of width
# 128): the largest a 2-core CPU pretrains in minutes per thousand steps.
#
# Rows, in the order they run (the ELECTRA-vs-BERT comparison comes first):
#   electra_t3      ELECTRA sampling at temperature 3, the CPU recipe's setting;
#   mlm             BERT;
#   electra         ELECTRA at the paper's temperature 1;
#   electra_15, replace_mlm, all_tokens_mlm (temperature 1, as the paper);
#   electric (Electric, not in Table 5) only when ROWS names it.
# Fairness: every row trains at each learning rate of the grid LRS (default
# '1e-3 2e-3'; warmup 10% of the steps, then linear decay), and keeps the one whose
# checkpoint fine-tunes best on 1,000 SST-2 examples (10 epochs, lr 1e-3, 3 seeds,
# median dev accuracy; with one rate, as LRS=1e-3, there is no selection to run); the
# table reports the whole grid, with each run's last pretraining window
# (benchmarks/objective_table.py). 5e-4, the paper's Small rate,
# lost that selection for ELECTRA (temperature 3) and BERT at 200 TFLOP, so it is
# not in the default grid (docs/experiments/2026-11-25_objective_ablation.md).
# With two rates or more, they are compared at SELECT_AT (default 1: whole runs) of
# each run's steps, on the learning-rate schedule of the whole run. Below 1, each run
# stops there (main's --stop_at_step) and only the chosen one goes on to the end, where
# it is bit for bit the run that never stopped: SELECT_AT=0.5 costs half a run per
# extra rate instead of a whole one, about a sixth of the table's time. It is not the
# default because at 200 TFLOP it picked the wrong rate for Replace MLM: 2e-3 by 0.010
# half-way, where whole runs picked 1e-3 by 0.023 and the paper's protocol scored 1e-3's
# run 0.79 on SST-2 against 2e-3's 0.77. It agreed with whole runs for ELECTRA at
# temperatures 3 and 1 and for BERT, and All-Tokens MLM's rates tied
# (docs/experiments/2026-11-25_objective_ablation.md).
#
# Source launch/xla_flags.sh for the platform first. Rerunning the command resumes:
# pretraining continues from its newest checkpoint (a finished one only restores)
# and fine-tuning runs whose results.json exists are skipped, so it runs in pieces.
# Each job's wall time and exit status go to OUT/times.tsv, and the table ends with
# each lane's total over all the pieces, stopped ones included: to stop a run without
# losing its time, send SIGTERM to its python processes (pretraining saves its step).
# ROWS='electra_t3 mlm' limits the rows; PRETRAIN_FLAGS adds flags to every
# pretraining run and its FLOPs count, after the recipe's (a larger model on a GPU:
# '--config.model.num_layers=12 --config.model.hidden_size=256 ...'), and
# FINETUNE_FLAGS to every fine-tuning run (one set of each per OUT, kept in
# OUT/pretrain_flags and OUT/finetune_flags: a rerun into it with others is refused;
# to fine-tune the same pretraining otherwise, link each OUT/pretrain/ROW-lrLR into a new
# OUT, then run that with the same PRETRAIN_FLAGS and the new FINETUNE_FLAGS: its
# pretraining only restores); RANDOM_INIT=0 leaves out the random-initialisation row,
# which depends on neither the objective nor the budget, when another budget has it.
# PARALLEL=2 runs the rows in two lanes, lane K taking rows K, K+2, ... in turn,
# its output in OUT/logs/laneK.log; random initialisation's TASKS are dealt out to the
# lanes the same way, each lane running its share after its first row. On CPU lane K
# is pinned to core K (taskset): on 2 cores two pinned processes do 1.2-1.3x the work
# of one process on both (docs/performance.md measured 1.27x for fine-tuning). On a GPU
# the lanes share it unpinned, each process allocating only what it uses
# (XLA_PYTHON_CLIENT_PREALLOCATE=false): this model is far too small to fill one.
set -euo pipefail

usage='usage: bash benchmarks/objective_ablation.sh OUT [BUDGET_TFLOP]'
out=${1:?$usage}
budget=${2:-200}
data=${ELECTRA_JAX_DATA:-$(dirname "$0")/../../shared/data}
read -r -a lrs <<< "${LRS:-1e-3 2e-3}"
read -r -a rows <<< "${ROWS:-electra_t3 mlm electra electra_15 replace_mlm all_tokens_mlm}"
read -r -a tasks <<< "${TASKS:-sst-2 mrpc}"
tag_sentences=${TAG_SENTENCES:-4000}
read -r -a finetune_flags <<< "${FINETUNE_FLAGS:-}"
lanes=${PARALLEL:-1}
select_at=${SELECT_AT:-1}
# Checked before the corpus is prepared, which takes a minute.
if ! python -c 'import math, sys; sys.exit(not 0 < float(sys.argv[1]) < math.inf)' "$budget" \
    2> /dev/null; then
  echo "error: BUDGET_TFLOP=$budget: give each row's train FLOPs in TFLOP, a number above 0" >&2
  exit 2
fi
if ! python -c 'import sys; sys.exit(not 0 < float(sys.argv[1]) <= 1)' "$select_at" 2> /dev/null; then
  echo "error: SELECT_AT=$select_at: give the share of each run's steps, above 0 and at" \
    "most 1, at which the learning rates are compared (1: whole runs)" >&2
  exit 2
fi

task_flags() {  # task_flags TASK: sets $task_flags to the finetune flags of TASK's data
  # and protocol; exits if TASK is none of TASKS' names.
  case $1 in
    # Length-grouped batches: an SST-2 seed in 9 minutes of a core instead of 25, with
    # BERT's and ELECTRA's medians within 0.005 of random batches' (performance.md).
    sst-2 | mrpc)
      task_flags=(--task="$1" --data_dir="$data/glue" --config.length_grouped_batches=32
                  --config.max_seq_length=128) ;;
    ner | chunking | pos)
      local -A column=([ner]=3 [chunking]=2 [pos]=1)
      task_flags=(--task=conll2003 --data_dir="$data/conll2003" --label_column="${column[$1]}"
                  --config.max_train_examples="$tag_sentences" --config.max_seq_length=64) ;;
    *)
      echo "error: TASKS names '$1': give some of sst-2 mrpc (GLUE) and ner chunking pos" \
        "(CoNLL-2003)" >&2
      exit 2 ;;
  esac
}
for task in "${tasks[@]}"; do task_flags "$task"; done  # A misspelt task fails here, first.

if ! [[ $tag_sentences =~ ^[0-9]+$ ]]; then
  echo "error: TAG_SENTENCES=$tag_sentences: give how many CoNLL-2003 training sentences" \
    "tagging fine-tunes on (0: all 14,041)" >&2
  exit 2
fi
if ! [[ $lanes =~ ^[1-9][0-9]*$ ]] || ((lanes > $(nproc))); then
  echo "error: PARALLEL=$lanes: give a number of lanes from 1 to the $(nproc) cores this" \
    "process may use (nproc)" >&2
  exit 2
fi
# One OUT holds one set of PRETRAIN_FLAGS and one of FINETUNE_FLAGS, kept in
# OUT/pretrain_flags and OUT/finetune_flags for the table's heading (the paper's figures
# are for its own settings): a rerun with others would mix two recipes in one row, or
# skip the fine-tunes already made with the old flags and report them as the new.
keep_flags() {  # keep_flags NAME: records $NAME in OUT, or exits if OUT has other flags.
  local file flags=${!1:-}
  file=$out/$(tr '[:upper:]' '[:lower:]' <<< "$1")
  if [[ -f $file && $(< "$file") != "$flags" ]]; then
    echo "error: $1='$flags', but $out was run with $1='$(< "$file")' ($file): give" \
      "these flags an OUT of their own, or give the same flags to go on with it" >&2
    exit 2
  fi
  mkdir -p "$out"
  printf '%s\n' "$flags" > "$file"
}
keep_flags PRETRAIN_FLAGS
keep_flags FINETUNE_FLAGS
# The data and model of the recipe (benchmarks/cpu_recipe.sh), PRETRAIN_FLAGS included:
# $model.
source "$(dirname "$0")/cpu_recipe.sh"

objective() { [[ $1 == electra_t3 ]] && echo electra || echo "$1"; }
temperature() { [[ $1 == electra_t3 ]] && echo 3 || echo 1; }

steps_for() {  # Train steps that spend the budget, for objective $1.
  python -m electra_jax.flops "${model[@]}" --config.objective.name="$1" --budget_tflop="$budget"
}

timed() {  # timed JOB COMMAND...: runs it, then adds "JOB<TAB>seconds<TAB>lane<TAB>status"
  # to OUT/times.tsv, and returns its status. A piece that failed or was stopped (143:
  # SIGTERM, after which pretraining saved its step) counts too: the rerun goes on from
  # what it did. objective_table.py prints each lane's total over all the pieces.
  local job=$1 start status=0
  shift
  start=$(date +%s)
  "$@" || status=$?
  printf '%s\t%d\t%s\t%d\n' "$job" $(($(date +%s) - start)) "${lane:-0}" "$status" \
    >> "$out/times.tsv"
  return "$status"
}

# A finished fine-tune of another checkpoint than the one asked for now is refused: a
# rerun with another SELECT_AT or LRS, where the choice of rate changed, would keep it.
check_finished='
import json, pathlib, sys
path, init, step = sys.argv[1:]
done = json.loads(pathlib.Path(path).read_text())
was = (pathlib.Path(done["init"]).name, done["pretraining_step"])
now = (pathlib.Path(init).name, int(step))
if not done.get("random_init") and was != now:
  sys.exit(f"error: {path} fine-tuned {was[0]} at step {was[1]}, but this run asks for "
           f"{now[0]} at step {now[1]} (SELECT_AT or LRS changed?): give this table an OUT "
           "of its own, or remove that folder to fine-tune again")
'

finetune() {  # finetune TASK INIT STEP OUT [flags...]: fine-tunes INIT's checkpoint of
  # step STEP, the newest; skipped if OUT/results.json exists. The flags follow TASK's own.
  local task=$1 init=$2 step=$3 run=$4
  shift 4
  if [[ -f $run/results.json ]]; then
    python -c "$check_finished" "$run/results.json" "$init" "$step" || exit 2
    return
  fi
  task_flags "$task"
  timed "finetune ${run#"$out"/}" \
    python -m electra_jax.finetune "${task_flags[@]}" --init="$init" --workdir="$run" \
    --config.num_seeds=3 "$@" "${finetune_flags[@]}" | tail -1
}

few_labels=(--config.max_train_examples=1000 --config.num_train_epochs=10
            --config.learning_rate=1e-3 --config.layerwise_lr_decay=1.0
            --config.max_seq_length=64)
median() {  # median RESULTS_JSON METRIC
  python -c "import json, sys; print(json.load(open(sys.argv[1]))['median']['dev'][sys.argv[2]])" \
    "$@"
}

paper_finetune() {  # paper_finetune NAME INIT STEP 'TASK...' [flags...]: each task named
  # (some of TASKS, space-separated), into OUT/finetune/TASK-NAME.
  local name=$1 init=$2 step=$3 named
  read -r -a named <<< "$4"
  shift 4
  for task in "${named[@]}"; do
    finetune "$task" "$init" "$step" "$out/finetune/$task-$name" "$@"
  done
}

pretrain() {  # pretrain ROW LR STEPS [main's flags...]: resumes from its newest checkpoint.
  local row=$1 lr=$2 steps=$3 run=$out/pretrain/$1-lr$2
  shift 3
  timed "pretrain ${run#"$out"/}" \
    python -m electra_jax.main "${model[@]}" --workdir="$run" \
    --config.objective.name="$(objective "$row")" \
    --config.objective.temperature="$(temperature "$row")" --config.learning_rate="$lr" \
    --config.num_train_steps="$steps" --config.warmup_steps=$((steps / 10)) "$@"
}

choose_lr() {  # choose_lr ROW STEPS: pretrains ROW at each rate of LRS to SELECT_AT of
  # its STEPS, fine-tunes each checkpoint on 1,000 SST-2 examples, sets $best_lr to the
  # rate whose median is highest, and trains that run to the end.
  local row=$1 steps=$2 compare_at best=-1 lr score
  compare_at=$(python -c 'import sys; print(round(int(sys.argv[1]) * float(sys.argv[2])))' \
    "$steps" "$select_at")
  for lr in "${lrs[@]}"; do
    # A run past compare_at (the chosen one, on a rerun) only restores.
    pretrain "$row" "$lr" "$steps" --stop_at_step="$compare_at"
    finetune sst-2 "$out/pretrain/$row-lr$lr" "$compare_at" "$out/select/$row-lr$lr" \
      "${few_labels[@]}"
    score=$(median "$out/select/$row-lr$lr/results.json" accuracy)
    if python -c "import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]))" \
        "$score" "$best"; then
      best_lr=$lr best=$score
    fi
  done
  echo "$row: learning rate $best_lr (1,000-example SST-2 median $best at step $compare_at" \
    "of $steps)"
  ((compare_at == steps)) || pretrain "$row" "$best_lr" "$steps"
}

run_row() {  # run_row I: row I of ROWS: its learning-rate grid, then the paper protocol at
  # the best rate, then its lane's share of the random-initialisation fine-tunes.
  local i=$1 row=${rows[$1]} steps best_lr
  steps=$(steps_for "$(objective "$row")")
  if ((${#lrs[@]} == 1)); then  # Nothing to choose between: no selection fine-tune.
    best_lr=${lrs[0]}
    pretrain "$row" "$best_lr" "$steps"
    echo "$row: learning rate $best_lr (the only rate in LRS)"
  else
    choose_lr "$row" "$steps"
  fi
  paper_finetune "$row" "$out/pretrain/$row-lr$best_lr" "$steps" "${tasks[*]}"
  echo "$best_lr" > "$out/pretrain/$row.lr"
  # Random initialisation of the same architecture (any checkpoint names it) runs once,
  # its tasks dealt out to the lanes that have rows, each taking its share after its
  # first row; with one lane, after the second row, so that ELECTRA, BERT and random
  # come first.
  local n=${#rows[@]} busy share=() j
  busy=$((lanes < n ? lanes : n))
  if [[ ${RANDOM_INIT:-1} != 0 ]] && ((lanes > 1 ? i < lanes : i == (n > 1))); then
    for ((j = i % lanes; j < ${#tasks[@]}; j += busy)); do share+=("${tasks[j]}"); done
    paper_finetune random "$out/pretrain/$row-lr$best_lr" "$steps" "${share[*]}" \
      --config.random_init=True
  fi
}

if ((lanes == 1)); then
  for i in "${!rows[@]}"; do run_row "$i"; done
else
  mkdir -p "$out/logs"
  # As every command does, so that libtpu (the test extra) does not look for a TPU here.
  backend=$(python -c 'from electra_jax import cli; cli.use_cpu_without_accelerator()
import jax; print(jax.default_backend())')
  [[ $backend == cpu ]] || export XLA_PYTHON_CLIENT_PREALLOCATE=false
  pids=()
  for ((lane = 0; lane < lanes; lane++)); do
    mine=() names=()
    for ((i = lane; i < ${#rows[@]}; i += lanes)); do mine+=("$i") names+=("${rows[i]}"); done
    ((${#mine[@]})) || continue
    where="sharing the $backend"
    [[ $backend != cpu ]] || where="core $lane"
    echo "lane $lane ($where): ${names[*]}; its output goes to $out/logs/lane$lane.log"
    (
      # Its processes inherit the core.
      [[ $backend != cpu ]] || taskset -p -c "$lane" "$BASHPID" > /dev/null
      for i in "${mine[@]}"; do run_row "$i"; done
    ) >> "$out/logs/lane$lane.log" 2>&1 &  # Appended: a rerun keeps the earlier pieces' logs.
    pids+=($!)
  done
  failed=0
  for lane in "${!pids[@]}"; do
    wait "${pids[lane]}" || { echo "lane $lane failed: see $out/logs/lane$lane.log" >&2; failed=1; }
  done
  ((failed == 0)) || exit 1
fi

python "$(dirname "$0")/objective_table.py" "$out" "$budget" "${lrs[@]}"
