#!/usr/bin/env bash
# `strata plan search` for the combination of techniques and for each
# technique alone, at tp 2 over a shaped link, under mpirun (the front timed).
# See -h.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: launch/plan_evidence.sh --checkpoint C --calibration FILE --out DIR
                               [--budget ppl+5%] [--workload 128,64,1] [--rate 1gbit]
                               [--delay-us 100] [--tp 2] [--kinds "all skip ladder spd lp"]
                               [--recover "all ..."] [--recovery-steps 50]
                               [--recovery-base recipes/pretrain-base.toml]
                               [--heldout FILE]

Runs `mpirun -np TP strata plan search --tp TP --link measured` in a network
namespace whose loopback is shaped with tbf to --rate, with --delay-us of
modelled latency per tp collective (tc netem is missing here), once for all
kinds together (DIR/all) and once per kind alone (DIR/<kind>), sharing one
cache of scored plans. Then prints, per search, the chosen plan, its
perplexity rise and its predicted and measured speed-ups, and the prediction
error over every timed plan. --recover runs the recovery script of the named
searches' chosen plans (alone, one process) and prints perplexity before and
after; --heldout also scores a text the recovery did not see, before and
after. Needs root (ip netns).
USAGE
}

ckpt="" cal="" out="" budget=ppl+5% workload=128,64,1 rate=1gbit delay_us=100 tp=2
kinds="all skip ladder spd lp" recover="" steps=50 base=recipes/pretrain-base.toml heldout=""
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --checkpoint) ckpt=$2; shift 2 ;;
    --calibration) cal=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --workload) workload=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --delay-us) delay_us=$2; shift 2 ;;
    --tp) tp=$2; shift 2 ;;
    --kinds) kinds=$2; shift 2 ;;
    --recover) recover=$2; shift 2 ;;
    --recovery-steps) steps=$2; shift 2 ;;
    --recovery-base) base=$2; shift 2 ;;
    --heldout) heldout=$2; shift 2 ;;
    *) echo "plan_evidence.sh: unknown option '$1' (see -h)" >&2; exit 2 ;;
  esac
done
[[ -n $ckpt && -n $cal && -n $out ]] || {
  echo "plan_evidence.sh: --checkpoint, --calibration and --out are required (see -h)" >&2
  exit 2
}
[[ -f $ckpt ]] || { echo "plan_evidence.sh: checkpoint '$ckpt' not found" >&2; exit 1; }
[[ $(id -u) -eq 0 ]] || { echo "plan_evidence.sh: the shaped link needs root (ip netns)" >&2; exit 1; }
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${STRATA_BIN:-$root/${BUILD_DIR:-build}/strata}
[[ -x $bin ]] || { echo "plan_evidence.sh: $bin not found: build strata first" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

ns=strata-plan-$$
cleanup() { ip netns del "$ns" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
ip netns add "$ns"
ip -n "$ns" link set lo up
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 512kb latency 50ms

mkdir -p "$out"
"$bin" info | grep -E "^(cpu|kernels)"
for k in $kinds; do
  mkdir -p "$out/$k"
  # One cache of scored plans for all searches (the same checkpoint and text).
  [[ -f $out/quality.json ]] && cp "$out/quality.json" "$out/$k/quality.json"
  sel=()
  [[ $k != all ]] && sel=(--kinds "$k")
  echo "== $k" >&2
  ip netns exec "$ns" mpirun -np "$tp" --bind-to none --oversubscribe -x OMP_NUM_THREADS=1 \
    --mca btl tcp,self --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    "$bin" plan search --checkpoint "$ckpt" --calibration "$cal" --tp "$tp" --budget "$budget" \
    --workload "$workload" --link measured --link-delay-us "$delay_us" "${sel[@]}" \
    --recovery-base "$base" --recovery-steps "$steps" --quiet --out "$out/$k" >"$out/$k/table.txt"
  cp "$out/$k/quality.json" "$out/quality.json"
done

printf '\n%-8s %-44s %9s %10s %10s\n' search "chosen plan" rise predicted measured
for k in $kinds; do
  sed -nE "s/^chosen: --plan \"([^\"]*)\": ppl [0-9.]+ \(([+-][0-9.]+%).*predicted speed-up ([0-9.]+x)(, measured ([0-9.]+x))?.*/$k \1 \2 \3 \5/p" \
    "$out/$k/table.txt" | awk '{ printf "%-8s %-44s %9s %10s %10s\n", $1, $2, $3, $4, $5 }'
done
# The cost model against the timed plans, per search.
for k in $kinds; do
  grep -h '^timed:' "$out/$k/table.txt" | sed "s/^/$k: /"
done

# The perplexity of a `strata eval --out` JSON.
ppl() { grep -o '"ppl": *[0-9.e+-]*' "$1" | head -1 | sed 's/.*: *//'; }
for k in $recover; do
  script=$out/$k/recover/recover.sh
  [[ -x $script ]] || { echo "$k: no recovery (the chosen plan is standard)"; continue; }
  echo "== recovery of $k's chosen plan" >&2
  OMP_NUM_THREADS=2 STRATA=$bin "$script" 2>"$out/$k/recover/log.txt" | sed "s/^/$k: /"
  [[ -n $heldout ]] || continue
  # The script's first and last evals name the checkpoints before and after;
  # its second comment line holds the plan.
  plan=$(sed -n '3s/^#   //p' "$script")
  mapfile -t ckpts < <(grep -o "eval --checkpoint '[^']*'" "$script" | cut -d"'" -f2)
  last=$((${#ckpts[@]} - 1))
  for i in 0 "$last"; do
    OMP_NUM_THREADS=2 "$bin" eval --checkpoint "${ckpts[$i]}" --plan "$plan" \
      --perplexity "$heldout" --quiet --out "$out/$k/recover/heldout-$i.json" >/dev/null
  done
  echo "$k: held-out ppl before $(ppl "$out/$k/recover/heldout-0.json")," \
    "after $(ppl "$out/$k/recover/heldout-$last.json")"
done
