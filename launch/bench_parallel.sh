#!/usr/bin/env bash
# Time per training step, split into compute and communication, for the
# parallel layouts one machine can run: tp=1/2 x dp=1/2. See -h.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: launch/bench_parallel.sh [--steps N] [--recipe R] [--layouts "DPxTP ..."] [-- --set ...]

Trains recipe R (default recipes/quickstart.toml: 6 layers, hidden 288, global
batch 16 x 256 tokens) for N steps (default 12) at each layout, every layout
with the same global batch (micro-batch 16 / dp per rank) and all the cores
of this machine shared among the ranks, and prints one row per layout: the
mean time per step (steps 3..N), the part spent waiting in collectives
(communication not hidden behind compute) and the rest (compute), of the
former the tail of the data-parallel gradient all-reduces still running after
backward (grad wait), and the throughput. Layouts default to "1x1 2x1 1x2 2x2" (dp x tp). Extra options
after -- go to every `strata train`.

The first two steps (warm-up) are left out of the means. Runs go to
runs/bench-parallel-<layout> and are removed afterwards; the dataset of the
recipe is prepared first if it is missing.
USAGE
}

steps=12 recipe=recipes/quickstart.toml layouts="1x1 2x1 1x2 2x2"
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --steps) steps=$2; shift 2 ;;
    --recipe) recipe=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "bench_parallel.sh: unknown option '$1' (see -h)" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[0-9]+$ && $steps -ge 4 ]] || { echo "bench_parallel.sh: --steps must be >= 4" >&2; exit 2; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${STRATA_BIN:-$root/${BUILD_DIR:-build}/strata}
[[ -x $bin ]] || { echo "bench_parallel.sh: $bin not found: build strata first" >&2; exit 1; }
[[ -f $recipe ]] || { echo "bench_parallel.sh: recipe '$recipe' not found" >&2; exit 1; }
"$bin" info | grep -E "^(cpu|kernels|matmul|precision)"  # what the numbers were measured on
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
cores=$(nproc)
global=16

common=(--set training.steps="$steps" --set log.interval=1 --set eval.interval=0
  --set eval.batches=0 --set checkpoint.interval=0 --set checkpoint.final=false
  --set checkpoint.resume=none --set log.sample_prompt= "$@")

printf '%-8s %6s %8s %12s %16s %16s %16s %10s\n' layout ranks threads "step (ms)" "compute (ms)" \
  "comm (ms)" "grad wait (ms)" "tok/s"
for layout in $layouts; do
  dp=${layout%x*} tp=${layout#*x}
  np=$((dp * tp))
  threads=$((cores / np))
  ((threads < 1)) && threads=1
  dir=runs/bench-parallel-$layout
  rm -rf "$dir"
  args=("${common[@]}" --set run.dir="$dir" --set parallelism.tp="$tp"
    --set training.micro_batch_size=$((global / dp)))
  log=$(mktemp)
  if ((np == 1)); then
    OMP_NUM_THREADS=$threads "$bin" train "$recipe" "${args[@]}" >"$log" 2>&1 || { cat "$log"; exit 1; }
  else
    policy=()
    ((np > cores)) && policy=(-x OMP_WAIT_POLICY=PASSIVE)
    [[ -n ${STRATA_PROGRESS_POLLS:-} ]] && policy+=(-x STRATA_PROGRESS_POLLS)
    OMP_NUM_THREADS=$threads mpirun -np "$np" --oversubscribe --bind-to none -x OMP_NUM_THREADS \
      "${policy[@]}" "$bin" train "$recipe" "${args[@]}" >"$log" 2>&1 || { cat "$log"; exit 1; }
  fi
  # Means over steps 3..N from metrics.jsonl (step_s, comm_s per logged step).
  awk -v layout="$layout" -v np="$np" -v threads="$threads" '
    { step = $0; sub(/.*"step":/, "", step); step += 0
      if (step < 3) next
      s = $0; sub(/.*"step_s":/, "", s); s += 0
      c = $0; if (c ~ /"comm_s":/) { sub(/.*"comm_s":/, "", c); c += 0 } else c = 0
      w = $0; if (w ~ /"grad_wait_s":/) { sub(/.*"grad_wait_s":/, "", w); w += 0 } else w = 0
      t = $0; sub(/.*"tokens_per_s":/, "", t); t += 0
      n++; S += s; C += c; W += w; T += t }
    END { if (!n) { print "no steps recorded"; exit 1 }
          printf "%-8s %6d %8d %12.1f %16.1f %16.1f %16.1f %10.0f\n", layout, np, threads,
                 1e3 * S / n, 1e3 * (S - C) / n, 1e3 * C / n, 1e3 * W / n, T / n }' "$dir/metrics.jsonl"
  rm -rf "$dir" "$log"
done
