#!/usr/bin/env bash
# reliability.sh STRATA OUTDIR: regression cases of the reliability probe
# (../shared/design/reliability-probe.md, issue 19), each a command as a
# user would type it and the outcome it must have: one line naming what is
# wrong and a non-zero exit, and nothing half-written. Prints one line per
# case and a count; exits non-zero when any case fails.
set -uo pipefail
strata=$1
out=$2
rm -rf "$out"
mkdir -p "$out"
pass=0
fail=0
ok() { echo "ok   $1"; pass=$((pass + 1)); }
bad() { echo "FAIL $1: $2"; fail=$((fail + 1)); }
# expect_fail NAME REGEX CMD...: non-zero exit, exactly one stderr line matching REGEX.
expect_fail() {
  local name=$1 re=$2
  shift 2
  "$@" > "$out/$name.out" 2> "$out/$name.err"
  local rc=$?
  local lines
  lines=$(wc -l < "$out/$name.err")
  if ((rc == 0)); then
    bad "$name" "exit 0"
  elif ((lines != 1)); then
    bad "$name" "$lines stderr lines: $(head -c 300 "$out/$name.err")"
  elif ! grep -Eq -e "$re" "$out/$name.err"; then
    bad "$name" "stderr does not match '$re': $(cat "$out/$name.err")"
  else
    ok "$name"
  fi
}
train() { "$strata" train recipes/debug.toml --set run.device=cpu --set data.dataset="$out/data" --set log.interval=2 \
  --set eval.batches=1 --set log.sample_tokens=4 "$@"; }

# A finished 4-step run to resume from.
run="$out/run"
train --set training.steps=4 --set run.dir="$run" > "$out/base.log" 2>&1 || {
  cat "$out/base.log"
  exit 1
}
cp "$run/recipe.toml" "$out/recipe.before"

# B6: resuming past training.steps is an error; at exactly training.steps
# there is nothing to train, said as such (no made-up loss).
expect_fail b6_past_steps "step_00000004.h5 is at step 4, past training.steps = 2" \
  train --set training.steps=2 --set run.dir="$run"
if train --set training.steps=4 --set run.dir="$run" > "$out/b6_done.log" 2>&1 &&
  grep -q "already at step 4 of 4; nothing to train" "$out/b6_done.log" &&
  ! grep -q "last loss 0" "$out/b6_done.log"; then
  ok b6_nothing_to_train
else
  bad b6_nothing_to_train "$(tail -2 "$out/b6_done.log")"
fi

# B4: a run refused at validation leaves the existing run's recipe.toml alone.
printf '{"prompt": "a", "response": "b"}\n{"prompt": \n' > "$out/sft_broken.jsonl"
expect_fail b4_refused_run "sft_broken.jsonl:2" \
  train --set training.steps=8 --set data.kind=sft --set data.sft_train="$out/sft_broken.jsonl" \
  --set checkpoint.resume_changes='["data.kind", "data.sft_train"]' --set run.dir="$run"
if cmp -s "$run/recipe.toml" "$out/recipe.before"; then
  ok b4_recipe_untouched
else
  bad b4_recipe_untouched "recipe.toml was rewritten"
fi

# B5: resuming another model's checkpoint does not switch architecture.
other="$out/other"
train --set training.steps=2 --set model.num_hidden_layers=3 --set model.hidden_size=32 \
  --set model.intermediate_size=64 --set run.dir="$other" > "$out/other.log" 2>&1 ||
  bad b5_setup "$(tail -1 "$out/other.log")"
expect_fail b5_other_architecture \
  "step_00000002.h5: the recipe's model differs from the checkpoint's: model.hidden_size = 64 \\(checkpoint: 32\\)" \
  train --set training.steps=4 --set checkpoint.resume="$other/checkpoints/step_00000002.h5" \
  --set run.dir="$out/b5"
[[ ! -e "$out/b5/recipe.toml" ]] && ok b5_nothing_written || bad b5_nothing_written "recipe.toml written"

# B9, B10: optimizer numbers are finite and in range, each error names its own
# key and where it was set; a refused run writes nothing.
for kv in optimizer.lr=nan optimizer.lr=inf optimizer.lr=-1.0 optimizer.beta1=nan \
  optimizer.beta2=1.0 optimizer.eps=0.0 lr_scheduler.decay_steps=-5 training.grad_clip=-1; do
  expect_fail "b9_${kv}" "^strata: error: --set: ${kv%%=*}: must be" \
    train --set "$kv" --set run.dir="$out/b9"
