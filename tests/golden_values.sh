#!/usr/bin/env bash
# The numbers strata's shipped jobs produce, pinned: the first steps of the
# quickstart, LayerSkip, Ladder (from scratch and converted), Layer
# Parallelism and SFT recipes (every step's loss and gradient norm, the
# validation loss, the sample), `strata spd` (Algorithm 1, reduced), and
# `strata eval` / `strata generate` on the shipped checkpoints. A refactor
# must leave every one of them bit for bit as it was.
#
#   tests/golden_values.sh STRATA WORKDIR            compare with the record
#   tests/golden_values.sh STRATA WORKDIR --record   print a new record (stdout)
#
# The record (tests/fixtures/golden_values.txt) holds one section per
# numerics fingerprint (the kernels, GEMM paths and thread count `strata info`
# reports, and the CPU model): GEMM libraries sum in other orders on other
# CPUs and ISAs. Where a section matches this machine, every value must be
# the same text (JSON prints doubles so that they read back bit for bit);
# elsewhere each number must agree with the nearest section (the most
# fingerprint fields in common, the first of equals) to a relative
# tolerance (GOLDEN_RTOL, default 2e-2: 40 training steps through other
# GEMM kernels drift by up to a few parts in a thousand) and texts
# (samples, generations) are not compared. Run from the repository root.
set -uo pipefail
strata=$1
work=$2
mode=${3:-compare}
record=${GOLDEN_RECORD:-tests/fixtures/golden_values.txt}
rtol=${GOLDEN_RTOL:-2e-2}
rm -rf "$work"
mkdir -p "$work"
out="$work/values.txt"
: >"$out"

fingerprint() {
  "$strata" info 2>/dev/null | sed -nE \
    -e 's/^threads: +([0-9]+).*/threads \1/p' \
    -e 's/^cpu: .*\(([^()]*)\).*/cpu \1/p' \
    -e 's/^kernels: +([a-z0-9_]+).*/kernels \1/p' \
    -e 's/^matmul fp32: +(.*)/fp32 \1/p' \
    -e 's/^matmul bf16: +(.*)/bf16 \1/p' | paste -sd'|' | tr -s ' '
}

# Every number of a JSON text, one "prefix.key value" line each, leaving
# out timings (they are not results).
json_numbers() {
  local prefix=$1
  grep -oE '"[A-Za-z0-9_@,.]+": *-?[0-9][0-9.eE+-]*' |
    grep -vE '"(seconds|elapsed_s|tokens_per_s|step_s|comm_s|grad_wait_s|poll_s|[a-z_]*_seconds|tokens_per_second|ms_per_token|wall_s)"' |
    sed -E "s/^\"([^\"]+)\": *(.*)$/${prefix}.\1 \2/"
}

# metrics.jsonl: every line's numbers under step<N>.
metrics() {
  local name=$1 file=$2
  while IFS= read -r line; do
    local step
    step=$(grep -oE '"step": *[0-9]+' <<<"$line" | grep -oE '[0-9]+$')
    json_numbers "$name.step$step" <<<"$line" | grep -v "\.step "
  done <"$file" >>"$out"
}

text_value() {  # name, file: the text as one line (newlines as \n)
  printf '%s %s\n' "$1" "$(sed ':a;N;$!ba;s/\n/\\n/g' "$2")" >>"$out"
}

run() {  # name, command...: runs it, failing the test when it fails
  local name=$1
  shift
  if ! "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    echo "golden: '$name' failed: $*"
    tail -5 "$work/$name.err"
    exit 1
  fi
}

data="$work/data"
# Every job on the CPU (run.device, --device cpu; strata spd always is): the
# record is the CPU's on every host.
common=(--set run.device=cpu --set log.interval=1 --set log.tensorboard=false --set checkpoint.interval=0
        --set training.precision='"bf16"')

# The quickstart's first 40 steps (decay over the recipe's 800, as the run).
run quickstart "$strata" train recipes/quickstart.toml --set run.dir="$work/quickstart" \
  --set data.dataset="$data/austen" --set training.steps=40 --set lr_scheduler.decay_steps=800 \
  --set eval.interval=20 --set eval.batches=4 --set log.sample_tokens=16 "${common[@]}"
metrics quickstart "$work/quickstart/metrics.jsonl"
text_value quickstart.sample "$work/quickstart/sample.txt"

short=(--set training.steps=6 --set lr_scheduler.decay_steps=800 --set eval.batches=2
       --set log.sample_prompt= "${common[@]}")
run layerskip "$strata" train recipes/layerskip-pretrain.toml --set run.dir="$work/layerskip" \
  --set data.dataset="$data/austen" "${short[@]}"
metrics layerskip "$work/layerskip/metrics.jsonl"
run ladder_pretrain "$strata" train recipes/ladder-pretrain.toml --set run.dir="$work/ladder-pretrain" \
  --set data.dataset="$data/austen" "${short[@]}"
metrics ladder_pretrain "$work/ladder-pretrain/metrics.jsonl"
run ladder_convert "$strata" train recipes/ladder-convert.toml --set run.dir="$work/ladder-convert" \
  --set data.dataset="$data/austen" "${short[@]}"
metrics ladder_convert "$work/ladder-convert/metrics.jsonl"
run lp_recover "$strata" train recipes/lp-recover.toml --set run.dir="$work/lp-recover" \
  --set data.dataset="$data/austen" "${short[@]}"
metrics lp_recover "$work/lp-recover/metrics.jsonl"
run sft "$strata" train recipes/sft.toml --set run.dir="$work/sft" \
  --set model.init_from=checkpoints/quickstart.h5 "${short[@]}"
