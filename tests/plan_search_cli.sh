#!/usr/bin/env bash
# plan_search_cli.sh MPIRUN STRATA CHECKPOINT TEXT: `strata plan search` as a
# user runs it on stories260K at tp 2: the chosen plan and the front; a rerun
# that scores nothing (every plan from the cache); the chosen plan's
# perplexity exactly as `strata eval --perplexity` gives it; the chosen plan
# run by eval, generate and train alone and over 2 processes; and the search
# itself under mpirun (the link measured over a modelled latency, the front
# timed), whose scores equal the single process's.
set -u
mpirun=$1 strata=$2 ckpt=$3 text=$4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail=0
check() {  # check NAME COMMAND...: passes when the command does
  local name=$1
  shift
  if "$@"; then echo "ok $name"; else echo "FAIL $name"; fail=1; fi
}
# shellcheck disable=SC2317  # called through "$@"-style wrappers below
quietly() { "$@" >"$dir/quiet.txt" 2>&1 || { tail -5 "$dir/quiet.txt"; return 1; }; }
tp2() { "$mpirun" -np 2 --oversubscribe --bind-to none "$strata" "$@"; }
# shellcheck disable=SC2054  # 16,8,1 is one argument, not three
search=(plan search --device cpu --checkpoint "$ckpt" --calibration "$text" --tp 2
        --budget ppl+15% --workload 16,8,1 --repeat 1 --quiet)

"$strata" "${search[@]}" --link 1Gbit,100us --out "$dir/one" >"$dir/first.txt" 2>&1
cat "$dir/first.txt"
check "search chooses a plan" grep -qE '^chosen: --plan "[^"]+": ppl [0-9.]+ \(\+[0-9.]+%; budget \+15.00%\), predicted speed-up [0-9.]+x$' "$dir/first.txt"
check "search scores plans" grep -qE '\([1-9][0-9]* plan\(s\) scored, 0 from the cache\)' "$dir/first.txt"
check "search writes the front" grep -q '</svg>' "$dir/one/front.svg"
"$strata" "${search[@]}" --link 1Gbit,100us --out "$dir/one" >"$dir/again.txt" 2>&1
check "a rerun scores nothing" grep -qE '\(0 plan\(s\) scored, [1-9][0-9]* from the cache\)' "$dir/again.txt"
check "a rerun chooses the same" test "$(grep '^chosen:' "$dir/first.txt")" = "$(grep '^chosen:' "$dir/again.txt")"

# The chosen plan and its perplexity from search.json ("chosen" is its last object).
plan=$(sed -n '/"chosen": {/,/}/p' "$dir/one/search.json" | sed -nE 's/^ *"plan": "([^"]*)",?$/\1/p')
ppl=$(sed -n '/"chosen": {/,/}/p' "$dir/one/search.json" | sed -nE 's/^ *"ppl": ([0-9.e+-]*),?$/\1/p')
echo "chosen plan: $plan, ppl $ppl"
check "the chosen plan is not standard" test -n "$plan" -a "$plan" != "standard*5"
"$strata" eval --device cpu --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" --quiet \
  --out "$dir/eval.json" >/dev/null
eval_ppl=$(grep -o '"ppl": *[0-9.e+-]*' "$dir/eval.json" | head -1 | sed 's/.*: *//')
check "eval gives the search's ppl ($eval_ppl)" test "$eval_ppl" = "$ppl"

# The plan runs in generate, eval and train, alone and over 2 processes.
one=$("$strata" generate --device cpu --checkpoint "$ckpt" --plan "$plan" --prompt "Once upon" \
      --max-new-tokens 12 2>/dev/null)
two=$(tp2 generate --device cpu --tp 2 --checkpoint "$ckpt" --plan "$plan" --prompt "Once upon" \
      --max-new-tokens 12 2>/dev/null)
check "generate runs the plan alone and at tp 2 alike" test -n "$one" -a "$one" = "$two"
tp2 eval --device cpu --tp 2 --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" --quiet \
  --out "$dir/eval2.json" >/dev/null
eval2=$(grep -o '"ppl": *[0-9.e+-]*' "$dir/eval2.json" | head -1 | sed 's/.*: *//')
check "eval at tp 2 ($eval2) equals the search's ppl" \
  awk -v a="$ppl" -v b="$eval2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 1e-6 * a) }'