done
expect_fail b10_freeze_origin "^strata: error: --set: training.freeze: bad layer range 'layers:9-1'" \
  train --set 'training.freeze=["layers:9-1"]' --set run.dir="$out/b9"
[[ ! -e "$out/b9" ]] && ok b9_nothing_written || bad b9_nothing_written "$(ls "$out/b9")"

ckpt="$run/checkpoints/step_00000004.h5"
# B12: perplexity of nothing, or of something that is not text, is refused.
: > "$out/empty.txt"
printf 'a\0b\n' > "$out/nul.bin"
printf 'caf\xe9\n' > "$out/latin1.txt"
expect_fail b12_empty "empty.txt: nothing to score" \
  "$strata" eval --device cpu --checkpoint "$ckpt" --perplexity "$out/empty.txt"
expect_fail b12_binary "nul.bin: not a text file \\(a NUL byte at offset 1\\)" \
  "$strata" eval --device cpu --checkpoint "$ckpt" --perplexity "$out/nul.bin"
expect_fail b12_not_utf8 "latin1.txt: not UTF-8 text \\(byte 0xe9 at offset 3\\)" \
  "$strata" eval --device cpu --checkpoint "$ckpt" --perplexity "$out/latin1.txt"
# B17: out-of-range eval options.
expect_fail b17_limit "--limit must be >= 0" "$strata" eval --device cpu --checkpoint "$ckpt" --tasks copa --limit -5
expect_fail b17_shots "--shots must be >= 0 \\(or -1" "$strata" eval --device cpu --checkpoint "$ckpt" --tasks copa --shots -3
expect_fail b17_stride "--window and --stride must be >= 0" \
  "$strata" eval --device cpu --checkpoint "$ckpt" --perplexity recipes/debug.toml --stride -1
# B16, B17: bad sampling options stop generate before any output.
for opt in "--top-p 2" "--top-p 0" "--temperature inf" "--temperature nan" "--temperature -1" \
  "--top-k -3" "--exit-layer 9"; do
  name="b16_${opt// /_}"
  # shellcheck disable=SC2086
  expect_fail "$name" "strata generate: --" \
    "$strata" generate --device cpu --checkpoint "$ckpt" --prompt "ROMEO:" $opt
  [[ -s "$out/$name.out" ]] && bad "${name}_no_output" "printed: $(cat "$out/$name.out")"
done
# B15: a tokenizer that does not belong to the checkpoint.
expect_fail b15_tokenizer "austen-4k.model" \
  "$strata" generate --device cpu --checkpoint "$ckpt" --prompt "ROMEO:" --tokenizer data/tokenizers/austen-4k.model

# B18: an integer too large for 64 bits is called that.
expect_fail b18_big_int "training.steps: 99999999999999999999999 is out of range for an integer" \
  train --set training.steps=99999999999999999999999 --set run.dir="$out/b18"
# B19: usage errors exit 2 (docs/reliability.md, "Exit status"), other errors 1.
usage_status() {
  local name=$1
  shift
  "$@" > /dev/null 2> "$out/$name.err"
  local rc=$?
  ((rc == 2)) && ok "$name" || bad "$name" "exit $rc: $(head -c 200 "$out/$name.err")"
}
usage_status b19_unknown_option "$strata" train recipes/debug.toml --bogus
usage_status b19_no_recipe "$strata" train
usage_status b19_two_recipes "$strata" train recipes/debug.toml --set run.name=foo bar
usage_status b19_set_without_value "$strata" train recipes/debug.toml --set
usage_status b19_bad_integer "$strata" eval --limit x
usage_status b19_missing_checkpoint "$strata" generate --prompt hi
usage_status b19_bench "$strata" bench frob

# B2: one run per directory. A second run on a directory in use stops at once,
# naming the holder's PID, and writes nothing; after the first ends, its lock
# file left behind is not a lock.
lockrun="$out/locked"
"$strata" train recipes/debug.toml --set run.device=cpu --set data.dataset="$out/data" --set eval.batches=1 \
  --set training.steps=100000 --set log.interval=1000 --set run.dir="$lockrun" \
  > "$out/locked.log" 2>&1 &
holder=$!  # strata itself, so the signal below reaches it
for _ in $(seq 100); do
  [[ -s "$lockrun/.lock" && -e "$lockrun/tokenizer.model" ]] && break
  sleep 0.1
done
expect_fail b2_second_run "run.dir .*locked is in use by another process \\(pid $holder\\)" \
  train --set training.steps=100000 --set optimizer.lr=1e-4 --set run.dir="$lockrun"