metrics sft "$work/sft/metrics.jsonl"

# SPD's Algorithm 1 on stories260K, reduced (every class appears: tau2 = 0).
run spd "$strata" spd recipes/spd-quickstart.toml --set spd.checkpoint=checkpoints/stories260K.h5 \
  --set spd.out_dir="$work/spd" --set calibration.text=data/corpora/tinystories/tinystories_sample.txt \
  --set calibration.samples=4 --set calibration.seq_len=32 --set b2b.epochs=1 \
  --set spd.tau1=-100.0 --set spd.tau2=0.0 \
  --set report.text=data/corpora/tinystories/tinystories_sample.txt --set report.tasks=[] --quiet
json_numbers spd <"$work/spd/report.json" >>"$out"

# Evaluation and generation on the shipped checkpoints.
text=data/corpora/tinystories/tinystories_sample.txt
run eval_quickstart "$strata" eval --device cpu --checkpoint checkpoints/quickstart.h5 --perplexity $text \
  --out "$work/eval_quickstart.json" --quiet
json_numbers eval_quickstart <"$work/eval_quickstart.json" >>"$out"
run eval_layerskip "$strata" eval --device cpu --checkpoint checkpoints/layerskip-quickstart.h5 --perplexity $text \
  --exit-layer all --out "$work/eval_layerskip.json" --quiet
json_numbers eval_layerskip <"$work/eval_layerskip.json" >>"$out"
for plan in "standard*3,ladder*3" "standard,lp*4,standard" "spd*6;spd_degree=2"; do
  name=eval_plan_$(tr -c 'a-z0-9\n' '_' <<<"$plan")
  run "$name" "$strata" eval --device cpu --checkpoint checkpoints/quickstart.h5 --plan "$plan" \
    --perplexity $text --out "$work/$name.json" --quiet
  json_numbers "$name" <"$work/$name.json" >>"$out"
done
run eval_tasks "$strata" eval --device cpu --checkpoint checkpoints/stories260K.h5 --tasks copa,arc_easy \
  --limit 12 --out "$work/eval_tasks.json" --quiet
json_numbers eval_tasks <"$work/eval_tasks.json" >>"$out"
run generate "$strata" generate --device cpu --checkpoint checkpoints/quickstart.h5 --prompt "Mr. Darcy" \
  --max-new-tokens 24 --ignore-eos
text_value generate "$work/generate.out"
run generate_spec "$strata" generate --device cpu --checkpoint checkpoints/layerskip-quickstart.h5 \
  --prompt "Mr. Darcy" --max-new-tokens 24 --ignore-eos --exit-layer 2 --self-speculative
text_value generate_spec "$work/generate_spec.out"

# A key met again (a list's entries) is numbered: key, key#2, key#3...
awk '{ k = $1; c[k]++; if (c[k] > 1) sub(/^[^ ]+/, k "#" c[k]); print }' "$out" >"$out.n" && mv "$out.n" "$out"

fp=$(fingerprint)
if [[ $mode == --record ]]; then
  echo "[$fp]"
  cat "$out"
  exit 0
fi

# Compare: the exact section for this fingerprint, else with a tolerance the
# section that shares most of its fields (threads, kernels, GEMM paths: a
# CPU of another model running the same kernels), the first of equals.
awk -v fp="$fp" -v rtol="$rtol" -v record="$record" -v got="$out" '
  function abs(x) { return x < 0 ? -x : x }
  function shared(a, b,   fa, fb, i, j, c) {
    split(a, fa, "|"); split(b, fb, "|"); c = 0
    for (i in fa) for (j in fb) if (fa[i] == fb[j]) c++
    return c
  }
  BEGIN {
    section = ""; nsec = 0
    while ((getline line < record) > 0) {
      if (line ~ /^\[/) { section = substr(line, 2, length(line) - 2); order[++nsec] = section; continue }
      if (line ~ /^#/ || line == "") continue
      k = line; sub(/ .*/, "", k); v = substr(line, length(k) + 2)
      want[section, k] = v; keys[section] = keys[section] " " k
    }
    exact = keys[fp] != ""
    near = order[1]; best = -1
    for (i = 1; i <= nsec; i++) { c = shared(fp, order[i]); if (c > best) { best = c; near = order[i] } }
    use = exact ? fp : near
    print "golden: fingerprint " fp
    print exact ? "golden: exact comparison (recorded on this kind of machine)" \
                : "golden: no record for this machine: numbers within " rtol " of [" near "], texts not compared"
    while ((getline line < got) > 0) {
      k = line; sub(/ .*/, "", k); v = substr(line, length(k) + 2)
      have[k] = v
    }
    bad = 0; n = 0
    split(substr(keys[use], 2), list, " ")
    for (i in list) {
      k = list[i]; w = want[use, k]; n++
      if (!(k in have)) { print "golden: " k ": missing (recorded " w ")"; bad++; continue }
      v = have[k]
      if (exact) { if (v != w) { print "golden: " k ": " v " (recorded " w ")"; bad++ } continue }
      if (w ~ /^-?[0-9][0-9.eE+-]*$/) {
        # (w and v are strings: "+ 0" makes them numbers, else awk compares text)
        d = abs(v - w); aw = abs(w + 0); s = aw > 1e-12 ? d / aw : d
        if (s > rtol) { print "golden: " k ": " v " (recorded " w ", relative difference " s ")"; bad++ }
      }
    }
    for (k in have) if (!((use, k) in want)) { print "golden: " k ": not in the record"; bad++ }
    printf "golden: %d values, %d differ\n", n, bad
    exit bad > 0
  }'