train=(train recipes/debug.toml --set run.device=cpu --set model.init_from="$ckpt"
       --set model.plan="$plan" --set training.steps=2 --set eval.interval=0
       --set checkpoint.interval=0 --set log.sample_tokens=0 --set data.dataset="$dir/data")
check "train runs the plan" quietly "$strata" "${train[@]}" --set run.dir="$dir/train1"
check "train runs the plan at tp 2" quietly tp2 "${train[@]}" --set run.dir="$dir/train2" \
  --set parallelism.tp=2

# The recovery recipes: the SPD blocks of the chosen plan distilled (spd.toml),
# and for a ladder plan its ladder layers fine-tuned (train.toml), each scored
# before and after by recover.sh.
check "recovery: SPD blocks by B2B" grep -q '^blocks = \["[0-9]"' "$dir/one/recover/spd.toml"
"$strata" "${search[@]}" --link 1Gbit,100us --kinds ladder --budget ppl+25% \
  --recovery-base recipes/debug.toml --recovery-steps 2 --out "$dir/ladder" >"$dir/ladder.txt" 2>&1
check "recovery: ladder layers trainable" grep -qE '^trainable = \["layers:[0-9]-[0-9]"' "$dir/ladder/recover/train.toml"
check "recovery: the script scores before and after" \
  sh -c "'$dir/ladder/recover/recover.sh' 2>&1 | grep -E 'calibration ppl before [0-9.]+, after [0-9.]+'"

# A task budget: the chosen plan's accuracy is strata eval's.
"$strata" "${search[@]}" --link 1Gbit,100us --budget ppl+30%,piqa-5 --task-limit 40 \
  --out "$dir/task" >"$dir/task.txt" 2>&1
check "task budget: the standard accuracy" grep -qE '^piqa: standard acc [0-9.]+%' "$dir/task.txt"
check "task budget: chosen within both" grep -qE '^chosen: .*piqa acc [0-9.]+%; budget \+30.00%, piqa acc -5 points\)' "$dir/task.txt"
tplan=$(sed -n '/"chosen": {/,/^  }/p' "$dir/task/search.json" | sed -nE 's/^ *"plan": "([^"]*)",?$/\1/p')
tacc=$(sed -n '/"chosen": {/,/^  }/p' "$dir/task/search.json" | sed -n '/"accuracy": \[/{n;p}' | tr -d ' ,')
"$strata" eval --device cpu --checkpoint "$ckpt" --plan "$tplan" --tasks piqa --limit 40 --quiet \
  --out "$dir/task-eval.json" >/dev/null
eacc=$(sed -n '/"acc": {/,/}/p' "$dir/task-eval.json" | sed -nE 's/^ *"value": ([0-9.e+-]*).*/\1/p' | head -1)
check "task budget: eval gives the search's accuracy ($eacc)" \
  awk -v a="$tacc" -v b="$eacc" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-12) }'

# The search under mpirun: the link measured (100 us modelled per collective),
# the front timed; every plan's score as the single process's.
tp2 "${search[@]}" --link measured --link-delay-us 100 --self-speculative --out "$dir/two" >"$dir/mpi.txt" 2>&1
cat "$dir/mpi.txt"
check "mpirun: the link measured" grep -qE 'tp 2 over [0-9.]+ Gbit/s, [0-9.]+ us \(measured\)' "$dir/mpi.txt"
check "mpirun: self-speculation weighed" grep -qE '^  (with self-speculative decoding: --exit-layer|self-speculative decoding: no exit)' "$dir/mpi.txt"
check "mpirun: the chosen plan timed" grep -qE '^chosen: .*, measured [0-9.]+x( \(chosen by the measured speed-up\))?$' "$dir/mpi.txt"
std_one=$(grep -o '^standard: ppl [0-9.]*' "$dir/first.txt")
std_two=$(grep -o '^standard: ppl [0-9.]*' "$dir/mpi.txt")
check "mpirun: the same standard ppl ($std_two)" test -n "$std_one" -a "$std_one" = "$std_two"
exit $fail
