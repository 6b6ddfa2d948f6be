#!/usr/bin/env bash
# The reliability probe of issue 37 (../shared/design/reliability-probe.md),
# one case per problem it found, each run as its own CTest test
# (reliability.p1_... in tests/CMakeLists.txt):
#   tests/reliability_v2.sh STRATA CASE
# Run from the repository root (recipes/debug.toml, data/). Each case works
# in a fresh temporary folder, prints "ok: ..." per check and exits 1 at the
# first check that fails.
set -uo pipefail
strata=$(realpath "$1")
case_name=$2
root=$(pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-rel2.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}

fail() {
  echo "FAIL [$case_name]: $*"
  exit 1
}
ok() { echo "ok: $*"; }

# expect_error REGEX CMD...: CMD exits 1 or 2 with one stderr line matching REGEX.
expect_error() {
  local regex=$1
  shift
  local err status lines
  err=$("$@" 2>&1 >/dev/null)
  status=$?
  [[ $status -eq 1 || $status -eq 2 ]] || fail "expected exit 1 or 2, got $status from: $*; stderr: $err"
  lines=$(printf '%s\n' "$err" | wc -l)
  [[ $lines -eq 1 ]] || fail "expected one stderr line, got $lines from: $*: $err"
  [[ $err =~ $regex ]] || fail "stderr does not match '$regex': $err"
  ok "$err"
}

# A short debug run: train DIR STEPS [--set ...].
train() {
  local dir=$1 steps=$2
  shift 2
  "$strata" train recipes/debug.toml --set run.dir="$dir" --set training.steps="$steps" \
    --set log.sample_tokens=0 --set log.tensorboard=false "$@" >"$tmp/train.log" 2>&1
}

ckpt() {  # a 2-step checkpoint, made once per case
  if [[ ! -f $tmp/ck/checkpoints/step_00000002.h5 ]]; then
    train "$tmp/ck" 2 || { cat "$tmp/train.log"; fail "the debug run failed"; }
  fi
  echo "$tmp/ck/checkpoints/step_00000002.h5"
}

