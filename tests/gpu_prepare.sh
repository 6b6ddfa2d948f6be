#!/usr/bin/env bash
# Stages in one git-ignored folder what a GPU machine without strata's Debian
# packages needs for the GPU build (docs/build.md, "A GPU build"), to be
# carried there beside the tracked files:
#   include/    toml++ and nlohmann-json headers (from /usr/include)
#   googletest/ GoogleTest's sources, without docs, samples and its own tests
#               (from /usr/src/googletest)
#   cudnn-frontend.tar.gz  the cuDNN frontend's headers (cmake/fetch_cudnn_frontend.sh)
#   data/debug-shakespeare/  the debug recipe's dataset, tokenised here with
#               data/tokenizers/tok512.model, for a build without sentencepiece
#               (needs a strata binary: --strata, default build/strata)
# then prints each part's size, the total, and the total with the tracked
# files, and fails when that exceeds the 64 MiB a carry may hold.
# Idempotent: each part is staged again from scratch.
#
# Usage: tests/gpu_prepare.sh [--out DIR] [--strata BINARY] [--help]
#   then on the GPU machine:
#   cmake -S . -B build-gpu -G Ninja -DSTRATA_GPU_BUILD=ON -DSTRATA_VENDOR_DIR=$PWD/.gpu-carry
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$root/.gpu-carry
strata=$root/build/strata
limit=$((64 * 1024 * 1024))

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --help | -h) usage; exit 0 ;;
    --out) out=$(realpath -m "$2"); shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    *) echo "gpu_prepare: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

need() { [[ -e $1 ]] || { echo "gpu_prepare: $1 is missing: install $2" >&2; exit 1; }; }
need /usr/include/toml++/toml.h libtomlplusplus-dev
need /usr/include/nlohmann/json.hpp nlohmann-json3-dev
need /usr/src/googletest/CMakeLists.txt googletest

mkdir -p "$out"
rm -rf "$out/include" "$out/googletest"
mkdir -p "$out/include"
cp -r /usr/include/toml++ /usr/include/nlohmann "$out/include/"
mkdir -p "$out/googletest"
cp /usr/src/googletest/CMakeLists.txt "$out/googletest/"
mkdir -p "$out/googletest/googletest"
for part in CMakeLists.txt cmake include src; do
  cp -r "/usr/src/googletest/googletest/$part" "$out/googletest/googletest/"
done

# The cuDNN frontend's headers for model.attention = "cudnn" (the GPU
# machine's PyTorch brings cuDNN itself): .deps/cudnn-frontend, fetched from
# PyPI when missing; without them the GPU build has strata's attention only.
# Compressed (3 MiB of headers, 0.4 MiB packed): tests/gpu.sh unpacks it.
rm -rf "$out/cudnn-frontend" "$out/cudnn-frontend.tar.gz"
if [[ ! -f $root/.deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  "$root/cmake/fetch_cudnn_frontend.sh" || echo "gpu_prepare: no cuDNN frontend: cudnn-frontend not staged"
fi
if [[ -f $root/.deps/cudnn-frontend/include/cudnn_frontend.h ]]; then
  tar czf "$out/cudnn-frontend.tar.gz" -C "$root/.deps" cudnn-frontend
fi

if [[ -x $strata ]]; then
  rm -rf "$out/data/debug-shakespeare"
  mkdir -p "$out/data"
  if ! log=$(cd "$root" && "$strata" data prepare --tokenizer data/tokenizers/tok512.model \
              --input data/corpora/tinyshakespeare/input.txt --out "$out/data/debug-shakespeare" \
              --doc-split paragraph --val-fraction 0.02 --threads 1 2>&1); then
    echo "$log" >&2
    echo "gpu_prepare: preparing the debug dataset failed" >&2
    exit 1
  fi
else
  echo "gpu_prepare: no strata binary at $strata (build it, or give --strata): data/ not staged"
fi

size() { du -sb "$1" | cut -f1; }
mib() { awk -v b="$1" 'BEGIN { printf "%.2f MiB", b / 1048576 }'; }
total=0
for part in include googletest cudnn-frontend.tar.gz data; do
  [[ -e $out/$part ]] || continue
  b=$(size "$out/$part")
  total=$((total + b))
  printf '%-12s %s\n' "$part$([[ -d $out/$part ]] && echo /)" "$(mib "$b")"
done
printf '%-12s %s\n' "carried" "$(mib "$total")"
tracked=$(cd "$root" && git ls-files -z | xargs -0 stat -c %s -- 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
printf '%-12s %s\n' "tracked" "$(mib "$tracked")"
all=$((tracked + total))
printf '%-12s %s (limit %s)\n' "together" "$(mib "$all")" "$(mib "$limit")"
if ((all > limit)); then
  echo "gpu_prepare: tracked files and $out together exceed 64 MiB: the GPU machine cannot get them" >&2
  exit 1
fi
echo "gpu_prepare: staged $out"
