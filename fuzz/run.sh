#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (build-fuzz/, STRATA_FUZZ=ON) and
# runs each target for SECONDS_PER_TARGET seconds on a scratch copy of its seed
# corpus (fuzz/corpus/<target> plus fuzz/regressions/<target>; the committed
# corpus is never grown), then prints one line per target: executions, exec/s,
# coverage (libFuzzer's cov: edges and ft: features at the end), corpus size
# and crashes (in strata's code, and inside the libraries it calls).
#
#   fuzz/run.sh [SECONDS_PER_TARGET] [TARGET ...]     (default: 10 s, every target)
#
# A crash (or leak, out-of-memory, timeout, broken promise) in strata's code
# stops that target; its reproducer is moved to <build>/crashes/<target>/ and
# the script exits 1 after the table. Replay one with
# <build>/fuzz/fuzz_<target> <file>; once fixed, commit it to
# fuzz/regressions/<target>/ (the replay tests run it from then on). A crash
# inside libhdf5, libsentencepiece or libprotobuf (their bugs: fuzz/README.md)
# is counted under lib-crash, its reproducer kept in
# <build>/crashes/<target>/<library>/, and the target goes on.
#
# Environment: STRATA_FUZZ_BUILD (build directory, default build-fuzz in the
# repository), STRATA_FUZZ_JOBS (build jobs, default 2), STRATA_FUZZ_OPT (the
# optimisation of a new build directory, default -O1; -O0 builds in half the
# time and runs slower: the bounded CTest run uses it), STRATA_FUZZ_TIMEOUT
# (seconds one input may take before it counts as a hang, default 5; the
# bounded CTest run on its -O0 build allows 25). Exit 77 when clang++
# or libFuzzer is missing (launch/setup.sh installs clang and libclang-rt-14-dev).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
seconds=${1:-10}
shift || true
all_targets=(recipe shards sft task checkpoint safetensors hf_config llama2c tokenizer jinja)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")
build=${STRATA_FUZZ_BUILD:-$repo/build-fuzz}
jobs=${STRATA_FUZZ_JOBS:-2}
input_timeout=${STRATA_FUZZ_TIMEOUT:-5}

case $seconds in
  '' | *[!0-9]* | 0) echo "fuzz/run.sh: SECONDS_PER_TARGET must be a whole number >= 1, got" \
                       "'$seconds'" >&2
                     exit 2 ;;
esac
for t in "${targets[@]}"; do
  if [[ " ${all_targets[*]} " != *" $t "* ]]; then
    echo "fuzz/run.sh: unknown target '$t' (${all_targets[*]})" >&2
    exit 2
  fi
done

# --- the toolchain ----------------------------------------------------------
if ! command -v clang++ > /dev/null || ! command -v clang > /dev/null; then
  echo "fuzz/run.sh: clang++ not found: install clang and libclang-rt-14-dev (launch/setup.sh)" >&2
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$probe/p.cpp"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/p.cpp" -o "$probe/p" 2> "$probe/err"; then
  echo "fuzz/run.sh: clang++ cannot link libFuzzer (install libclang-rt-14-dev):" >&2
  head -3 "$probe/err" >&2
  exit 77
fi

# --- build ------------------------------------------------------------------
# One run per build directory: a second one would delete the first's corpus.
mkdir -p "$build"
exec 9> "$build/.fuzz-run.lock"
if ! flock -n 9; then
  echo "fuzz/run.sh: $build is in use by another fuzz/run.sh (set STRATA_FUZZ_BUILD)" >&2
  exit 1