cd "$root" || exit 1
case $case_name in
  p1_output_is_input)  # convert overwrote its own input; now refused by file identity
    cp data/models/stories260K/stories260K.bin "$tmp/m.bin"
    sum=$(sha256sum <"$tmp/m.bin")
    expect_error "the output .*m.bin is the input" "$strata" convert llama2c "$tmp/m.bin" "$tmp/m.bin"
    ln -s m.bin "$tmp/link.bin"
    expect_error "the output .*link.bin is the input" "$strata" convert llama2c "$tmp/m.bin" "$tmp/link.bin"
    [[ $(sha256sum <"$tmp/m.bin") == "$sum" ]] || fail "the llama2.c input changed"
    cp -r tests/fixtures/hf_gqa_untied "$tmp/hf"
    sum=$(sha256sum <"$tmp/hf/model.safetensors")
    expect_error "the output .*hf/model.safetensors is inside the input" \
      "$strata" convert hf "$tmp/hf" "$tmp/hf/model.safetensors"
    [[ $(sha256sum <"$tmp/hf/model.safetensors") == "$sum" ]] || fail "the safetensors input changed"
    ck=$(ckpt)
    ln "$ck" "$tmp/hardlink.h5"
    expect_error "the output .*hardlink.h5 is the input" "$strata" convert weights "$ck" "$tmp/hardlink.h5"
    expect_error "the output .*/ck contains the input" "$strata" export hf "$ck" "$tmp/ck"
    echo "some text to train on" >"$tmp/t.txt"
    expect_error "--out: the output .*t.txt is the input" \
      "$strata" tokenizer train --input "$tmp/t.txt" --vocab-size 64 --out "$tmp/t.txt"
    ;;

  p3_fresh_start_archives)  # resume = "none" deleted metrics and left old checkpoints
    train "$tmp/r" 4 --set checkpoint.interval=2 || fail "first run"
    [[ -f $tmp/r/checkpoints/step_00000004.h5 ]] || fail "no step 4 checkpoint"
    old_metrics=$(cat "$tmp/r/metrics.jsonl")
    train "$tmp/r" 2 --set checkpoint.resume=\"none\" || { cat "$tmp/train.log"; fail "fresh start"; }
    grep -q "held an earlier run: its files are now in" "$tmp/train.log" || fail "no archive line"
    arch=$(echo "$tmp"/r/archive/*)
    [[ -f $arch/checkpoints/step_00000004.h5 ]] || fail "old checkpoint not archived"
    [[ $(cat "$arch/metrics.jsonl") == "$old_metrics" ]] || fail "old metrics not kept as they were"
    [[ $(ls "$tmp/r/checkpoints") == step_00000002.h5 ]] || fail "checkpoints/ holds: $(ls "$tmp/r/checkpoints")"
    ok "the earlier run is in ${arch#"$tmp"/}, checkpoints/ holds only the new run's"
    train "$tmp/r" 3 || fail "resume"
    grep -q "resume: .*step_00000002.h5 at step 2" "$tmp/train.log" || fail "did not resume from the new run's step 2"
    ok "a plain run resumes from the new run's checkpoint"
    expect_error "model.init_from: is set, but run.dir .* has checkpoints \(newest: step 3\)" \
      "$strata" train recipes/debug.toml --set run.dir="$tmp/r" --set training.steps=5 \
      --set model.init_from="$tmp/r/checkpoints/step_00000003.h5"
    expect_error "resuming with another data.dataset than the checkpoint's .*optimizer.lr 0.003 -> 0.01" \
      "$strata" train recipes/debug.toml --set run.dir="$tmp/r" --set training.steps=5 \
      --set data.dataset="$tmp/other" --set optimizer.lr=0.01
    train "$tmp/r" 4 --set optimizer.lr=0.002 || fail "resume with another lr"
    grep -q "resume: the recipe differs from .*optimizer.lr 0.003 -> 0.002" "$tmp/train.log" ||
      fail "the changed lr was not listed"
    ok "a changed lr is listed on resume"
    ;;

  p6_nonfinite_logits)  # a 3e38 weight gave NaN logits and exit 0
    ck=$(ckpt)
    "$strata" export hf "$ck" "$tmp/hf" >/dev/null || fail "export"
    # Every weight of the exported model set to 1e10 (finite, so accepted; the
    # MLP's products pass float32's 3.4e38): F32 data is raw bytes after the
    # header, rewritten with that constant.
    header_len=$(od -An -tu8 -N8 "$tmp/hf/model.safetensors" | tr -d ' ')
    size=$(stat -c %s "$tmp/hf/model.safetensors")
    data=$((size - 8 - header_len))
    { head -c $((8 + header_len)) "$tmp/hf/model.safetensors"
      # 1e10 as little-endian float32 (0x501502f9), repeated over the data
      yes $'\xf9\x02\x15\x50' | tr -d '\n' | head -c "$data"; } >"$tmp/big.safetensors"
    mv "$tmp/big.safetensors" "$tmp/hf/model.safetensors"
    "$strata" convert hf "$tmp/hf" "$tmp/big.h5" >/dev/null || fail "convert of the finite weights"
    expect_error "logits are not finite" "$strata" generate --checkpoint "$tmp/big.h5" --prompt ROMEO: \
      --max-new-tokens 4
    expect_error "logits after layer 2 are not finite" "$strata" eval --checkpoint "$tmp/big.h5" \
      --perplexity README.md
    ;;

  p8_checked_before_work)  # output paths, SPD degree and vocabularies failed after the work
    ck=$(ckpt)
    for out in /proc/nope/r.json "$tmp/missing/r.json" "$tmp"; do
      start=$SECONDS
      expect_error "strata eval: --out: " "$strata" eval --checkpoint "$ck" --tasks arc_easy --out "$out"
      ((SECONDS - start < 5)) || fail "the --out error came after the evaluation"
    done
    expect_error "--log-samples: .*exists and is not a directory" "$strata" eval --checkpoint "$ck" \
      --tasks arc_easy --log-samples README.md
    expect_error "spd scan: --degree 3: .*must divide num_attention_heads" \
      "$strata" spd scan --checkpoint "$ck" --text README.md --degree 3
    expect_error "lp scan: --svg: /proc/x.svg: cannot create files in /proc" \
      "$strata" lp scan --checkpoint "$ck" --text README.md --svg /proc/x.svg
    expect_error "data.tokenizer: the tokenizer .*austen-4k.model has 4096 pieces but the model's vocabulary is 512" \
      "$strata" train recipes/debug.toml --set run.dir="$tmp/v" --set model.init_from="$ck" \
      --set data.tokenizer=data/tokenizers/austen-4k.model --set data.dataset="$tmp/newds"
    [[ ! -e $tmp/newds && ! -e $tmp/v ]] || fail "a dataset or run.dir was made before the refusal"
    ok "no dataset prepared, no run.dir"
    ;;

  p9_bounded_reads)  # --perplexity /dev/zero grew to 6 GB
    expect_error "perplexity /dev/zero: is a device, not a file" \
      "$strata" eval --checkpoint "$(ckpt)" --perplexity /dev/zero
    expect_error "input /dev/zero: is a device, not a file" "$strata" data prepare \
      --tokenizer data/tokenizers/tok512.model --input /dev/zero --out "$tmp/ds"
    head -c 300000 /dev/zero | tr '\0' 'a' >"$tmp/big.txt"
    STRATA_MAX_INPUT_BYTES=100kB expect_error "input .*big.txt: is 300.0 kB, more than strata reads into memory \(100.0 kB: STRATA_MAX_INPUT_BYTES\)" \
      "$strata" data prepare --tokenizer data/tokenizers/tok512.model --input "$tmp/big.txt" --out "$tmp/ds"
    # A pipe is bounded as it streams (yes never ends).
    STRATA_MAX_INPUT_BYTES=100kB expect_error "input /dev/fd/[0-9]+: gives more than strata reads into memory" \
      "$strata" data prepare --tokenizer data/tokenizers/tok512.model --input <(yes) --out "$tmp/ds"
    [[ ! -e $tmp/ds ]] || fail "data prepare wrote $tmp/ds"
    ;;

  p11_refused_run_writes_nothing)  # refused runs still created run.dir with tokenizer.model
    "$strata" convert weights "$(ckpt)" "$tmp/w.h5" >/dev/null || fail "convert weights"
    expect_error "w.h5: has no optimizer state to resume from" "$strata" train recipes/debug.toml \
      --set run.dir="$tmp/a" --set checkpoint.resume=\""$tmp/w.h5"\"
    expect_error "meta.json: the dataset was tokenised with tokenizer sha256" \
      "$strata" train recipes/debug.toml --set run.dir="$tmp/b" --set training.steps=2 \
      --set data.tokenizer=data/tokenizers/austen-4k.model --set model.vocab_size=4096
    [[ ! -e $tmp/a && ! -e $tmp/b ]] || fail "a refused run left its run.dir: $(ls "$tmp")"
    ok "no run.dir left by the refused runs"
    ;;

  p14_binary_text)  # scans scored binary data; tokenizer train failed inside sentencepiece
    head -c 4096 "$strata" >"$tmp/bin"
    : >"$tmp/empty.txt"
    expect_error "tokenizer train: input .*bin: not a text file" \
      "$strata" tokenizer train --input "$tmp/bin" --vocab-size 64 --out "$tmp/t.model"
    expect_error "tokenizer train: input .*empty.txt: is empty" \
      "$strata" tokenizer train --input "$tmp/empty.txt" --vocab-size 64 --out "$tmp/t.model"
    expect_error "bin: not a text file" "$strata" lp scan --checkpoint "$tmp/none.h5" --text "$tmp/bin"
    expect_error "bin: not a text file" "$strata" spd scan --checkpoint "$tmp/none.h5" --text "$tmp/bin"
    ;;

  p16_messages)  # misleading messages
    expect_error "--max-new-tokens 1000000000000 is out of range" \
      "$strata" generate --checkpoint "$tmp/none.h5" --prompt x --max-new-tokens 1000000000000
    mkdir "$tmp/in"
    expect_error "tokenizer train: input .*in: is a directory, not a file" \
      "$strata" tokenizer train --input "$tmp/in" --vocab-size 64 --out "$tmp/t.model"
    mkfifo "$tmp/fifo"
    expect_error "tokenizer train: input .*fifo: is not a regular file" \
      "$strata" tokenizer train --input "$tmp/fifo" --vocab-size 64 --out "$tmp/t.model"
    expect_error "convert plan --plan: .*step_00000002.h5: layer plan 'lp\*3' has 3 layers" \
      "$strata" convert plan "$(ckpt)" "$tmp/p.h5" --plan "lp*3"
    ;;

  p17_tied_head)  # convert hf dropped a present lm_head.weight silently
    "$strata" export hf "$(ckpt)" "$tmp/hf" >/dev/null || fail "export"
    sed -i 's/"tie_word_embeddings": false/"tie_word_embeddings": true/' "$tmp/hf/config.json"
    grep -q '"tie_word_embeddings": true' "$tmp/hf/config.json" || fail "config.json not edited"
    "$strata" convert hf "$tmp/hf" "$tmp/t.h5" >/dev/null 2>"$tmp/err" || fail "convert: $(cat "$tmp/err")"
    grep -q "lm_head.weight differs from model.embed_tokens.weight: it is ignored" "$tmp/err" ||
      fail "no warning: $(cat "$tmp/err")"
    ok "$(cat "$tmp/err")"
    ;;

  *)
    echo "reliability_v2.sh: unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "passed: $case_name"
