#!/usr/bin/env bash
# bench/pipeline_bubble.sh: the pipeline's measured bubble against the closed
# form, for each schedule and number of micro-batches, on the 12-layer debug
# model (docs/distributed.md, "Pipeline parallelism"). Each cell is one
# `strata train` of 20 steps under mpirun (one thread per rank); the figure is
# the run's last "pipeline: the stages waited for each other X%" line.
#
#   bench/pipeline_bubble.sh [--pp 2] [--micro "2 4 8 16"] [--schedules "gpipe 1f1b interleaved"]
#                            [--link RATE] [--out FILE.md]
#
# --link RATE (e.g. 1gbit, 100mbit): the ranks and mpirun run inside a network
# namespace of their own whose loopback is shaped to RATE by tbf, with MPI
# over TCP on it, so every message between stages crosses the shaped link
# (../shared/design/slow-link.md; needs root, ip and tc; the namespace is
# removed on every exit). Without it the ranks talk through shared memory.
# The interleaved schedule runs 2 stages per rank and needs micro-batches
# that divide by pp (others are left blank). Prints one markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
pp=2 micro="2 4 8 16" schedules="gpipe 1f1b interleaved" link="" out=""
strata=${STRATA:-build/strata}
while (($#)); do
  case $1 in
    --pp) pp=$2; shift 2 ;;
    --micro) micro=$2; shift 2 ;;
    --schedules) schedules=$2; shift 2 ;;
    --link) link=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/pipeline_bubble.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $strata ]] || { echo "bench/pipeline_bubble.sh: $strata not built" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench/pipeline_bubble.sh: mpirun not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
ns=""
cleanup() {
  [[ -z $ns ]] || ip netns del "$ns" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
launch=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 -x OMP_WAIT_POLICY=PASSIVE
  --mca mpi_yield_when_idle 1)
if [[ -n $link ]]; then
  ns="strata-bubble-$$"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$link" burst 512kb latency 50ms
  launch=(ip netns exec "$ns" "${launch[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo
    --mca oob_tcp_if_include lo)
fi
# One cell: "measured / formula", or "-" where the schedule cannot run.
cell() {  # schedule micro-batches
  local sched=$1 m=$2 v=1
  [[ $sched == interleaved ]] && v=2
  if [[ $sched == interleaved ]] && ((m % pp)); then
    echo "-"
    return
  fi
  local log=$work/$sched-$m.log
  "${launch[@]}" -np "$pp" "$strata" train recipes/debug.toml --set model.num_hidden_layers=12 \
    --set parallelism.pp="$pp" --set parallelism.schedule="\"$sched\"" \
    --set parallelism.virtual_stages="$v" --set training.grad_accum_steps="$m" \
    --set training.micro_batch_size=2 --set training.steps=20 --set checkpoint.final=false \
    --set log.sample_prompt= --set run.dir="\"$work/run-$sched-$m\"" >"$log" 2>&1 ||
    { tail -3 "$log" >&2; echo "bench/pipeline_bubble.sh: the $sched run with $m micro-batches failed" >&2; exit 1; }
  sed -n 's/^pipeline: the stages waited for each other \([0-9.]*%\).* leaves \([0-9.]*%\))$/\1 \/ \2/p' "$log"
}
cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "pp $pp, 12-layer debug model (h = 64), 2 sequences of 64 tokens per micro-batch, 20 steps;"
  echo "CPU: ${cpu:-unknown} ($(nproc --all) cores), one thread per rank;" \
    "link: ${link:-shared memory}; $(date -u +%Y-%m-%d). Measured / formula:"
  echo
  header="| micro-batches m |" rule="|---|"
  for s in $schedules; do
    if [[ $s == interleaved ]]; then header+=" $s, v = 2 |"; else header+=" $s |"; fi
    rule+="---|"
  done
  echo "$header"
  echo "$rule"
} >"$work/table.md"
for m in $micro; do
  row="| $m |"
  for s in $schedules; do row+=" $(cell "$s" "$m") |"; done
  echo "$row" >>"$work/table.md"
done
cat "$work/table.md"
[[ -z $out ]] || cp "$work/table.md" "$out"
