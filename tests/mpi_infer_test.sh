#!/usr/bin/env bash
# mpi_infer_test.sh MPIRUN STRATA CHECKPOINT TEXT: generation and evaluation
# under `mpirun -np 2 ... --tp 2` against the single process, through the CLI
# as a user runs them: the same tokens (greedy, sampled, early exit,
# self-speculative, a skip plan, Layer-Parallel plans, whose pairs put one
# whole layer on each rank) and the same perplexity (to 1e-6 relative, plain
# and Layer-Parallel);
# and a tp 2 benchmark over a modelled link latency.
set -u
mpirun=$1 strata=$2 ckpt=$3 text=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
tp2() { "$mpirun" -np 2 --oversubscribe --bind-to none "$strata" "$@" --tp 2 --device cpu; }
fail=0
for opts in "--temperature 0" "--temperature 0.8 --seed 3" "--exit-layer 3" \
            "--exit-layer 3 --self-speculative --speculations 3" \
            "--exit-layer 3 --self-speculative --temperature 0.9 --seed 5" \
            "--plan standard*2,skip,standard*2" "--plan lp*4,standard" \
            "--plan standard,lp*4 --exit-layer 3 --self-speculative --speculations 3"; do
  # shellcheck disable=SC2086
  one=$("$strata" generate --device cpu --checkpoint "$ckpt" --prompt "Once upon a time" --max-new-tokens 40 $opts 2>/dev/null)
  # shellcheck disable=SC2086
  two=$(tp2 generate --checkpoint "$ckpt" --prompt "Once upon a time" --max-new-tokens 40 $opts 2>/dev/null)
  if [[ -z $one || $one != "$two" ]]; then
    echo "FAIL generate $opts: tp 1 gave '$one', tp 2 gave '$two'"
    fail=1
  else
    echo "ok generate $opts"
  fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ppl() { grep -o '"ppl": *[0-9.e+-]*' "$1" | head -1 | sed 's/.*: *//'; }
for plan in standard*5 lp*4,standard; do
  "$strata" eval --device cpu --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" --quiet --out "$dir/one.json" >/dev/null || fail=1
  tp2 eval --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" --quiet --out "$dir/two.json" >/dev/null || fail=1
  a=$(ppl "$dir/one.json") b=$(ppl "$dir/two.json")
  if awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }'; then
    echo "ok eval perplexity ($plan): tp 1 $a, tp 2 $b"
  else
    echo "FAIL eval perplexity ($plan): tp 1 '$a', tp 2 '$b'"
    fail=1
  fi
done
# A benchmark over a modelled link latency (--link-delay-us) on a ladder plan.
out=$(tp2 bench generate --checkpoint "$ckpt" --plan "ladder*5" --max-new-tokens 8 --repeat 1 \
      --link-delay-us 50 2>&1)
if grep -qE "^plain +[0-9]+ +[0-9.]+ +1.00x" <<<"$out"; then
  echo "ok bench generate ladder*5 --link-delay-us 50"
else
  echo "FAIL bench generate ladder*5 --link-delay-us 50: $out"
  fail=1
fi
# SPD's pipeline with its distillations spread over two processes gives the
# single process's report (the same blocks, losses and perplexities).
src=$(cd "$(dirname "$0")/.." && pwd)
spd() {
  local out=$1
  shift
  "$@" spd "$src/recipes/spd-quickstart.toml" --set spd.checkpoint="$ckpt" --set spd.out_dir="$out" \
    --set calibration.text="$text" --set calibration.samples=4 --set calibration.seq_len=32 \
    --set b2b.epochs=1 --set spd.tau1=-100.0 --set spd.tau2=0.0 --set spd.budget=3 \
    --set report.text="$text" --set report.tasks=[] --quiet >/dev/null 2>&1 &&
    grep -E '"(class|mse_zero_shot|mse_distilled|ppl|calibration_ppl)"' "$out/report.json"
}
one=$(spd "$dir/spd1" "$strata")
two=$(spd "$dir/spd2" "$mpirun" -np 2 --oversubscribe --bind-to none "$strata")
if [[ $one == *mse_distilled* && $one == "$two" ]]; then
  echo "ok spd pipeline: mpirun -np 2 gives the single process's report"
else
  echo "FAIL spd pipeline: one process: '$one'; two: '$two'"
  fail=1
fi
exit $fail