fi
start=$(date +%s)
if [ ! -f "$build/build.ninja" ] && [ ! -f "$build/Makefile" ]; then
  generator=()
  command -v ninja > /dev/null && generator=(-G Ninja)
  CC=clang CXX=clang++ cmake -S "$repo" -B "$build" "${generator[@]}" -DSTRATA_FUZZ=ON \
    -DSTRATA_CUDA=OFF -DSTRATA_BUILD_TESTS=OFF -DCMAKE_BUILD_TYPE=None \
    -DSTRATA_FUZZ_OPT="${STRATA_FUZZ_OPT:--O1}" > "$probe/cmake.log" \
    || { cat "$probe/cmake.log" >&2; exit 1; }
fi
cmake --build "$build" --target fuzzers -j "$jobs" > "$probe/build.log" 2>&1 \
  || { tail -40 "$probe/build.log" >&2; exit 1; }
echo "fuzz: built $build/fuzz/fuzz_* in $(( $(date +%s) - start )) s"

# --- run --------------------------------------------------------------------
work=$build/run
rm -rf "$work"
mkdir -p "$work/logs" "$work/tmp"
export STRATA_FUZZ_TMP=$work/tmp
# Leaks are findings too; a sanitizer report ends the process with a stack.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=0:detect_leaks=1:allocator_may_return_null=0}
# Named frames need llvm-symbolizer: the unversioned name comes with Debian's
# llvm package, the versioned binary with llvm-14 (not always installed).
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && ! command -v llvm-symbolizer > /dev/null; then
  for sym in /usr/lib/llvm-*/bin/llvm-symbolizer; do
    if [ -x "$sym" ]; then export ASAN_SYMBOLIZER_PATH=$sym; fi
  done
fi
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$repo/fuzz/lsan.supp:print_suppressions=0}
# The CPU's name for the table; never fatal (a chroot may lack lscpu's /sys).
cpu=$({ lscpu 2> /dev/null || true; } | sed -n 's/^Model name: *//p' | head -1)
echo "fuzz: ${#targets[@]} target(s), $seconds s each, on $(nproc) cores${cpu:+ of $cpu}"

# Where a crash happened, from the first stack frame of its report that is
# neither the sanitizer runtime nor libFuzzer: "library:<name>" inside a
# system library strata calls (libhdf5, libsentencepiece, libprotobuf: their
# bugs, reported but not failures of the run), else "strata". Harness
# findings and undefined behaviour (only strata's code is instrumented) are
# strata's.
classify() {
  awk '
    /FINDING: |runtime error: / { print "strata"; found = 1; exit }
    /^ *#[0-9]+ 0x/ {
      # (The sanitizer intercepts libc string and memory functions inside the
      # harness binary: such a frame, strdup under libhdf5 say, is whoever called it.)
      if ($0 ~ /__asan|__interceptor|__sanitizer|__lsan| in (malloc|calloc|realloc|free|operator new|operator delete|str[a-z]*dup|mem(cpy|move|set|cmp|chr)|str(n?len|n?cpy|n?cmp|n?cat|chr|rchr|str)) |fuzzer::|LLVMFuzzer/) next
      if ($0 ~ /\/lib(c|m|gcc_s|stdc\+\+)\.so/) next  # a signal frame, memcpy: who called it
      if (match($0, /lib(hdf5|sentencepiece|protobuf)[A-Za-z0-9_]*/)) {
        print "library:" substr($0, RSTART, RLENGTH); found = 1; exit
      }
      # strata is linked into the harness statically: a frame in another
      # shared library (libz under libhdf5'"'"'s filters, ...) belongs to whoever
      # called it, further down.
      if ($0 ~ /\(\/[^ )]*\.so[.0-9]*\+0x/) next
      # Without a symbolizer no frame has a name: the sanitizer, libFuzzer
      # and strata all show as offsets in the harness binary. Attribute the
      # report to the first shared library below them, if any (strata calls
      # libhdf5 and the others, not the reverse), else to strata (END).
      if ($0 !~ / in /) next
      print "strata"; found = 1; exit
    }
    END { if (!found) print "strata" }' "$1"
}

