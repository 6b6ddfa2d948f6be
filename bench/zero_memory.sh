#!/usr/bin/env bash
# bench/zero_memory.sh: `strata train` under mpirun at dp 2 for every ZeRO
# stage (0-3) and recompute mode (none, selective, full), printing per rank the
# step time and the communication not hidden by compute (medians over the
# steps after the first, from metrics.jsonl), the data-parallel traffic and
# the waits of ZeRO-2/3's collectives, the peak resident memory and the
# estimate the run checked before it allocated (docs/distributed.md, "Scaling").
# STRATA_ZERO_PREFETCH=0 in the environment runs ZeRO-3 without gathering
# ahead (to measure what the prefetch hides).
#
#   bench/zero_memory.sh                       # 12L-768, V=32000, 4 x 256 tokens per rank
#   bench/zero_memory.sh --models 288,768,512x24 --steps 3 --out /tmp/zero.md
#   bench/zero_memory.sh --help
#
# Models: 288 (6L-288), 768 (12L-768), 512x24 (24L-512), all with vocabulary
# 32000 (the model's, the data's tokenizer is smaller), trained on the debug
# corpus (recipes/debug.toml). Each rank runs one thread; checkpoints,
# validation and the sample are off so that the peak is the training step's.
set -euo pipefail
cd "$(dirname "$0")/.."

models=768 steps=5 micro=4 seq=256 out="" zeros="0 1 2 3" modes="none selective full"
strata=${STRATA:-build/strata}
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro-batch) micro=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --zero) zeros=$2; shift 2 ;;
    --recompute) modes=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
      echo "options: --models LIST --steps N --micro-batch B --seq T --zero \"0 1 2 3\""
      echo "         --recompute \"none selective full\" --out FILE.md"
      exit 0 ;;
    *) echo "bench/zero_memory.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -x $strata ]] || { echo "bench/zero_memory.sh: $strata not built (tests/run.sh or launch/setup.sh)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=PASSIVE
prefetch=${STRATA_ZERO_PREFETCH:-1}
work=$(mktemp -d /tmp/strata-zero.XXXXXX)
trap 'rm -rf "$work"' EXIT

shape() {  # model -> --set flags
  case $1 in
    288) echo "6L-288 6 288 768 6" ;;
    768) echo "12L-768 12 768 2048 12" ;;
    512x24) echo "24L-512 24 512 1376 8" ;;
    *) echo "bench/zero_memory.sh: unknown model '$1' (288, 768, 512x24)" >&2; exit 2 ;;
  esac
}

cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1 || true)
{
  echo "CPU: ${cpu:-unknown} ($(nproc --all) cores); dp 2 (mpirun -np 2, one thread per rank)," \
    "micro-batch $micro x $seq tokens per rank, $steps steps, fp32"
  echo
  [[ $prefetch == 0 ]] && echo "ZeRO-3 without prefetch (STRATA_ZERO_PREFETCH=0)" && echo
  echo "| model | ZeRO | recompute | ms/step | communication not hidden (ms/step) | gathered / reduce-scattered per step | waits: gathers / reduce-scatters (ms/step) | peak RSS (rank 0) | estimate | estimate vs peak |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
} | tee "$work/table.md"
for m in ${models//,/ }; do
  read -r name layers hidden inter heads <<<"$(shape "$m")"
  for z in $zeros; do
    for mode in $modes; do
      log=$work/run-$m-$z-$mode.log
      mpirun -np 2 --oversubscribe --bind-to none -x STRATA_ZERO_PREFETCH="$prefetch" \
        "$strata" train recipes/debug.toml \
        --set run.dir="\"$work/run-$m-$z-$mode\"" --set data.dataset="\"$work/data\"" \
        --set model.hidden_size="$hidden" --set model.intermediate_size="$inter" \
        --set model.num_hidden_layers="$layers" --set model.num_attention_heads="$heads" \
        --set model.num_key_value_heads="$heads" --set model.vocab_size=32000 \
        --set model.max_position_embeddings="$seq" --set training.seq_len="$seq" \
        --set training.micro_batch_size="$micro" --set training.grad_accum_steps=1 \
        --set training.steps="$steps" --set training.recompute="\"$mode\"" \
        --set parallelism.zero="$z" --set checkpoint.interval=0 --set checkpoint.final=false \
        --set eval.interval=0 --set eval.batches=0 --set log.sample_prompt='""' \
        --set log.interval=1 --set log.tensorboard=false >"$log" 2>&1 ||
        { tail -5 "$log" >&2; echo "bench/zero_memory.sh: $name ZeRO-$z $mode failed" >&2; exit 1; }
      # Medians of step_s and comm_s over steps 2.. (the first builds the GEMM primitives).
      median() {
        local key=$1
        while IFS= read -r line; do
          n=$(sed -n 's/.*"step":\([0-9]*\).*/\1/p' <<<"$line")
          v=$(sed -n "s/.*\"$key\":\([0-9.e+-]*\).*/\1/p" <<<"$line")
          [[ -n $n && -n $v ]] && echo "$n $v"
        done <"$work/run-$m-$z-$mode/metrics.jsonl" | awk '$1 > 1 { print $2 * 1000 }' | sort -g |
          awk '{ v[NR] = $1 } END { if (NR) printf "%.1f", (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
      }
      ms=$(median step_s) comm=$(median comm_s)
      mem=$(sed -n 's/^memory: peak resident \(.*\) (rank 0); estimate \([^(]*\) (.*), \(.*\)% of the peak$/\1|\2|\3/p' "$log")
      [[ -n $ms && -n $mem ]] || { tail -5 "$log" >&2; echo "bench/zero_memory.sh: no timing or memory line in $log" >&2; exit 1; }
      IFS='|' read -r peak est pct <<<"$mem"
      traffic="-" waits="-"
      if ((z >= 2)); then
        zl=$(sed -n 's/^ZeRO-[23]: per step and rank \(.*\) of weights all-gathered, \(.*\) of gradients reduce-scattered; waited \([0-9.]*\) ms for gathers, \([0-9.]*\) ms for reduce-scatters.*/\1|\2|\3|\4/p' "$log")
        IFS='|' read -r g s gw sw <<<"$zl"
        traffic="$g / $s" waits="$gw / $sw"
      fi
      echo "| $name | $z | $mode | $ms | $comm | $traffic | $waits | $peak | ${est% } | ${pct}% |" | tee -a "$work/table.md"
    done
  done
done
[[ -z $out ]] || cp "$work/table.md" "$out"
