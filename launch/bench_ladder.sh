#!/usr/bin/env bash
# Tensor-parallel generation speed of layer plans (standard, ladder, lp, hybrid)
# on the links one machine has: shared memory, TCP over loopback, and TCP over
# a loopback shaped to a bandwidth limit (a network namespace with tbf). See -h.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: launch/bench_ladder.sh --checkpoint C [--plans "P1 P2 ..."] [--links "shm tcp slow"]
                              [--rate 1gbit] [--delay-us 100] [--tp 2] [--tokens N] [--repeat R]

Runs `strata bench generate` under mpirun with --tp (default 2, one thread per
rank) for each layer plan (default: "standard*L ladder*L standard*L/2,ladder*L/2
nocomm*L") over each link:
  shm   Open MPI's shared memory between the ranks (the default transport)
  tcp   TCP over loopback (--mca btl tcp,self)
  slow  TCP over the loopback of a network namespace shaped with tbf to --rate
        (needs root; the namespace is created and removed by this script), plus
        a modelled latency: every tp collective completes no earlier than
        --delay-us after it starts (bench generate --link-delay-us; no qdisc
        here adds latency, tc netem is missing)
and prints prefill and decode tokens/s per plan and link, each plan's decode
speed-up over the standard plan on the same link, and, where the nocomm plan
(no communication at all) ran, the fraction of the standard plan's
communication time each plan hides: (1/std - 1/plan) / (1/std - 1/nocomm) in
seconds per decoded token. The weights are the checkpoint's under each plan
(speed does not depend on what they compute).
USAGE
}

ckpt="" plans="" links="shm tcp slow" rate=1gbit delay_us=100 tp=2 tokens=64 repeat=3
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --checkpoint) ckpt=$2; shift 2 ;;
    --plans) plans=$2; shift 2 ;;
    --links) links=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay-us) delay_us=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    *) echo "bench_ladder.sh: unknown option '$1' (see -h)" >&2; exit 2 ;;
  esac
done
[[ -n $ckpt ]] || { echo "bench_ladder.sh: --checkpoint is required (see -h)" >&2; exit 2; }
[[ -f $ckpt ]] || { echo "bench_ladder.sh: checkpoint '$ckpt' not found" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${STRATA_BIN:-$root/${BUILD_DIR:-build}/strata}
[[ -x $bin ]] || { echo "bench_ladder.sh: $bin not found: build strata first" >&2; exit 1; }
if [[ -z $plans ]]; then
  L=$("$bin" inspect "$ckpt" | sed -nE 's/^model: +([0-9]+) layers.*/\1/p')
  [[ -n $L ]] || { echo "bench_ladder.sh: cannot read the layer count of $ckpt" >&2; exit 1; }
  plans="standard*$L ladder*$L standard*$((L / 2)),ladder*$((L - L / 2)) nocomm*$L"
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

ns=strata-slow-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
if [[ " $links " == *" slow "* ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "bench_ladder.sh: the slow link needs root (ip netns)" >&2; exit 1; }
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 512kb latency 50ms
fi

"$bin" info | grep -E "^(cpu|kernels)"
printf '%-28s %-6s %14s %14s %10s\n' plan link "prefill t/s" "decode t/s" "vs standard"
declare -A base free speed
for link in $links; do
  for plan in $plans; do
    mpi=(mpirun -np "$tp" --bind-to none --oversubscribe -x OMP_NUM_THREADS=1)
    prefix=() extra=()
    case $link in
      shm) ;;
      tcp) mpi+=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo) ;;
      slow)
        prefix=(ip netns exec "$ns")
        extra=(--link-delay-us "$delay_us")
        mpi+=(--mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo) ;;
      *) echo "bench_ladder.sh: unknown link '$link' (shm, tcp, slow)" >&2; exit 2 ;;
    esac
    log=$(mktemp)
    "${prefix[@]}" "${mpi[@]}" "$bin" bench generate --checkpoint "$ckpt" --tp "$tp" \
      --plan "$plan" --max-new-tokens "$tokens" --repeat "$repeat" "${extra[@]}" >"$log" 2>&1 \
      || { cat "$log"; rm -f "$log"; exit 1; }
    read -r pre dec < <(awk '$1 == "plain" { print $2, $3 }' "$log")
    rm -f "$log"
    [[ -n ${dec:-} ]] || { echo "bench_ladder.sh: no 'plain' row from bench generate" >&2; exit 1; }
    # The baseline is the all-standard plan, the bound the all-nocomm one.
    [[ $plan =~ ^standard(\*[0-9]+)?$ ]] && base[$link]=$dec
    [[ $plan =~ ^nocomm(\*[0-9]+)?$ ]] && free[$link]=$dec
    speed[$link/$plan]=$dec
    ratio=""
    [[ -n ${base[$link]:-} ]] && ratio=$(awk -v a="$dec" -v b="${base[$link]}" 'BEGIN { printf "%.2fx", a / b }')
    printf '%-28s %-6s %14s %14s %10s\n' "$plan" "$link" "$pre" "$dec" "$ratio"
  done
done

# The share of the communication each plan hides, per link (needs the
# standard and nocomm plans; "-" where the link's communication is too cheap
# to measure: nocomm not faster than standard).
printf '\ncommunication hidden (decode; 1/std - 1/plan over 1/std - 1/nocomm, seconds per token)\n'
for link in $links; do
  [[ -n ${base[$link]:-} && -n ${free[$link]:-} ]] || continue
  for plan in $plans; do
    [[ $plan =~ ^(standard|nocomm)(\*[0-9]+)?$ ]] && continue
    awk -v s="${base[$link]}" -v p="${speed[$link/$plan]}" -v f="${free[$link]}" \
        -v name="$plan" -v link="$link" 'BEGIN {
      comm = 1 / s - 1 / f
      if (comm <= 0) { printf "%-28s %-6s %10s\n", name, link, "-"; exit }
      printf "%-28s %-6s %9.0f%%\n", name, link, 100 * (1 / s - 1 / p) / comm }'
  done
done
