#!/usr/bin/env bash
# strata convert plan: the converted checkpoint records the new plan and
# evaluates exactly like the original under --plan (same perplexity line).
# Usage: convert_plan_test.sh STRATA CKPT TEXT WORKDIR
set -euo pipefail
strata=$1 ckpt=$2 text=$3 work=$4
plan="standard*2,ladder*3"
mkdir -p "$work"
out=$work/converted-ladder.h5
rm -f "$out"
"$strata" convert plan "$ckpt" "$out" --plan "$plan" | grep -qF "plan $plan on the weights of" \
  || { echo "convert plan: unexpected output"; exit 1; }
"$strata" inspect "$out" | grep -qE "^plan: +standard\*2,ladder\*3$" || { echo "inspect: plan missing"; exit 1; }
a=$("$strata" eval --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" 2>/dev/null | tail -1)
b=$("$strata" eval --checkpoint "$out" --perplexity "$text" 2>/dev/null | tail -1)
c=$("$strata" eval --checkpoint "$ckpt" --perplexity "$text" 2>/dev/null | tail -1)
echo "under --plan: $a"
echo "converted:    $b"
echo "original:     $c"
[[ -n $a && $a == "$b" ]] || { echo "FAIL: the converted checkpoint evaluates differently"; exit 1; }
[[ $a != "$c" ]] || { echo "FAIL: the ladder plan changed nothing"; exit 1; }
# Refusals: no --plan, a plan of the wrong length, writing over the input.
refused() {  # refused <expected text> <args...>: exit 1 and one line naming it
  local want=$1 msg
  shift
  if msg=$("$strata" convert plan "$@" 2>&1); then echo "FAIL: accepted: $*"; exit 1; fi
  grep -qF -- "$want" <<<"$msg" || { echo "FAIL: '$msg' does not say '$want'"; exit 1; }
}
refused "--plan is required" "$ckpt" "$work/x.h5"
refused "has 2 layers but the model has 5" "$ckpt" "$work/x.h5" --plan "ladder*2"
refused "is the input" "$ckpt" "$ckpt" --plan "$plan"
[[ ! -e $work/x.h5 ]] || { echo "FAIL: a refused conversion wrote a file"; exit 1; }
echo "convert plan: OK"
