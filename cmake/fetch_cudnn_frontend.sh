#!/usr/bin/env bash
# Fetches the cuDNN frontend's header-only C++ API (NVIDIA, MIT licence) for
# the cuDNN attention of a CUDA build (model.attention = "cudnn"): downloads
# the nvidia-cudnn-frontend wheel from PyPI and keeps its include/ folder and
# licence in DIR (default .deps/cudnn-frontend, where CMake looks). Needs
# python3 with pip; cuDNN 9 itself comes with the CUDA toolkit or
# PyTorch's nvidia-cudnn wheel.
#   cmake/fetch_cudnn_frontend.sh [DIR]      then reconfigure the build
set -euo pipefail
version=1.32.0
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-$root/.deps/cudnn-frontend}
case ${1:-} in -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if python3 -m pip --version > /dev/null 2>&1; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
    --platform manylinux_2_28_x86_64 -d "$tmp" "nvidia-cudnn-frontend==$version" ||
    { echo "fetch_cudnn_frontend: pip could not download nvidia-cudnn-frontend $version" >&2; exit 1; }
else
  echo "fetch_cudnn_frontend: needs python3 with pip (apt-get install python3-pip)" >&2
  exit 1
fi
wheel=$(ls "$tmp"/*.whl)
python3 - "$wheel" "$tmp/x" << 'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
for n in z.namelist():
    if n.startswith("include/") or "/licenses/" in n:
        z.extract(n, sys.argv[2])
PY
rm -rf "$dir"
mkdir -p "$dir"
mv "$tmp/x/include" "$dir/include"
cp "$tmp"/x/*.dist-info/licenses/LICENSE* "$dir/" 2> /dev/null || true
echo "cuDNN frontend $version headers in $dir/include ($(du -sh "$dir/include" | cut -f1))"
