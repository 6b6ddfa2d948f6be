#!/usr/bin/env bash
# device_parity.sh STRATA OUTDIR: the whole user path on the CUDA kernels
# without a GPU. Trains the debug recipe on the CPU backend and on the SIMT
# backend (the CUDA kernels on the CPU SIMT executor, run.device = "simt"),
# and checks the two runs print the same losses, validation and sample; then
# evaluates and generates with --device simt from the SIMT run's checkpoint,
# against --device cpu (and on simt with and without decode graphs). The SIMT runs are strict (STRATA_SIMT_STRICT=1): host
# code that touches device memory directly stops them with an error, as it
# would fail on a GPU. Resuming from the checkpoints (steps 6 -> 8) checks
# saving and loading device tensors.
set -euo pipefail
strata=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
common=(--set log.interval=2 --set log.sample_tokens=8
        --set eval.batches=2 --set data.dataset="$out/data")
for d in cpu simt; do
  strict=0
  [[ $d == simt ]] && strict=1
  for steps in 6 8; do
    STRATA_SIMT_STRICT=$strict "$strata" train recipes/debug.toml --set run.device=$d \
      --set run.dir="$out/$d" "${common[@]}" --set training.steps=$steps \
      >> "$out/$d.log" 2>&1 || { cat "$out/$d.log"; exit 1; }
  done
done
grep -q "resume: .*step_00000006.h5 at step 6" "$out/simt.log" || { echo "no resume"; exit 1; }
grep -q "device simt" "$out/simt.log" || { echo "the simt run did not say its device"; exit 1; }
# Everything but the speeds and the run directory must agree.
strip() { sed -E 's/[0-9]+ tok(ens)?\/s//; s/\| [0-9]+m[0-9]+s.*//; s/[0-9.]+ ms//; s/ [0-9.]+s$//' "$1" |
          grep -E "^(step|eval|done|sample)|^  " || true; }
if ! diff <(strip "$out/cpu.log") <(strip "$out/simt.log"); then
  echo "the cpu and simt runs differ"; exit 1
fi
ckpt="$out/simt/checkpoints/step_00000006.h5"
text=data/corpora/tinystories/tinystories_sample.txt
for d in cpu simt; do
  STRATA_SIMT_STRICT=1 "$strata" eval --checkpoint "$ckpt" --perplexity $text --window 33 --quiet --device $d \
    > "$out/eval_$d.txt" 2> "$out/eval_$d.err"
  STRATA_SIMT_STRICT=1 "$strata" generate --checkpoint "$ckpt" --prompt "ROMEO:" --max-new-tokens 12 --ignore-eos \
    --device $d 2> /dev/null | head -n 1 > "$out/gen_$d.txt"
done
# Perplexity columns to 6 significant digits (the sums run in another order).
cols() { awk 'NR > 1 { printf "%s %.6g %.6g %s %.6g\n", $1, $2, $3, $4, $6 }' "$1"; }
diff <(cols "$out/eval_cpu.txt") <(cols "$out/eval_simt.txt") || { echo "eval differs"; exit 1; }
diff "$out/gen_cpu.txt" "$out/gen_simt.txt" || { echo "generation differs"; exit 1; }
# Decode steps replayed as recorded graphs (the default on simt) or launched
# one kernel at a time: the same text.
STRATA_SIMT_STRICT=1 "$strata" generate --checkpoint "$ckpt" --prompt "ROMEO:" --max-new-tokens 12 \
  --ignore-eos --device simt --no-graphs 2> /dev/null | head -n 1 > "$out/gen_simt_eager.txt"
diff "$out/gen_simt.txt" "$out/gen_simt_eager.txt" || { echo "generation without graphs differs"; exit 1; }
grep -qE "^ *[0-9]+ +[0-9.]+ " "$out/eval_simt.txt" || { cat "$out/eval_simt.txt"; exit 1; }
echo "cpu and simt agree: $(grep '^done' "$out/simt.log")"
