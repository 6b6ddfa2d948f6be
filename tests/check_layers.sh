#!/usr/bin/env bash
# The layering of src/ (CMakeLists.txt, "built in layers"): every #include of
# another directory must name a layer below. Static libraries catch a call
# that goes the wrong way at link time; this catches a header that does.
# It also runs tests/check_sizes.sh: no source file over 600 lines, no
# function of src/cli/ over 60 (the command layer parses and calls the library).
# Usage: tests/check_layers.sh [SRC_DIR]   (exit 1 and one line per offence)
set -euo pipefail
src=${1:-$(dirname "$0")/../src}
declare -A allowed=(
  [core]=""
  [ops]="core"
  [backends]="core ops"
  [parallel]="core"
  [model]="core ops parallel"
  [data]="core"
  [io]="core ops parallel model data"
  [infer]="core ops parallel model"
  [eval]="core ops parallel model data infer"
  [train]="core ops parallel model data io infer eval"
  [cli]="core ops backends parallel model data io infer eval train"
)
bad=0
for dir in "$src"/*/; do
  layer=$(basename "$dir")
  [[ -v allowed[$layer] ]] || { echo "check_layers: src/$layer is not in the layer table"; bad=1; continue; }
  while IFS=: read -r file line text; do
    dep=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$text")
    [[ $dep == "$layer" || " ${allowed[$layer]} " == *" $dep "* ]] && continue
    echo "check_layers: ${file#"$src"/}:$line: src/$layer must not include src/$dep ($text)"
    bad=1
  done < <(grep -rnE '^#include "[a-z_]+/' "$dir" || true)
done
((bad == 0)) && echo "check_layers: $(ls -d "$src"/*/ | wc -l) layers, every include goes down"
"$(dirname "$0")/check_sizes.sh" "$src" || bad=1
exit $bad
