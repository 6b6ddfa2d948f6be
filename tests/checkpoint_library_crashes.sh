#!/usr/bin/env bash
# checkpoint_library_crashes.sh STRATA DIR: every corrupt checkpoint in DIR
# (fuzz/library-crashes/checkpoint: files on which libhdf5 1.10 crashes,
# loops or allocates gigabytes) is refused by each command that opens a
# checkpoint: `inspect`, `generate --checkpoint`, `convert weights`, and a
# training resume (`train --dry-run` on a run directory holding the file).
# Each must exit with status 1 and print exactly one `strata: error:` line
# naming the file, within 60 s (no hang), and not die by a signal (no crash).
# Run from the repository root (the resume uses recipes/debug.toml).
set -u
strata=$1
dir=$2
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

failed=0 runs=0
check() {  # check FILE COMMAND...: the expectations above for one command
  local file=$1
  shift
  local start=$SECONDS err status lines
  err=$(timeout -s KILL 60 "$@" 2>&1 >/dev/null)
  status=$?
  runs=$((runs + 1))
  lines=$(printf '%s\n' "$err" | wc -l)
  if ((status == 137)); then
    echo "FAIL (hung: killed after 60 s): $*"
  elif ((status > 128)); then
    echo "FAIL (died by signal $((status - 128))): $*"
  elif ((status != 1)); then
    echo "FAIL (exit status $status, expected 1): $*: $err"
  elif ((lines != 1)) || [[ $err != "strata: error: "* ]]; then
    echo "FAIL (expected one 'strata: error:' line, got $lines):"
    printf '%s\n' "$err"
  elif [[ $err != *"$file"* ]]; then
    echo "FAIL (the error does not name $file): $err"
  else
    echo "ok ($((SECONDS - start)) s) $(basename "$file") $2: $err"
    return
  fi
  failed=$((failed + 1))
}

shopt -s nullglob
files=("$dir"/*.h5)
if ((${#files[@]} == 0)); then
  echo "no .h5 files in $dir"
  exit 1
fi
for f in "${files[@]}"; do
  check "$f" "$strata" inspect "$f"
  check "$f" "$strata" generate --checkpoint "$f" --prompt "x" --max-new-tokens 1 --device cpu
  check "$f" "$strata" convert weights "$f" "$scratch/out.h5"
  run="$scratch/run"
  rm -rf "$run"
  mkdir -p "$run/checkpoints"
  cp "$f" "$run/checkpoints/step_00000001.h5"
  check "$run/checkpoints/step_00000001.h5" "$strata" train recipes/debug.toml --dry-run \
    --set "run.dir=\"$run\""
done
[[ -e $scratch/out.h5 ]] && { echo "FAIL: convert wrote $scratch/out.h5"; failed=$((failed + 1)); }
echo "checkpoint_library_crashes: $runs runs over ${#files[@]} files, $failed failed"
((failed == 0))