rows=()
failed=0
for t in "${targets[@]}"; do
  corpus=$work/corpus/$t
  artifacts=$work/artifacts/$t
  rm -rf "$build/crashes/$t"
  mkdir -p "$corpus" "$artifacts"
  for src in "$repo/fuzz/corpus/$t" "$repo/fuzz/regressions/$t"; do
    [ -d "$src" ] && find "$src" -type f -exec cp -t "$corpus" {} +
  done
  dict=()
  [ -f "$repo/fuzz/dict/$t.dict" ] && dict=("-dict=$repo/fuzz/dict/$t.dict")
  # A crash inside a library ends libFuzzer's run: it is restarted on the
  # grown corpus until the target's time is used up; a crash of strata's own
  # code ends the target.
  execs=0 elapsed=0 crashes=0 lib_crashes=0 run=0 status=ok last=""
  while [ $((seconds - elapsed)) -ge 1 ]; do
    run=$((run + 1))
    log=$work/logs/$t.$run.log
    rc=0
    t0=$(date +%s)
    "$build/fuzz/fuzz_$t" "$corpus" "${dict[@]}" -max_total_time=$((seconds - elapsed)) \
      -print_final_stats=1 -rss_limit_mb=2048 -malloc_limit_mb=1024 -timeout="$input_timeout" \
      -close_fd_mask=1 -artifact_prefix="$artifacts/" > "$log" 2>&1 || rc=$?
    elapsed=$((elapsed + $(date +%s) - t0))
    rm -rf "${STRATA_FUZZ_TMP:?}"/*
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    execs=$((execs + ${n:-0}))
    line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
    [ -n "$line" ] && last=$line
    found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'oom-*' \
      -o -name 'timeout-*' \))
    if [ -n "$found" ]; then
      where=$(classify "$log")
      if [[ $where == library:* ]]; then
        lib_crashes=$((lib_crashes + 1))
        mkdir -p "$build/crashes/$t/${where#library:}"
        mv $found "$build/crashes/$t/${where#library:}/"
        echo "fuzz: $t: crash inside ${where#library:} (not strata's code; restarting): $log"
        continue
      fi
      crashes=$((crashes + 1))
      status=CRASH
      mkdir -p "$build/crashes/$t"
      mv $found "$build/crashes/$t/"
      cp "$log" "$work/logs/$t.log"
      break
    fi
    [ "$rc" -eq 0 ] || status="exit $rc"
    break
  done
  [ -f "$work/logs/$t.log" ] || cp "$log" "$work/logs/$t.log"
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<< "$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<< "$last")
  corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<< "$last")
  rate=$((execs / (elapsed > 0 ? elapsed : 1)))
  [ "$status" = ok ] || failed=1
  rows+=("$(printf '%-12s %12s %8s %8s %8s %12s %8s %8s  %s' "$t" "$execs" "$rate" \
    "${cov:--}" "${ft:--}" "${corp:--}" "$crashes" "$lib_crashes" "$status")")
  echo "fuzz: $t: $status after $elapsed s (log $work/logs/$t.log)"
done

echo
printf '%-12s %12s %8s %8s %8s %12s %8s %8s  %s\n' target executions exec/s cov ft corpus crashes \
  lib-crash status | tee "$work/summary.txt"
printf '%s\n' "${rows[@]}" | tee -a "$work/summary.txt"
if [ "$failed" -ne 0 ]; then
  echo
  for t in "${targets[@]}"; do
    [ -d "$build/crashes/$t" ] || continue
    for f in "$build/crashes/$t"/*; do
      [ -f "$f" ] && echo "fuzz: $t: reproducer $f (replay: $build/fuzz/fuzz_$t $f)"
    done
    grep -m1 -E 'ERROR: |FINDING: |runtime error: ' "$work/logs/$t.log" | sed "s/^/fuzz: $t: /" || true
  done
  echo "fuzz: logs in $work/logs; after the fix commit each reproducer to fuzz/regressions/<target>/"
  exit 1
fi
