#!/usr/bin/env bash
# The GPU build's checks, for a GPU machine that has the tracked files and the
# carry folder staged by tests/gpu_prepare.sh (docs/build.md, "A GPU build"):
# configures and builds build-gpu (STRATA_GPU_BUILD=ON, whatever optional
# feature the machine lacks left out), then runs `strata info`, a few training
# steps of the debug recipe on cuda and on simt (no checkpoint, the carried
# dataset), the device, backend-parity and op tests, and the kernel lab.
# Prints one line per check and "gpu_check: N passed, M failed" last.
#
# Usage: tests/gpu_check.sh [--build DIR] [--jobs N] [--help]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-gpu
jobs=$(nproc)
while (($#)); do
  case $1 in
    --help | -h) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --build) build=$(realpath -m "$2"); shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
carry=$root/.gpu-carry
[[ -d $carry/include ]] || { echo "gpu_check: no $carry: run tests/gpu_prepare.sh where the packages are" >&2; exit 1; }

generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$root" -B "$build" "${generator[@]}" -DSTRATA_GPU_BUILD=ON -DSTRATA_VENDOR_DIR="$carry" |
  grep -E '^-- strata:' || { echo "gpu_check: configuration failed" >&2; exit 1; }
targets=(strata test_backend_parity test_simt test_model_device test_ops strata-kernel-lab
         strata-kernel-lab-cuda)
cmake --build "$build" -j "$jobs" --target "${targets[@]}" >"$build/gpu_check_build.log" 2>&1 ||
  { tail -30 "$build/gpu_check_build.log"; echo "gpu_check: build failed" >&2; exit 1; }

passed=0 failed=0
check() {  # check NAME COMMAND...: runs it, keeps its output in $build/gpu_check_NAME.log
  local name=$1 log=$build/gpu_check_$1.log
  shift
  if (cd "$root" && "$@") >"$log" 2>&1; then
    passed=$((passed + 1))
    echo "ok      $name"
  else
    failed=$((failed + 1))
    echo "FAILED  $name (tail of $log:)"
    tail -5 "$log" | sed 's/^/    /'
  fi
}
check info "$build/strata" info
cat "$build/gpu_check_info.log"
for device in cuda simt; do
  check "train_$device" "$build/strata" train recipes/debug.toml --set run.device=$device \
    --set data.tokenizer= --set data.dataset="$carry/data/debug-shakespeare" \
    --set model.vocab_size=512 --set checkpoint.final=false --set log.sample_tokens=0 \
    --set training.steps=5 --set log.interval=1 --set run.dir="$build/gpu_check_run_$device"
  grep -E '^step|^done' "$build/gpu_check_train_$device.log" | sed 's/^/    /'
done
for t in test_backend_parity test_model_device test_simt test_ops; do
  check "$t" "$build/tests/$t"
done
check kernel_lab_cuda "$build/bench/strata-kernel-lab-cuda"
check kernel_lab_simt "$build/bench/strata-kernel-lab"
echo "gpu_check: $passed passed, $failed failed"
((failed == 0))
