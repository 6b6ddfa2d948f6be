#!/usr/bin/env bash
# Fetches the GEMM libraries that strata can use beside Debian's oneDNN 2.6
# (libdnnl-dev), from their PyPI wheels, into a project-local prefix:
#   .deps/mkl       Intel oneMKL (libmkl_intel_lp64 + libmkl_gnu_thread + libmkl_core
#                   and its per-ISA kernels; Intel Simplified Software License)
#   .deps/onednn3   oneDNN 3.x (Apache 2.0) with the runtimes its wheel is built
#                   against: oneTBB (its threading), the SYCL and compiler runtimes
# Nothing is fetched at run time: a build finds them here (-DSTRATA_GEMM_LIBRARY=mkl
# or -DSTRATA_ONEDNN_ROOT=.deps/onednn3) and bench/gemm_libraries loads them to
# compare. Needs python3 with pip and PyPI.
#   cmake/fetch_gemm_libraries.sh [mkl] [onednn3]   (both without arguments)
set -euo pipefail
case ${1:-} in -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
root=$(cd "$(dirname "$0")/.." && pwd)
mkl_version=2026.2.0
onednn_version=2026.1.0   # oneDNN 3.13
tbb_version=2023.2.0
runtime_version=2026.2.0
wanted=("$@")
((${#wanted[@]})) || wanted=(mkl onednn3)
python3 -m pip --version > /dev/null 2>&1 ||
  { echo "fetch_gemm_libraries: needs python3 with pip (apt-get install python3-pip)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# download WHEEL==VERSION ...: the wheels alone (no dependencies), for CPython 3.11 on x86-64.
download() {
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp/wheels" "$@" ||
    { echo "fetch_gemm_libraries: pip could not download $*" >&2; exit 1; }
}
# extract LIB...: the named libraries (sonames), the headers and the licences of the wheels, flattened into $tmp/x/{lib,include,licences}.
extract() {
  python3 - "$tmp/wheels" "$tmp/x" "$@" << 'PY'
import os, shutil, sys, zipfile
src, dst, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
for wheel in sorted(os.listdir(src)):
    z = zipfile.ZipFile(os.path.join(src, wheel))
    for name in z.namelist():
        if name.endswith("/"):
            continue
        if "/licenses/" in name or name.endswith("LICENSE.txt") or name.endswith("/LICENSE"):
            out = os.path.join(dst, "licences", wheel.split("-")[0] + "-" + os.path.basename(name))
        elif "/data/include/" in name and wheel.split("-")[0] in ("onednn_devel", "mkl_include"):
            out = os.path.join(dst, "include", name.split("/data/include/", 1)[1])
        elif "/data/lib/" in name and os.path.basename(name) in patterns:
            out = os.path.join(dst, "lib", os.path.basename(name))
        else:
            continue
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with z.open(name) as f, open(out, "wb") as g:
            shutil.copyfileobj(f, g)
PY
}
# install DIR: the extracted tree becomes DIR (replacing an older one).
install() {
  rm -rf "$1"
  mkdir -p "$(dirname "$1")"
  mv "$tmp/x" "$1"
  rm -rf "$tmp/wheels"
  echo "fetch_gemm_libraries: $2 in $1 ($(du -sh "$1" | cut -f1))"
}

for w in "${wanted[@]}"; do
  case $w in
    mkl)
      download "mkl==$mkl_version" "mkl-include==$mkl_version"
      extract libmkl_{intel_lp64,gnu_thread,core,def,mc3,avx2,avx512,avx10}.so.3
      # The link names the linker looks for.
      for l in intel_lp64 gnu_thread core; do ln -sf "libmkl_$l.so.3" "$tmp/x/lib/libmkl_$l.so"; done
      install "$root/.deps/mkl" "oneMKL $mkl_version"
      ;;
    onednn3)
      download "onednn==$onednn_version" "onednn-devel==$onednn_version" "tbb==$tbb_version" \
        "intel-sycl-rt==$runtime_version" "intel-cmplr-lib-rt==$runtime_version"
      extract libdnnl.so.3 libtbb.so.12 libsycl.so.9 libsvml.so libimf.so libintlc.so.5
      ln -sf libdnnl.so.3 "$tmp/x/lib/libdnnl.so"
      install "$root/.deps/onednn3" "oneDNN $onednn_version (3.13)"
      ;;
    *)
      echo "fetch_gemm_libraries: unknown library '$w' (mkl, onednn3)" >&2
      exit 2
      ;;
  esac
done
