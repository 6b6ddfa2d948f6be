#!/usr/bin/env bash
# strata convert plan: the converted checkpoint records the new plan and
# evaluates exactly like the original under --plan (same perplexity line).
# strata convert weights: f32 evaluates exactly like the original; bf16 is
# stored as bfloat16, is smaller, and evaluates nearly alike.
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
a=$("$strata" eval --device cpu --checkpoint "$ckpt" --plan "$plan" --perplexity "$text" 2>/dev/null | tail -1)
b=$("$strata" eval --device cpu --checkpoint "$out" --perplexity "$text" 2>/dev/null | tail -1)
c=$("$strata" eval --device cpu --checkpoint "$ckpt" --perplexity "$text" 2>/dev/null | tail -1)
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

f32=$work/weights-f32.h5 bf16=$work/weights-bf16.h5
rm -f "$f32" "$bf16"
"$strata" convert weights "$ckpt" "$f32" | grep -qF "the f32 weights of" || { echo "FAIL: convert weights f32"; exit 1; }
"$strata" convert weights "$ckpt" "$bf16" --dtype bf16 | grep -qF "the bf16 weights of" || { echo "FAIL: convert weights bf16"; exit 1; }
"$strata" inspect "$bf16" | grep -qE "^parameters: .*bfloat16\)$" || { echo "FAIL: inspect does not say bfloat16"; exit 1; }
"$strata" inspect "$f32" | grep -qE "^optimizer: +none" || { echo "FAIL: f32 weights kept an optimizer"; exit 1; }
d=$("$strata" eval --device cpu --checkpoint "$f32" --perplexity "$text" 2>/dev/null | tail -1)
e=$("$strata" eval --device cpu --checkpoint "$bf16" --perplexity "$text" 2>/dev/null | tail -1)
echo "f32 weights:  $d"
echo "bf16 weights: $e"
[[ $d == "$c" ]] || { echo "FAIL: the f32 weights evaluate differently"; exit 1; }
[[ $e != "$c" && -n $e ]] || { echo "FAIL: the bf16 weights were not rounded"; exit 1; }
s32=$(stat -c %s "$f32") s16=$(stat -c %s "$bf16")
(( s16 < s32 * 7 / 10 )) || { echo "FAIL: bf16 file $s16 bytes is not much smaller than f32 $s32"; exit 1; }
if msg=$("$strata" convert weights "$ckpt" "$work/y.h5" --dtype f16 2>&1); then echo "FAIL: f16 accepted"; exit 1; fi
grep -qF "is not f32 or bf16" <<<"$msg" || { echo "FAIL: '$msg'"; exit 1; }
echo "convert weights: OK"
