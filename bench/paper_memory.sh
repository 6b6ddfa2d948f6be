#!/usr/bin/env bash
# bench/paper_memory.sh: which training layouts of Llama2 7B, 13B and 70B fit
# 8 and 64 devices of 80 GB (docs/distributed.md, "Scaling"), from strata's memory estimate
# (`strata train ... --dry-run --plan-memory`): 4 sequences of 4,096 tokens
# per device and step as in LayerSkip's continual pretraining, bf16 matmuls,
# LayerSkip's settings (they cost no memory). Prints one markdown table.
#
#   bench/paper_memory.sh [--device 80GB] [--worlds "8 64"] [--out FILE.md]
set -euo pipefail
cd "$(dirname "$0")/.."
device=80GB worlds="8 64" out=""
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
  echo "| model | devices | layouts that fit | cheapest that fits (cost) | per rank, room | smallest of those 12 cheapest | per rank, room |"
  echo "|---|---|---|---|---|---|---|"
} >"$table"
for model in 7b 13b 70b; do
  for world in $worlds; do
    # The recipe's own layout (tp 1, no ZeRO) only sets the batch, 4 sequences
    # per device; it need not fit (the command then exits 1 after the table).
    plan=$("$strata" train recipes/paper/layerskip-llama2-7b-continual.toml --dry-run \
      --plan-memory "$device" --world "$world" --set model.config="\"recipes/paper/llama2-$model.json\"" \
      --set model.init_from="\"checkpoints/llama2-$model.h5\"" --set parallelism.tp=1 \
      --set parallelism.zero=0 --set training.micro_batch_size=4 --set training.grad_accum_steps=1 \
      2>&1 || true)
    fit=$(sed -n 's/^# layouts on .*: \([0-9]* of [0-9]*\) fit.*/\1/p' <<<"$plan")
    rows=$(grep -E '^#\s+[0-9]+\s+[0-9]+\s+[0-3]\s+' <<<"$plan" || true)
    if [[ -z $rows ]]; then
      why=$(grep -o "no layout on .*" <<<"$plan" || echo "no plan")
      echo "| Llama2 ${model^^} | $world | 0 | ${why} | | | |" >>"$table"
      continue
    fi
    # Columns: # tp dp zero recompute micro accum per-rank(2) room(2) cost
    row() {
      awk '{printf "tp %s x dp %s, ZeRO-%s, %s, micro-batch %s x %s|%s %s, %s %s", $2,$3,$4,$5,$6,$7,$8,$9,$10,$11}'
    }
    best=$(head -1 <<<"$rows" | row)
    cost=$(head -1 <<<"$rows" | awk '{print $12}')
    # The smallest footprint among the 12 cheapest (those the planner prints).
    small=$(awk '{v=$8; if ($9=="MB") v/=1000; print v, $0}' <<<"$rows" | sort -g | head -1 |
      cut -d' ' -f2- | row)
    echo "| Llama2 ${model^^} | $world | $fit | ${best%%|*} (cost $cost) | ${best#*|} | ${small%%|*} | ${small#*|} |" >>"$table"
  done
done
cat "$table"
[[ -z $out ]] || cp "$table" "$out"
