#!/usr/bin/env bash
# Configures (does not build) the GPU build with every optional feature forced
# off, into a scratch folder, and checks that it configures and that each
# feature's status line says it is absent: a hard dependency added to the
# CMake files fails here. Without nvcc the same is done without CUDA.
# Usage: tests/gpu_configure_test.sh SOURCE_DIR SCRATCH_DIR
set -euo pipefail
src=$1 dir=$2
rm -rf "$dir"
args=(-DSTRATA_WITH_ONEDNN=OFF -DSTRATA_WITH_HDF5=OFF -DSTRATA_WITH_SENTENCEPIECE=OFF
      -DSTRATA_WITH_MPI=OFF -DSTRATA_WITH_ZLIB=OFF -DSTRATA_WITH_PCRE2=OFF)
if command -v nvcc >/dev/null || [[ -x /usr/local/cuda/bin/nvcc ]]; then
  args+=(-DSTRATA_GPU_BUILD=ON)
else
  echo "gpu_configure_test: no nvcc here: configuring without CUDA"
  args+=(-DSTRATA_CUDA=OFF)
fi
command -v ninja >/dev/null && args+=(-G Ninja)
if ! out=$(cmake -S "$src" -B "$dir" "${args[@]}" 2>&1); then
  echo "$out"
  echo "gpu_configure_test: the configuration without the optional features failed"
  exit 1
fi
bad=0
for f in ONEDNN HDF5 SENTENCEPIECE MPI ZLIB; do
  line=$(grep -E "^-- strata: $f off \(STRATA_WITH_$f=OFF\): " <<<"$out" || true)
  if [[ -z $line ]]; then
    echo "gpu_configure_test: no status line saying $f is off"
    bad=1
  else
    echo "${line#-- }"
  fi
done
rm -rf "$dir"
((bad == 0)) && echo "gpu_configure_test: configures without oneDNN, HDF5, sentencepiece, MPI, zlib"
exit $bad