kill -TERM "$holder"
wait "$holder"
if grep -q "lr = 1e-04" "$lockrun/recipe.toml" 2> /dev/null; then
  bad b2_recipe_kept "the second run rewrote recipe.toml"
else
  ok b2_recipe_kept
fi
steps=$(grep -o '"step":[0-9]*' "$lockrun/metrics.jsonl" | sort | uniq -d | wc -l)
((steps == 0)) && ok b2_no_duplicate_steps || bad b2_no_duplicate_steps "$steps steps logged twice"
if train --set training.steps=2 --set checkpoint.resume=none --set run.dir="$lockrun" \
  > "$out/relock.log" 2>&1; then
  ok b2_stale_lock_file
else
  bad b2_stale_lock_file "$(tail -1 "$out/relock.log")"
fi

# B1: a checkpoint that cannot be written (here: a file-size limit, as a full
# disk would) is one error line and exit 1, not a crash in HDF5 at exit; the
# temporary file is gone.
(
  trap '' XFSZ
  ulimit -f 1024
  train --set training.steps=10 --set checkpoint.interval=5 --set run.dir="$out/b1" \
    > "$out/b1.log" 2>&1
  echo $? > "$out/b1.rc"
)
rc=$(cat "$out/b1.rc")
if ((rc == 1)) && tail -1 "$out/b1.log" | grep -q "^strata: error: checkpoint .*step_00000005.h5.tmp: cannot write"; then
  ok b1_write_fails
else
  bad b1_write_fails "exit $rc: $(tail -1 "$out/b1.log" | head -c 200)"
fi
[[ ! -e "$out/b1/checkpoints/step_00000005.h5.tmp" ]] && ok b1_no_tmp_left || bad b1_no_tmp_left "the .tmp is left"

# B11: file-system trouble is the user's to fix: one line naming the path
# (shortened when huge), never "internal error".
long=$(printf 'n%.0s' $(seq 300))
expect_fail b11_long_name "^strata: error: run.dir .*\\.\\.\\..*File name too long" \
  train --set run.name="$long" --set run.dir="$out/$long"
: > "$out/afile"
expect_fail b11_file_as_dir "^strata: error: run.dir .*afile/run: cannot create the directory: Not a directory" \
  train --set run.dir="$out/afile/run"
expect_fail b11_export_onto_file "^strata: error: .*afile" \
  "$strata" export hf "$ckpt" "$out/afile"
grep -q "internal error" "$out"/b11_*.err && bad b11_not_internal "an internal error" || ok b11_not_internal
# B13: data prepare refuses binary input.
head -c 3000 /dev/urandom > "$out/garbage.bin"
printf '\0' >> "$out/garbage.bin"
expect_fail b13_binary_corpus "input .*garbage.bin: not (a text file|UTF-8 text)" \
  "$strata" data prepare --tokenizer data/tokenizers/tok512.model --input "$out/garbage.bin" \
  --out "$out/garbage"
[[ ! -e "$out/garbage" ]] && ok b13_nothing_written || bad b13_nothing_written "$(ls "$out/garbage")"

# B14: the cache-free reference and cached generation agree token for token,
# past the context too (both stop when it is full).
"$strata" generate --device cpu --checkpoint "$ckpt" --prompt "ROMEO:" --max-new-tokens 200 --ignore-eos \
  > "$out/b14_cache.txt" 2> /dev/null
"$strata" generate --device cpu --checkpoint "$ckpt" --prompt "ROMEO:" --max-new-tokens 200 --ignore-eos \
  --no-cache > "$out/b14_nocache.txt" 2> /dev/null
if [[ -s "$out/b14_cache.txt" ]] && cmp -s "$out/b14_cache.txt" "$out/b14_nocache.txt"; then
  ok b14_no_cache_agrees
else
  bad b14_no_cache_agrees "outputs differ"
fi

# B3: memory is estimated before anything is allocated and a job that cannot
# fit is refused in one line with the figures and what to lower, having
# written nothing. STRATA_MEMORY_LIMIT stands in for a small machine.
expect_fail b3_train_too_big "training 1.65B parameters needs about .* GB .*weights .*gradients .*AdamW moments .*but 3.00 GB is available \(STRATA_MEMORY_LIMIT\); use a smaller model" \
  env STRATA_MEMORY_LIMIT=3GB "$strata" train recipes/debug.toml --set run.device=cpu --set model.hidden_size=8192 \
  --set model.num_hidden_layers=8 --set run.dir="$out/b3_big"
