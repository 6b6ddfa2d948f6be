#!/usr/bin/env bash
# Sets up a fresh Debian bookworm machine for strata and builds it:
# installs the Debian packages it needs (skipping those already present), then
# configures and builds into $BUILD_DIR (default: build).
#   STRATA_SKIP_APT=1   skip the package step (e.g. without root)
#   STRATA_TEST_PACKAGES=1  also install TEST_PACKAGES (tests/run.sh sets it)
#   BUILD_TYPE          CMake build type (default: Release)
#   STRATA_GEMM_LIBRARY the CPU GEMM library: onednn (default: Debian's oneDNN 2.6),
#                       onednn3 or mkl (fetched from PyPI into .deps/ first), own
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}

PACKAGES=(
  g++ cmake ninja-build pkg-config      # toolchain
  libdnnl-dev                           # oneDNN: the CPU GEMM library (found without its
                                        # CMake package, which would want OpenCL headers)
  nlohmann-json3-dev                    # JSON (configs, metrics, JSONL data)
  libtomlplusplus-dev                   # TOML recipes
  libsentencepiece-dev                  # tokenizers (.model)
  libpcre2-dev                          # regular expressions: tokenizer.json pre-tokenizers
  libyaml-cpp-dev                       # lm-evaluation-harness task YAMLs (eval --include-path)
  libhdf5-dev hdf5-tools                # checkpoints (h5dump to inspect them)
  zlib1g-dev                            # PNG pictures of the plots (strata report --png)
  libgtest-dev                          # GoogleTest
  qemu-user                             # tests: the binary on emulated older CPUs (label portability)
  libopenmpi-dev openmpi-bin            # MPI: multi-process training (mpirun) and its tests
  chromium fonts-dejavu-core            # tests: the run report rendered in headless Chromium
  python3                               # runs HumanEval completions (eval --allow-code-execution)
  clang libclang-rt-14-dev              # fuzz/run.sh: clang++ and its libFuzzer and sanitizer
                                        # runtimes (the fuzz harnesses, label fuzz)
)

# Only for the test suite (tests/run.sh asks for them): a private one-node
# Slurm cluster that tests/slurm_preempt_test.sh starts and stops itself (label
# slurm). Kept out of PACKAGES: they bring daemons (munged starts at install),
# and a cluster brings its own Slurm; launch/slurm/train.sbatch needs none here.
TEST_PACKAGES=(
  slurmctld slurmd slurm-client munge  # Debian bookworm's Slurm 22.05 and its authentication
  libpmix-dev                          # libpmix.so, which Slurm's mpi/pmix plugin loads (srun --mpi=pmix)
  python3-pip                          # fetches oneDNN 3.x and oneMKL from PyPI (the GEMM binding tests)
)
if [[ "${STRATA_TEST_PACKAGES:-0}" == 1 ]]; then
  PACKAGES+=("${TEST_PACKAGES[@]}")
fi

if [[ "${STRATA_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
fi

# A CUDA machine with cuDNN 9 also gets the cuDNN frontend's headers (PyPI),
# for model.attention = "cudnn"; without them (no pip, no network) the build
# leaves cuDNN's attention out and says so.
cudnn_h=$(ls /usr/local/cuda/include/cudnn.h /usr/include/cudnn.h 2>/dev/null | head -1 || true)
if [[ -x /usr/local/cuda/bin/nvcc && -n $cudnn_h && ! -f .deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  cmake/fetch_cudnn_frontend.sh || echo "setup: no cuDNN frontend headers: cuDNN attention left out"
fi

# The GEMM libraries other than Debian's oneDNN come from PyPI into .deps/
# (cmake/fetch_gemm_libraries.sh): the one a build asks for, and for the test
# suite every one, so that each binding is tested (tests/gemm_binding_test.cpp).
gemm=${STRATA_GEMM_LIBRARY:-onednn}
fetch=()
case $gemm in onednn3 | mkl) fetch+=("$gemm") ;; esac
if [[ "${STRATA_TEST_PACKAGES:-0}" == 1 ]]; then fetch+=(onednn3 mkl); fi
for lib in $(printf '%s\n' "${fetch[@]}" | sort -u); do
  [[ $lib == mkl && -f .deps/mkl/lib/libmkl_core.so ]] && continue
  [[ $lib == onednn3 && -f .deps/onednn3/lib/libdnnl.so.3 ]] && continue
  if ! cmake/fetch_gemm_libraries.sh "$lib"; then
    [[ $gemm == "$lib" ]] && { echo "setup: STRATA_GEMM_LIBRARY=$gemm needs .deps/$lib" >&2; exit 1; }
    echo "setup: no .deps/$lib (PyPI unreachable?): its GEMM binding test is left out"
  fi
done

cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-Release}" \
  -DSTRATA_GEMM_LIBRARY="$gemm"
cmake --build "$BUILD_DIR" -j "$(nproc)"
