#!/usr/bin/env bash
# bench/gemm_library_steps.sh: whole training steps of the same model on a build
# per CPU GEMM library (docs/performance.md, "GEMM library"): the libraries'
# threads meet strata's own kernels there, which bench/gemm_libraries (the GEMM
# shapes alone) does not show. Builds build-<library>/strata (the strata
# target only; fetching .deps/ first where needed), then runs `strata bench
# train` on each in alternation, round after round, and prints the CPU and one
# markdown table of step times (ms, every round; the best in bold).
#
#   bench/gemm_library_steps.sh [--libraries onednn,onednn3,mkl] [--models 288,768]
#                               [--rounds 2] [--steps 5] [--bf16]
#
# Run it alone on the machine: two OpenMP programs at once time each other.
set -euo pipefail
cd "$(dirname "$0")/.."
libraries=onednn,onednn3,mkl models=288,768 rounds=2 steps=5 bf16=()
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "bench/gemm_library_steps.sh: $*" >&2; exit 2; }
while (($#)); do
  case $1 in
    --libraries | --models | --rounds | --steps)
      (($# >= 2)) || die "$1 needs a value"
      declare "${1#--}=$2"
      shift 2
      ;;
    --bf16) bf16=(--bf16); shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "--rounds must be a positive integer"
[[ $steps =~ ^[1-9][0-9]*$ ]] || die "--steps must be a positive integer"
IFS=, read -ra libs <<< "$libraries"
IFS=, read -ra mods <<< "$models"
((${#libs[@]})) || die "--libraries is empty"
for l in "${libs[@]}"; do
  [[ $l =~ ^(onednn|onednn3|mkl|own)$ ]] || die "unknown library '$l' (onednn, onednn3, mkl, own)"
done
for m in "${mods[@]}"; do
  [[ $m =~ ^(288|768|1024)$ ]] || die "unknown model '$m' (288, 768, 1024)"
done

for l in "${libs[@]}"; do
  case $l in
    mkl) [[ -f .deps/mkl/lib/libmkl_core.so ]] || cmake/fetch_gemm_libraries.sh mkl >&2 ;;
    onednn3) [[ -f .deps/onednn3/lib/libdnnl.so.3 ]] || cmake/fetch_gemm_libraries.sh onednn3 >&2 ;;
  esac
  echo "== building build-$l (STRATA_GEMM_LIBRARY=$l)" >&2
  mkdir -p "build-$l"
  cmake -S . -B "build-$l" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSTRATA_GEMM_LIBRARY="$l" \
    -DSTRATA_BUILD_TESTS=OFF -DSTRATA_CUDA=OFF > "build-$l/configure.log" ||
    { echo "configure failed: build-$l/configure.log" >&2; exit 1; }
  cmake --build "build-$l" --target strata > "build-$l/build.log" ||
    { echo "build failed: build-$l/build.log" >&2; exit 1; }
done

declare -A times
for ((r = 1; r <= rounds; ++r)); do
  for m in "${mods[@]}"; do
    for l in "${libs[@]}"; do
      echo "== round $r/$rounds, model $m, $l" >&2
      line=$("build-$l/strata" bench train --model "$m" --steps "$steps" "${bf16[@]}" 2>&1 |
        grep '^step:' || true)
      [[ -n $line ]] || { echo "bench train failed on build-$l" >&2; exit 1; }
      echo "   $line" >&2
      ms=$(sed -E 's/^step: ([0-9.]+) ms.*/\1/' <<< "$line")
      times[$m,$l]+="${times[$m,$l]:+ }$ms"
    done
  done
done

echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) cores;" \
  "$("build-${libs[0]}/strata" info | grep -m1 '^cpu' | sed 's/^cpu: *//')"
echo
# shellcheck disable=SC2016  # the backquotes are markdown
printf '| %s step, `strata bench train --steps %s` (ms, each round) |' \
  "$([[ ${#bf16[@]} -gt 0 ]] && echo bf16 || echo fp32)" "$steps"
for l in "${libs[@]}"; do printf ' %s |' "$("build-$l/strata" info | sed -n 's/^gemm: *//p')"; done
echo
printf '|---|'; for _ in "${libs[@]}"; do printf -- '---|'; done; echo
for m in "${mods[@]}"; do
  best=""
  for l in "${libs[@]}"; do
    for t in ${times[$m,$l]}; do
      [[ -z $best ]] || awk -v a="$t" -v b="$best" 'BEGIN { exit !(a < b) }' && best=$t
    done
  done
  printf '| %s |' "$m"
  for l in "${libs[@]}"; do
    cell=""
    for t in ${times[$m,$l]}; do
      [[ $t == "$best" ]] && t="**$t**"
      cell+="${cell:+ / }$t"
    done
    printf ' %s |' "$cell"
  done
  echo
done
