#!/usr/bin/env bash
# Registers and spills of every compiled CUDA kernel, against what a GPU
# allows: a block needs registers x threads of the SM's register file (65536
# 32-bit registers on sm_80 and sm_90), and a launch that needs more fails
# ("too many resources requested for launch"), which the CPU SIMT executor
# cannot see. A kernel's largest block is its __launch_bounds__
# (STRATA_LAUNCH_BOUNDS: the SIMT executor refuses any larger launch), or
# 1024 threads, CUDA's limit, when it declares none. Registers, local memory
# and the bound come from the objects (cuobjdump); spills from ptxas, rerun
# with the build's options on the PTX the objects carry (the objects record
# a stack frame, which a math routine's local array also needs, not spills).
# Usage: tests/check_kernel_resources.sh CUOBJDUMP PTXAS FILE...
#   FILE: objects, static libraries or executables built by nvcc. Exits 77
#   (skipped) when there is none (a build without CUDA) or no cuobjdump.
set -uo pipefail
cuobjdump=${1:-}
ptxas=${2:-}
shift 2 || shift $#
files=()
for f in "$@"; do [[ -n "$f" ]] && files+=("$f"); done
if ((${#files[@]} == 0)); then
  echo "SKIP: no CUDA objects (this build has no CUDA)"
  exit 77
fi
if [[ -z "$cuobjdump" || ! -x "$cuobjdump" ]]; then
  cuobjdump=$(command -v cuobjdump || true)
fi
if [[ -z "$cuobjdump" ]]; then
  echo "SKIP: cuobjdump not found (CUDA toolkit package cuda-cuobjdump; configure with -DSTRATA_CUOBJDUMP=PATH)"
  exit 77
fi
if [[ -z "$ptxas" || ! -x "$ptxas" ]]; then
  ptxas=$(command -v ptxas || true)
fi
for f in "${files[@]}"; do
  [[ -f "$f" ]] || { echo "FAIL: $f does not exist (build it first)"; exit 1; }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# function<TAB>max threads, from EIATTR_MAX_THREADS of each .nv.info.<function> section.
for f in "${files[@]}"; do "$cuobjdump" -elf "$f" 2>/dev/null; done | awk '
  function num(s,   v, i) {  # "0x80" or "128"
    if (s !~ /^0x/) return s + 0
    v = 0
    s = tolower(substr(s, 3))
    for (i = 1; i <= length(s); i++) v = v * 16 + index("0123456789abcdef", substr(s, i, 1)) - 1
    return v
  }
  /^\.nv\.info\./ { fn = substr($1, 10); next }
  /Attribute:.*EIATTR_MAX_THREADS/ { want = 1; next }
  want && /Value:/ {
    want = 0
    n = 1
    for (i = 2; i <= NF; i++) n *= num($i)
    print fn "\t" n
  }' | sort -u > "$tmp/bounds"
# arch<TAB>function<TAB>registers<TAB>local bytes, from the resource usage of each cubin.
for f in "${files[@]}"; do "$cuobjdump" --dump-resource-usage "$f" 2>/dev/null; done | awk '
  /^Fatbin elf code/ { elf = 1; next }
  /^Fatbin ptx code/ { elf = 0; next }
  elf && /^arch = / { arch = $3; next }
  /^ Function / { fn = substr($2, 1, length($2) - 1); next }
  fn != "" && /REG:/ {
    reg = 0; local = 0
    for (i = 1; i <= NF; i++) {
      split($i, kv, ":")
      if (kv[1] == "REG") reg = kv[2]
      if (kv[1] == "LOCAL") local = kv[2]
    }
    print arch "\t" fn "\t" reg "\t" local
    fn = ""
  }' | sort -u > "$tmp/usage"
if [[ ! -s "$tmp/usage" ]]; then
  echo "FAIL: cuobjdump found no kernels in: ${files[*]}"
  exit 1
fi

# arch<TAB>function<TAB>spill store bytes, from ptxas -v on each extracted PTX file.
: > "$tmp/spills"
if [[ -n "$ptxas" ]]; then
  mkdir "$tmp/ptx"
  for f in "${files[@]}"; do
    abs=$(cd "$(dirname "$f")" && pwd)/$(basename "$f")
    (cd "$tmp/ptx" && "$cuobjdump" -xptx all "$abs" 2>/dev/null) |
      sed -n 's/^Extracting PTX file and ptxas options *[0-9]*: *\([^ ]*\) *\(.*\)$/\1\t\2/p'
  done > "$tmp/ptx_files"
  while IFS=$'\t' read -r ptx opts; do
    arch=$(sed -n 's/.*\.\(sm_[0-9a-z]*\)\.ptx$/\1/p' <<< "$ptx")
    [[ "$opts" == *-arch=* ]] || opts="$opts -arch=$arch"
    # shellcheck disable=SC2086  # the build's options, as words
    "$ptxas" $opts -v "$tmp/ptx/$ptx" -o /dev/null 2>&1 | awk -v arch="$arch" '
      /Function properties for / { fn = $NF; next }
      fn != "" && /spill stores/ { print arch "\t" fn "\t" $5 + 0; fn = "" }'
  done < "$tmp/ptx_files" | sort -u > "$tmp/spills"
  if [[ ! -s "$tmp/spills" ]]; then
    echo "FAIL: ptxas ($ptxas) reported no kernels for the PTX of: ${files[*]}"
    exit 1
  fi
  echo "ptxas rebuilt $(wc -l < "$tmp/spills") kernel builds from their PTX"
else
  echo "note: no ptxas: spills not checked"
fi

demangle() { if command -v c++filt > /dev/null; then c++filt; else cat; fi; }
# Join on the mangled name; a kernel without a bound may get any block up to 1024.
awk -F'\t' 'FILENAME == ARGV[1] { bound[$1] = $2; next }
  FILENAME == ARGV[2] { spill[$1 "\t" $2] = $3; next }
  { b = ($2 in bound) ? bound[$2] : 0; k = $1 "\t" $2; sp = (k in spill) ? spill[k] : 0
    print $1 "\t" $2 "\t" $3 "\t" $4 "\t" b "\t" sp }' \
  "$tmp/bounds" "$tmp/spills" "$tmp/usage" > "$tmp/joined"
cut -f2 "$tmp/joined" | demangle > "$tmp/names"
paste "$tmp/joined" "$tmp/names" | awk -F'\t' '
  {
    arch = $1; reg = $3 + 0; local = $4 + 0; bound = $5 + 0; spills = $6 + 0; name = $7
    sub(/^void /, "", name)
    threads = bound > 0 ? bound : 1024
    # Registers are allocated per warp, in units of 256 (a thread count of 8).
    per_warp = int((reg * 32 + 255) / 256) * 256
    need = per_warp * int((threads + 31) / 32)
    kernels++
    why = bound > 0 ? "its launch bound" : "no launch bound: any block up to 1024"
    if (need > 65536) {
      printf "FAIL %s (%s): %d registers x %d threads (%s) need %d registers, the register file has 65536\n",
             name, arch, reg, threads, why, need
      bad++
    }
    if (spills > 0) {
      printf "FAIL %s (%s): ptxas spills %d bytes (%d registers, largest block %d threads)\n",
             name, arch, spills, reg, threads
      bad++
    }
    if (local > 0) {
      printf "FAIL %s (%s): %d bytes of local memory (a local array or spills)\n",
             name, arch, local
      bad++
    }
    if (reg > most) { most = reg; most_name = name " (" arch ", " threads " threads)" }
  }
  END {
    printf "%d kernel builds checked; most registers: %d, %s\n", kernels, most, most_name
    if (bad) { printf "%d problems\n", bad; exit 1 }
    print "every kernel fits the register file at its largest block, no spills, no local memory"
  }'
