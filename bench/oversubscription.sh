#!/usr/bin/env bash
# strata on a shared machine: how much a busy core costs, with the waiting
# policy strata chooses at start (core/threads.h: passive when the machine is
# busy, libgomp's default spin when idle) against libgomp's default forced
# (GOMP_SPINCOUNT=300000, what every strata ran with before).
#
#   bench/oversubscription.sh [--build DIR] [--ctest "ARGS"] [--no-ctest]
#
# Prints, each a line of numbers:
#   1. alone: `bench model` (6L-288, 512 tokens, 30 steps) tokens/s and
#      `generate` (stories260K, 500 tokens) decode tokens/s, with each policy;
#   2. two `bench model` at once (the second started 1 s after the first, into
#      a busy machine): each one's tokens/s (fair share: half the first line's);
#   3. `generate` started 1 s after a `bench model`: both rates;
#   4. unless --no-ctest: a part of the test suite (--ctest, default a set of
#      unit tests of about two minutes) serially and with -j2: the wall times
#      and their ratio (the target: -j2 within 1.3x of the serial time on two
#      cores; -j2 gives each test about one core, so equal times mean no loss),
#      and -j2 again with libgomp's default.
# A benchmark, not a test: run it alone on the machine. Needs a build (default
# build/) and writes a converted stories260K under a temporary directory.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
CTEST_ARGS="-R ^(Generate|Model|Regex|BpeTokenizer|HfRoundTrip|BackendParity)\\."
RUN_CTEST=1
while (($#)); do
  case "$1" in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --ctest) CTEST_ARGS=$2; shift 2 ;;
    --no-ctest) RUN_CTEST=0; shift ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "oversubscription: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
STRATA="$BUILD/strata"
[[ -x $STRATA ]] || { echo "oversubscription: no $STRATA (build first)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$ROOT"
"$STRATA" convert llama2c data/models/stories260K/stories260K.bin "$tmp/s.h5" \
  --tokenizer data/tokenizers/tok512.model >/dev/null 2>&1

bench() {
  "$STRATA" bench model --model 288 --tokens 512 --vocab 512 --steps 30 --peak 100 --device cpu \
    2>&1 | sed -n 's/.*tokens_per_s=\([0-9.]*\).*/\1/p'
}
gen() {
  "$STRATA" generate --device cpu --checkpoint "$tmp/s.h5" --prompt Once --max-new-tokens 500 \
    --ignore-eos 2>&1 >/dev/null | sed -n 's/.*decode \([0-9.]*\) tokens\/s.*/\1/p'
}

echo "machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs"
for policy in strata libgomp-default; do
  if [[ $policy == libgomp-default ]]; then export GOMP_SPINCOUNT=300000; else unset GOMP_SPINCOUNT; fi
  a_bench=$(bench)
  a_gen=$(gen)
  bench >"$tmp/b1" & sleep 1; b2=$(bench); wait
  b1=$(cat "$tmp/b1")
  bench >"$tmp/b3" & sleep 1; g2=$(gen); wait
  b3=$(cat "$tmp/b3")
  echo "[$policy] alone: bench model ${a_bench} tokens/s, generate ${a_gen} tokens/s"
  echo "[$policy] two bench model at once: first ${b1}, second ${b2} tokens/s (alone ${a_bench})"
  echo "[$policy] generate beside bench model: generate ${g2} tokens/s, bench model ${b3} tokens/s"
done
unset GOMP_SPINCOUNT

if ((RUN_CTEST)); then
  # shellcheck disable=SC2086
  s0=$(date +%s.%N); ctest --test-dir "$BUILD" -j1 $CTEST_ARGS >/dev/null; s1=$(date +%s.%N)
  # shellcheck disable=SC2086
  ctest --test-dir "$BUILD" -j2 $CTEST_ARGS >/dev/null; s2=$(date +%s.%N)
  # shellcheck disable=SC2086
  GOMP_SPINCOUNT=300000 ctest --test-dir "$BUILD" -j2 $CTEST_ARGS >/dev/null; s3=$(date +%s.%N)
  serial=$(echo "$s1 - $s0" | bc); parallel=$(echo "$s2 - $s1" | bc); spin=$(echo "$s3 - $s2" | bc)
  echo "ctest $CTEST_ARGS: serial ${serial} s, -j2 ${parallel} s (ratio $(echo "scale=2; $parallel / $serial" | bc)); -j2 with libgomp's default ${spin} s"
fi