[[ ! -e "$out/b3_big" ]] && ok b3_nothing_written || bad b3_nothing_written "$(ls "$out/b3_big")"
expect_fail b3_activations "needs about .*activations .*; lower training.micro_batch_size or training.seq_len" \
  env STRATA_MEMORY_LIMIT=40MB "$strata" train recipes/debug.toml --set run.device=cpu --set training.micro_batch_size=64 \
  --set run.dir="$out/b3_acts"
expect_fail b3_terabytes "^strata: error: recipes/debug.toml: training .*B parameters needs about .* TB" \
  "$strata" train recipes/debug.toml --set run.device=cpu --set model.hidden_size=65536 --set model.num_hidden_layers=100 \
  --set run.dir="$out/b3_tb"
"$strata" train recipes/debug.toml --set run.device=cpu --dry-run --set run.dir="$out/b3_dry" > "$out/b3_dry.toml" 2> /dev/null
if grep -q "^# memory per process (estimate): weights .* + gradients .* + AdamW moments .* + activations .* = " \
  "$out/b3_dry.toml" && [[ ! -e "$out/b3_dry" ]]; then
  ok b3_dry_run_prints_estimate
else
  bad b3_dry_run_prints_estimate "$(tail -3 "$out/b3_dry.toml")"
fi
expect_fail b3_dry_run_refuses "needs about .* but 1.0 MB is available" \
  env STRATA_MEMORY_LIMIT=1MB "$strata" train recipes/debug.toml --set run.device=cpu --dry-run --set run.dir="$out/b3_dry"
# A config.json claiming more layers than its weights hold: refused from the
# headers at once, not after allocating the claimed model (probe: OOM-killed).
mkdir -p "$out/b3_hf"
cp tests/fixtures/hf_gqa_untied/* "$out/b3_hf/"
sed -i 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 100000/' "$out/b3_hf/config.json"
expect_fail b3_hf_layers "b3_hf: tensor 'model.layers.2.input_layernorm.weight' is missing from the weights \(config.json: 100000 layers\)" \
  "$strata" convert hf "$out/b3_hf" "$out/b3_hf.h5"
sed -i 's/"num_hidden_layers": *[0-9]*/"num_hidden_layers": 1000000000/' "$out/b3_hf/config.json"
expect_fail b3_hf_absurd "config.json \(1000000000 layers, hidden .*\) describes a model that needs about .* TB" \
  "$strata" convert hf "$out/b3_hf" "$out/b3_hf.h5"
[[ ! -e "$out/b3_hf.h5" ]] && ok b3_hf_nothing_written || bad b3_hf_nothing_written "b3_hf.h5 exists"
expect_fail b3_generate "strata generate: .*step_00000004.h5 needs about .*KV cache .* is available \(STRATA_MEMORY_LIMIT\)" \
  env STRATA_MEMORY_LIMIT=620kB "$strata" generate --device cpu --checkpoint "$ckpt" --prompt "ROMEO:"
expect_fail b3_eval "strata eval: .*step_00000004.h5 needs about .*activations .*logits .*; lower --batch-size" \
  env STRATA_MEMORY_LIMIT=8MB "$strata" eval --device cpu --checkpoint "$ckpt" --tasks copa --batch-size 64

# A non-finite loss or gradient norm stops training at that step, naming the
# last good checkpoint (saved from finite weights), which still loads.
train --set optimizer.lr=1e30 --set lr_scheduler.warmup_steps=0 --set checkpoint.interval=1 \
  --set training.steps=6 --set run.dir="$out/div" > /dev/null 2> "$out/div.err"
rc=$?
last=$(tail -1 "$out/div.err")
if ((rc == 1)) && [[ $(grep -c "error" "$out/div.err") == 1 ]] &&
  [[ "$last" =~ ^strata:\ error:\ training\ diverged\ at\ step\ 2:\ the\ gradient\ norm\ is\ NaN\ \(the\ update\ was\ not\ applied\)\;\ the\ last\ good\ checkpoint\ is\ .*div/checkpoints/step_00000001\.h5\ \(step\ 1\) ]]; then
  ok diverged
else
  bad diverged "exit $rc: $last"
fi
if "$strata" generate --device cpu --checkpoint "$out/div/checkpoints/step_00000001.h5" --prompt "A" \
  --max-new-tokens 4 > /dev/null 2>&1 && [[ ! -e "$out/div/checkpoints/step_00000002.h5" ]]; then
  ok diverged_last_good_loads
else
  bad diverged_last_good_loads "step 1 does not load, or a step 2 checkpoint was written"
fi

echo "reliability: $pass passed, $fail failed"
((fail == 0))
