#!/usr/bin/env bash
# bench/paper_memory.sh: which training layouts of Llama2 7B, 13B and 70B fit
# 8, 64 and 512 devices of 80 GB, 8 to a node (docs/distributed.md, "Scaling"),
# from strata's layout planner (`strata train ... --dry-run --plan-memory`), with
# pipeline stages and without (--max-pp 1): 4 sequences of 4,096 tokens per
# device and step as in LayerSkip's continual pretraining, bf16 matmuls,
# LayerSkip's settings. Prints one markdown table.
#
#   bench/paper_memory.sh [--device 80GB] [--worlds "8 64 512"] [--out FILE.md]
set -euo pipefail
cd "$(dirname "$0")/.."
device=80GB worlds="8 64 512" out=""
strata=${STRATA:-build/strata}
while (($#)); do
  case $1 in
    --device) device=$2; shift 2 ;;
    --worlds) worlds=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench/paper_memory.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $strata ]] || { echo "bench/paper_memory.sh: $strata not built" >&2; exit 1; }
table=$(mktemp)
trap 'rm -f "$table"' EXIT
{
  echo "| model | devices | layouts that fit | cheapest that fits (cost) | per rank, room | cheapest without pp (cost) | per rank, room |"
  echo "|---|---|---|---|---|---|---|"
} >"$table"
# One plan: the table's best row as "layout|memory" and its cost, or why none fits.
plan() {  # model world [extra flags]
  local model=$1 world=$2
  shift 2
  # The recipe's own layout (tp 1, no ZeRO) only sets the batch, 4 sequences
  # per device; it need not fit (the command then exits 1 after the table).
  "$strata" train recipes/paper/layerskip-llama2-7b-continual.toml --dry-run \
    --plan-memory "$device" --world "$world" --node-devices 8 "$@" \
    --set model.config="\"recipes/paper/llama2-$model.json\"" \
    --set model.init_from="\"checkpoints/llama2-$model.h5\"" --set parallelism.tp=1 \
    --set parallelism.zero=0 --set training.micro_batch_size=4 --set training.grad_accum_steps=1 \
    2>&1 || true
}
# Columns: # tp pp dp zero recompute schedule micro accum bubble per-rank(2) room(2) cost
best() {
  local rows
  rows=$(grep -E '^#\s+[0-9]+\s+[0-9]+\s+[0-9]+\s+[0-3]\s+' <<<"$1" || true)
  if [[ -z $rows ]]; then
    echo "$(grep -o "no layout on .*" <<<"$1" | sed 's/; use more devices.*//' || echo "no plan")||"
    return
  fi
  head -1 <<<"$rows" | awk '{
    pp = $3 > 1 ? sprintf(" x pp %s (%s, bubble %s)", $3, $7, $10) : ""
    printf "tp %s%s x dp %s, ZeRO-%s, %s, micro-batch %s x %s|%s %s, %s %s|%s", $2, pp, $4, $5, $6, $8, $9, $11, $12, $13, $14, $15
  }'
}
for model in 7b 13b 70b; do
  for world in $worlds; do
    with=$(plan "$model" "$world")
    without=$(plan "$model" "$world" --max-pp 1)
    fit=$(sed -n 's/^# layouts on .*: \([0-9]* of [0-9]*\) fit.*/\1/p' <<<"$with")
    IFS='|' read -r a_layout a_mem a_cost <<<"$(best "$with")"
    IFS='|' read -r b_layout b_mem b_cost <<<"$(best "$without")"
    echo "| Llama2 ${model^^} | $world | ${fit:-0} | $a_layout${a_cost:+ (cost $a_cost)} | $a_mem | $b_layout${b_cost:+ (cost $b_cost)} | $b_mem |" >>"$table"
  done
done
cat "$table"
[[ -z $out ]] || cp "$table" "$out"
