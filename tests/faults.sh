#!/usr/bin/env bash
# faults.sh STRATA OUTDIR [KILLS]: scripted fault trials of `strata train`
# (issue 19), on recipes/debug.toml, run from the repository root:
#   1. kill -9 at random moments (KILLS times, default 50) of a run that saves
#      every step: after each kill the newest complete checkpoint loads, no
#      .tmp is used, metrics.jsonl has no torn line and no duplicate step, the
#      next start resumes where the checkpoint is; the finished run equals an
#      uninterrupted one bit for bit
#   2. a full disk (a small tmpfs): one error line naming the file, exit 1, no
#      half-written checkpoint taken as complete, resume once space is freed;
#      metrics.jsonl (or its TensorBoard event) on a full disk is an error,
#      not a torn or lost line
#   3. a read-only run.dir (a read-only bind mount): one error line, nothing written
#   4. two runs on one directory: the second stops at once naming the first's
#      PID; a lock file left by a killed run is not a lock
#   5. SIGTERM, and SIGKILL, to one rank under mpirun -np 2: the job ends, the
#      checkpoint loads, the same command resumes
#   6. SIGINT, SIGTERM, SIGHUP and SIGUSR1 alone, then resume: the same losses as an
#      uninterrupted run
# Each trial prints its counts and ok, FAIL or skip (mounts need root); the
# last line is "faults: N passed, M failed"; the exit status is non-zero when
# any trial failed. Environment: FAULTS_SEED (default 19) seeds the kill
# delays; FAULTS_MPIRUN (default: mpirun on PATH); FAULTS_TRIALS (default
# "1 2 3 4 5 6") picks trials; OMP_NUM_THREADS (default 1). Needs python3
# (the JSON checks).
set -uo pipefail
if (($# < 2)); then
  echo "usage: $0 STRATA OUTDIR [KILLS]" >&2
  exit 2
fi
strata=$(realpath "$1")
out=$(realpath -m "$2")
kills=${3:-50}
seed=${FAULTS_SEED:-19}
mpirun=${FAULTS_MPIRUN:-$(command -v mpirun || true)}
[[ -x $strata ]] || { echo "faults: $1 is not an executable" >&2; exit 2; }
[[ $kills =~ ^[0-9]+$ ]] || { echo "faults: KILLS must be a number, got '$kills'" >&2; exit 2; }
command -v python3 > /dev/null || { echo "faults: python3 is needed for the JSON checks" >&2; exit 2; }
# One thread per process, waiting passively: with OpenMP's default spinning, a
# machine busy with other work (ctest -j, a build) makes each step 5x slower.
# Every run of a comparison gets the same setting, so results stay comparable.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

# Mounts and background processes of ours, undone on exit.
mounts=()
bg=()
cleanup() {
  local p i
  for p in "${bg[@]}"; do kill -KILL "$p" 2> /dev/null; done
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do
    umount "${mounts[i]}" 2> /dev/null || umount -l "${mounts[i]}" 2> /dev/null
  done
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT
# Mounts under OUTDIR left by an earlier, interrupted run of this script.
while read -r _ mp _; do
  [[ $mp == "$out"/* ]] && umount "$mp" 2> /dev/null
done < <(tac /proc/self/mounts)
rm -rf "$out"
mkdir -p "$out"

pass=0
fail=0
skipped=0
problems=()
problem() { problems+=("$*"); }
# report NAME COUNTS START: ok, or FAIL with the problems found since the trial began.
report() {
  local name=$1 counts=$2 secs=$((SECONDS - $3))
  if ((${#problems[@]} == 0)); then
    echo "$name: $counts: ok (${secs}s)"
    pass=$((pass + 1))
  else
    echo "$name: $counts: FAIL (${secs}s)"
    local p
    for p in "${problems[@]:0:8}"; do echo "    $p"; done
    ((${#problems[@]} > 8)) && echo "    ... $((${#problems[@]} - 8)) more"
    fail=$((fail + 1))
  fi
  problems=()
}
skip() {
  echo "$1: skip: $2"
  skipped=$((skipped + 1))
  problems=()
}

joined() { local s; s=$(printf '%s; ' "$@"); echo "${s%; }"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
secs() { printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }
# The debug model on this script's dataset, on the CPU, everything logged.
base=(recipes/debug.toml --set run.device=cpu --set data.dataset="$out/data" --set eval.batches=1 --set log.interval=1
  --set log.sample_tokens=4)
train() { "$strata" train "${base[@]}" "$@"; }
# In the background (`train_bg ... &`): $! is strata itself, so signals reach it.
train_bg() { exec "$strata" train "${base[@]}" "$@"; }
# A foreground run, bounded in time.
train_fg() { timeout -k 5 900 "$strata" train "${base[@]}" "$@"; }
# wait_lines FILE N PID [LIMIT_S]: until FILE has N lines, PID has ended or
# LIMIT_S (30) have passed; true when FILE has N lines.
wait_lines() {
  local f=$1 n=$2 pid=$3 end=$((SECONDS + ${4:-30}))
  while ((SECONDS < end)); do
    [[ -f $f ]] && (($(wc -l < "$f") >= n)) && return 0
    kill -0 "$pid" 2> /dev/null || break
    sleep 0.02
  done
  [[ -f $f ]] && (($(wc -l < "$f") >= n))
}
# forget PID: no longer ours to kill at exit (it has been waited for).
forget() {
  local keep=() p
  for p in "${bg[@]}"; do [[ $p == "$1" ]] || keep+=("$p"); done
  bg=("${keep[@]}")
}
# newest_checkpoint RUN_DIR: the path of its newest step_*.h5 (empty: none).
newest_checkpoint() {
  local c
  c=$(ls "$1"/checkpoints/step_*.h5 2> /dev/null | tail -1)
  echo "$c"
}
step_of() {  # .../step_00000042.h5 -> 42
  local s=${1##*step_}
  echo $((10#${s%.h5}))
}
# verify_checkpoint PATH: `inspect` reads it at its step, and `generate` loads
# its weights and writes two tokens.
verify_checkpoint() {
  local c=$1 s
  s=$(step_of "$c")
  if ! "$strata" inspect "$c" 2>&1 | grep -Eq "^step: +$s$"; then
    problem "inspect $c: $("$strata" inspect "$c" 2>&1 | tail -1)"
    return 1
  fi
  if ! "$strata" generate --device cpu --checkpoint "$c" --prompt "ROMEO:" --max-new-tokens 2 \
    > /dev/null 2> "$out/generate.err"; then
    problem "generate $c: $(tail -1 "$out/generate.err")"
    return 1
  fi
}
# JSON checks of metrics.jsonl (python3: a fresh machine has it, setup.sh installs it).
cat > "$out/metrics.py" << 'EOF'
import json, sys

TIMING = {"elapsed_s", "step_s", "tokens_per_s", "comm_s"}

def load(path):
    """The records of a metrics.jsonl, and how many lines are torn (not one
    JSON object with an integer step, ended by a newline)."""
    rows, torn = [], 0
    try:
        f = open(path, encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return rows, 0
    with f:
        for line in f:
            try:
                j = json.loads(line)
                if not line.endswith("\n") or not isinstance(j, dict) or type(j.get("step")) is not int:
                    raise ValueError
                rows.append(j)
            except ValueError:
                torn += 1
    return rows, torn

if sys.argv[1] == "check":  # -> torn duplicates gaps first last
    rows, torn = load(sys.argv[2])
    steps = [r["step"] for r in rows]
    dup = len(steps) - len(set(steps))
    gaps = sum(1 for a, b in zip(steps, steps[1:]) if b != a + 1)
    print(torn, dup, gaps, steps[0] if steps else 0, steps[-1] if steps else 0)
else:  # compare A B -> "same N" or "differ ..." (every field but the timings, exactly)
    (a, _), (b, _) = load(sys.argv[2]), load(sys.argv[3])
    strip = lambda r: {k: v for k, v in r.items() if k not in TIMING}
    diff = [x["step"] for x, y in zip(a, b) if strip(x) != strip(y)]
    if len(a) == len(b) and a and not diff:
        print("same", len(a), a[-1]["loss"], a[-1].get("val_loss", "none"))
    else:
        first = diff[0] if diff else None
        detail = ""
        if diff:
            x = next(r for r in a if r["step"] == first)
            y = next(r for r in b if r["step"] == first)
            detail = f"step {first}: {strip(x)} vs {strip(y)}"
        print("differ", f"{len(a)} vs {len(b)} records, {len(diff)} differ; {detail}")
EOF
metrics_check() { python3 "$out/metrics.py" check "$1"; }
metrics_compare() { python3 "$out/metrics.py" compare "$1" "$2"; }
# check_metrics_full FILE LAST: steps 1..LAST, each once, no torn line.
check_metrics_full() {
  local torn dup gaps first last
  read -r torn dup gaps first last < <(metrics_check "$1")
  ((torn == 0 && dup == 0 && gaps == 0 && first == 1 && last == $2)) ||
    problem "$1: expected steps 1-$2 once each: $torn torn, $dup duplicate, $gaps gaps, steps $first-$last"
}
# The lines of a run's stderr that are not its progress report.
progress_lines() { grep -Ev '^(data|model|memory|train|checkpoint|resume|time per step): |^(step|eval) |^sample |^done: '; }
# one_error_line FILE REGEX: FILE (a stderr) is exactly one line matching REGEX.
one_error_line() {
  local n
  n=$(wc -l < "$1")
  if ((n != 1)); then
    problem "$1: $n stderr lines, expected one: $(head -c 300 "$1")"
  elif ! grep -Eq -e "$2" "$1"; then
    problem "$1: does not match '$2': $(head -c 300 "$1")"
  fi
}

echo "faults: strata $strata, output $out, $kills kills, seed $seed, $(getconf _NPROCESSORS_ONLN) cores, OMP_NUM_THREADS=$OMP_NUM_THREADS"
# The dataset, prepared once.
if ! train_fg --set training.steps=1 --set run.dir="$out/prep" > "$out/prep.log" 2>&1; then
  tail -5 "$out/prep.log"
  echo "faults: 0 passed, 1 failed (cannot prepare the dataset)"
  exit 1
fi

# ---------------------------------------------------------------------------
# 1. kill -9 at random moments, a checkpoint every step.
trial_kill() {
  local t0=$SECONDS d=$out/kill
  mkdir -p "$d"
  # Each start goes 2-7 steps past its checkpoint, and up to 200 ms more
  # (below): 12 steps a kill leave plenty for the last start.
  local steps=$((kills * 12 > 100 ? kills * 12 : 100))
  local args=(--set training.steps="$steps" --set checkpoint.interval=1 --set checkpoint.keep=3)
  # The uninterrupted run; the time to its first record is the start-up's.
  local a b t_start pid
  a=$(now_ms)
  train_bg "${args[@]}" --set run.dir="$d/ref" > "$d/ref.log" 2>&1 &
  pid=$!
  bg+=("$pid")
  wait_lines "$d/ref/metrics.jsonl" 1 "$pid" 300
  t_start=$(($(now_ms) - a))
  wait "$pid" || problem "uninterrupted run: $(tail -1 "$d/ref.log")"
  forget "$pid"
  b=$(now_ms)
  local t_step=$(((b - a - t_start) / steps))
  ((t_step < 1)) && t_step=1
  local t_sub=$((t_step < 200 ? t_step : 200))  # a loaded machine's steps are no measure
  echo "  uninterrupted: $steps steps in $(secs $((b - a))) s; start-up $(secs "$t_start") s, a step with its save $t_step ms"
  # Where each kill falls (the same draws for a given seed): 30% at a random
  # moment of the start-up (0 to its measured length; a slow machine may get
  # further), the rest once the start has logged 2-7 steps past its
  # checkpoint, after a further 0 to 1 step's time (the step's save, or the
  # next step). Counting steps, not seconds, keeps the kills spread when the
  # machine's load changes.
  local run=$d/run prev="" prev_step=0
  local n_kill=0 n_startup=0 n_save=0 n_step=0 n_tmp=0 n_tmp_ckpt=0 n_resume=0 n_cont=0
  local n_verified=0 n_torn=0 n_dup=0 n_ended=0 k
  RANDOM=$seed
  for ((k = 1; k <= kills + 1; k++)); do
    local log=$d/start$k.log rc pid
    if ((k <= kills)); then
      local where=$((RANDOM % 1000)) ahead=$((2 + RANDOM % 6)) frac=$((RANDOM % 1000)) delay
      train_bg "${args[@]}" --set run.dir="$run" > "$log" 2>&1 &
      pid=$!
      bg+=("$pid")
      if ((where < 300)); then
        delay="start-up + $(secs $((t_start * where / 300))) s"
        sleep "$(secs $((t_start * where / 300)))"
      else
        delay="step $((prev_step + ahead)) + $(secs $((t_sub * frac / 1000))) s"
        wait_lines "$run/metrics.jsonl" $((prev_step + ahead)) "$pid" 120
        sleep "$(secs $((t_sub * frac / 1000)))"
      fi
      kill -KILL "$pid" 2> /dev/null
      wait "$pid" 2> /dev/null
      rc=$?
      forget "$pid"
    else  # the last start runs to the end
      train_fg "${args[@]}" --set run.dir="$run" > "$log" 2>&1
      rc=$?
    fi
    # This start resumed from the newest checkpoint the last one left (never a
    # .tmp), or started afresh when there was none, and went on at the next step.
    local rline first
    rline=$(grep -o 'resume: .* at step [0-9]*' "$log")
    if [[ -n $prev && -n $rline ]]; then
      [[ $rline == "resume: $prev at step $prev_step" ]] && n_resume=$((n_resume + 1)) ||
        problem "start $k: '$rline', expected 'resume: $prev at step $prev_step'"
    elif [[ -n $rline ]]; then
      problem "start $k: '$rline' but there was no checkpoint"
    elif [[ -n $prev ]] && grep -q "steps 0 -> " "$log"; then
      problem "start $k: started from step 0 although $prev exists"
    fi
    first=$(grep -m1 -Eo '^step +[0-9]+/' "$log" | grep -Eo '[0-9]+')
    if [[ -n $first ]]; then
      ((first == prev_step + 1)) && n_cont=$((n_cont + 1)) ||
        problem "start $k: first step $first, expected $((prev_step + 1))"
    fi
    if ((k > kills)); then
      ((rc == 0)) || problem "the last start exited $rc: $(tail -1 "$log")"
      break
    fi
    if ((rc == 137)); then
      n_kill=$((n_kill + 1))
    elif ((rc == 0)); then
      n_ended=$((n_ended + 1))  # finished before the kill
      problem "start $k finished before its kill (at $delay)"
      break
    else
      problem "start $k exited $rc before its kill: $(tail -1 "$log")"
    fi
    # What the kill left.
    local tmps
    tmps=$(find "$run" -name '*.tmp')
    if [[ -n $tmps ]]; then
      n_tmp=$((n_tmp + 1))
      grep -q '\.h5\.tmp$' <<< "$tmps" && n_tmp_ckpt=$((n_tmp_ckpt + 1))
    fi
    if [[ -z $first ]]; then
      n_startup=$((n_startup + 1))
    elif grep -q '\.h5\.tmp$' <<< "$tmps"; then
      n_save=$((n_save + 1))
    else
      n_step=$((n_step + 1))
    fi
    local newest newest_step=0
    newest=$(newest_checkpoint "$run")
    if [[ -n $newest ]]; then
      newest_step=$(step_of "$newest")
      verify_checkpoint "$newest" && n_verified=$((n_verified + 1))
      ((newest_step >= prev_step)) || problem "kill $k: newest checkpoint $newest is older than $prev"
    fi
    local torn dup gaps mlast
    read -r torn dup gaps _ mlast < <(metrics_check "$run/metrics.jsonl")
    n_torn=$((n_torn + torn))
    n_dup=$((n_dup + dup))
    ((gaps == 0)) || problem "kill $k: metrics.jsonl has $gaps gaps or steps out of order"
    # Every saved step is recorded; at most the step being saved is ahead.
    ((mlast >= newest_step && mlast <= newest_step + 1)) ||
      problem "kill $k: metrics.jsonl ends at step $mlast, the newest checkpoint is at $newest_step"
    prev=$newest
    prev_step=$newest_step
  done
  ((n_torn == 0)) || problem "$n_torn torn lines in metrics.jsonl"
  ((n_dup == 0)) || problem "$n_dup duplicate steps in metrics.jsonl"
  ((n_kill >= kills)) || problem "$n_kill kills, $kills wanted"
  check_metrics_full "$run/metrics.jsonl" "$steps"
  local stale
  stale=$(find "$run" -name '*.tmp' | wc -l)
  ((stale == 0)) || problem "$stale .tmp files left after the run finished: $(find "$run" -name '*.tmp' | head -3)"
  # The same numbers as the uninterrupted run: every step's loss, gradient
  # norm, learning rate and token count, and the final val_loss.
  local cmp same=""
  cmp=$(metrics_compare "$d/ref/metrics.jsonl" "$run/metrics.jsonl")
  if [[ $cmp == same* ]]; then
    read -r _ n loss val <<< "$cmp"
    same="$n steps bit-identical to the uninterrupted run (last loss $loss, val_loss $val)"
  else
    same="differs from the uninterrupted run"
    problem "metrics differ from the uninterrupted run: ${cmp#differ }"
  fi
  cmp -s "$d/ref/sample.txt" "$run/sample.txt" && same+=", same final sample" ||
    same+=", final sample differs"
  report "1 kill -9" "$n_kill kills ($n_startup in start-up, $n_step in a step, $n_save in a save), $n_tmp left a .tmp ($n_tmp_ckpt a checkpoint .tmp), $n_resume resumes, $n_cont starts continued at the next step, $n_verified checkpoints verified, $n_torn torn lines, $n_dup duplicate steps, $stale stale .tmp at the end; $same" "$t0"
}

# ---------------------------------------------------------------------------
# 2. A full disk: a 6 MiB tmpfs holds three checkpoints of the debug model.
trial_full_disk() {
  local t0=$SECONDS d=$out/full mnt=$out/full/mnt
  mkdir -p "$mnt"
  if ! mount -t tmpfs -o size=6m tmpfs "$mnt" 2> "$d/mount.err"; then
    skip "2 full disk" "cannot mount a tmpfs ($(id -un)): $(head -1 "$d/mount.err")"
    return
  fi
  mounts+=("$mnt")
  local run=$mnt/run rc
  local args=(--set training.steps=20 --set checkpoint.interval=1 --set checkpoint.keep=0
    --set run.dir="$run")
  train_fg "${args[@]}" > "$d/fill.out" 2> "$d/fill.err"
  rc=$?
  ((rc != 0 && rc != 139 && rc != 124)) || problem "checkpoints on a full disk: exit $rc"
  progress_lines < "$d/fill.err" > "$d/fill.errlines"
  one_error_line "$d/fill.errlines" "^strata: error: .*$run/[^ :]+.*No space left on device"
  local tmps
  tmps=$(find "$mnt" -name '*.tmp')
  [[ -z $tmps ]] || problem "a .tmp is left on the full disk: $tmps"
  local c n_ok=0 n_ckpt=0 newest
  for c in "$run"/checkpoints/step_*.h5; do
    [[ -e $c ]] || continue
    n_ckpt=$((n_ckpt + 1))
    verify_checkpoint "$c" && n_ok=$((n_ok + 1))
  done
  newest=$(newest_checkpoint "$run")
  [[ -n $newest ]] || problem "no checkpoint was written before the disk filled"
  local torn dup gaps first last
  read -r torn dup gaps first last < <(metrics_check "$run/metrics.jsonl")
  ((torn == 0 && dup == 0)) || problem "metrics.jsonl on the full disk: $torn torn, $dup duplicate lines"
  # Free space, then the same command resumes and finishes.
  local resumed=no
  if mount -o remount,size=64m "$mnt" 2> "$d/remount.err"; then
    train_fg "${args[@]}" > "$d/resume.out" 2> "$d/resume.err"
    rc=$?
    ((rc == 0)) || problem "resume after freeing space: exit $rc: $(tail -1 "$d/resume.err")"
    if grep -q "resume: $newest at step $(step_of "$newest")" "$d/resume.err"; then
      resumed="from step $(step_of "$newest")"
    else
      problem "the resume did not start from $newest"
    fi
    check_metrics_full "$run/metrics.jsonl" 20
  else
    problem "cannot remount the tmpfs larger: $(head -1 "$d/remount.err")"
  fi
  # metrics.jsonl on a full disk: a run without checkpoints, then the disk
  # fills up (a file takes all the space left): the next record that does not
  # fit stops the run with one line, and no line is torn.
  local run2=$mnt/run2 pid at_fill
  train_bg --set training.steps=600 --set checkpoint.interval=0 --set run.dir="$run2" \
    > "$d/metrics.out" 2> "$d/metrics.err" &
  pid=$!
  bg+=("$pid")
  if wait_lines "$run2/metrics.jsonl" 3 "$pid"; then
    dd if=/dev/zero of="$mnt/filler" bs=4k 2> /dev/null
    at_fill=$(wc -l < "$run2/metrics.jsonl")
  else
    problem "the metrics run did not start: $(tail -1 "$d/metrics.err")"
    at_fill=0
  fi
  local end=$((SECONDS + 120))
  while kill -0 "$pid" 2> /dev/null && ((SECONDS < end)); do sleep 0.05; done
  kill -KILL "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  rc=$?
  forget "$pid"
  rm -f "$mnt/filler"
  read -r torn dup gaps first last < <(metrics_check "$run2/metrics.jsonl")
  ((rc == 1)) || problem "metrics.jsonl on a full disk: exit $rc (expected 1)"
  progress_lines < "$d/metrics.err" > "$d/metrics.errlines"
  # The record that no longer fits: metrics.jsonl's line or its TensorBoard
  # event (written right after it, tb/).
  one_error_line "$d/metrics.errlines" \
    "^strata: error: .*$run2/(metrics.jsonl|tb/events[.]out[.]tfevents[.][^ :]+).*No space left on device"
  ((torn == 0)) || problem "metrics.jsonl on a full disk: $torn torn lines"
  ((last < 600)) || problem "metrics.jsonl on a full disk: the run went on to step $last"
  report "2 full disk" "$n_ckpt checkpoints written before the disk filled (exit ${rc}), $n_ok load, $(wc -l < "$d/fill.errlines") error line, $(wc -w <<< "$tmps") .tmp left, resumed after freeing space: $resumed; metrics.jsonl filling up: stopped at step $last ($((last - at_fill)) steps after the disk filled), $torn torn lines" "$t0"
}

# ---------------------------------------------------------------------------
# 3. A read-only run.dir: a read-only bind mount of a finished run (as root,
# permissions do not stop writes; a read-only mount does).
trial_read_only() {
  local t0=$SECONDS d=$out/ro src=$out/ro/src mnt=$out/ro/mnt
  mkdir -p "$src" "$mnt"
  train_fg --set training.steps=4 --set run.dir="$src/run" > "$d/base.log" 2>&1 ||
    problem "the run to mount: $(tail -1 "$d/base.log")"
  if ! mount --bind "$src" "$mnt" 2> "$d/mount.err"; then
    skip "3 read-only run.dir" "cannot bind-mount ($(id -un)): $(head -1 "$d/mount.err")"
    return
  fi
  mounts+=("$mnt")
  if ! mount -o remount,bind,ro "$mnt" 2> "$d/mount.err"; then
    skip "3 read-only run.dir" "cannot remount read-only: $(head -1 "$d/mount.err")"
    return
  fi
  snapshot() { (cd "$src" && find . -printf '%p %s %T@ %m\n' | sort | md5sum); }
  local before rc case n=0
  before=$(snapshot)
  for case in run new; do  # resume the finished run; a new run.dir inside the mount
    timeout -k 5 120 "$strata" train "${base[@]}" --set training.steps=8 --set run.dir="$mnt/$case" \
      > "$d/$case.out" 2> "$d/$case.err"
    rc=$?
    ((rc == 1)) || problem "$case: exit $rc (expected 1)"
    one_error_line "$d/$case.err" "^strata: error: run.dir $mnt/$case.*Read-only file system"
    [[ -s $d/$case.out ]] && problem "$case: printed to stdout: $(head -c 200 "$d/$case.out")"
    n=$((n + 1))
  done
  local written=nothing
  if [[ $(snapshot) != "$before" ]]; then
    written=something
    problem "files under the read-only mount changed"
  fi
  report "3 read-only run.dir" "$n runs (resume, new directory): exit 1, one line each ('$(head -1 "$d/run.err" | cut -c1-90)'), $written written" "$t0"
}

# ---------------------------------------------------------------------------
# 4. Two runs on one directory, and lock files left behind.
trial_two_runs() {
  local t0=$SECONDS d=$out/two run=$out/two/run
  mkdir -p "$d"
  local args=(--set training.steps=150 --set checkpoint.interval=50 --set run.dir="$run")
  train_bg "${args[@]}" > "$d/first.log" 2>&1 &
  local first=$!
  bg+=("$first")
  wait_lines "$run/metrics.jsonl" 1 "$first" || problem "the first run did not start: $(tail -1 "$d/first.log")"
  cp "$run/recipe.toml" "$d/recipe.before" 2> /dev/null
  local a rc2 ms alive
  a=$(now_ms)
  timeout -k 5 60 "$strata" train "${base[@]}" "${args[@]}" --set optimizer.lr=1e-4 \
    > "$d/second.out" 2> "$d/second.err"
  rc2=$?
  ms=$(($(now_ms) - a))
  kill -0 "$first" 2> /dev/null && alive=yes || alive=no
  [[ $alive == yes ]] || problem "the first run had ended before the second stopped: raise the steps"
  ((rc2 == 1)) || problem "the second run: exit $rc2 (expected 1)"
  one_error_line "$d/second.err" "^strata: error: run.dir $run is in use by another process \\(pid $first\\)"
  wait "$first" 2> /dev/null
  local rc1=$?
  forget "$first"
  ((rc1 == 0)) || problem "the first run: exit $rc1: $(tail -1 "$d/first.log")"
  grep -q "done: 150 steps" "$d/first.log" || problem "the first run did not finish its 150 steps"
  check_metrics_full "$run/metrics.jsonl" 150
  cmp -s "$run/recipe.toml" "$d/recipe.before" || problem "the second run changed recipe.toml"
  # A lock file left by a killed run (its PID inside) is not a lock.
  local stale=$d/stale pid rc
  train_bg --set training.steps=60 --set checkpoint.interval=5 --set run.dir="$stale" > "$d/stale1.log" 2>&1 &
  pid=$!
  bg+=("$pid")
  wait_lines "$stale/metrics.jsonl" 12 "$pid"
  kill -KILL "$pid"
  wait "$pid" 2> /dev/null
  forget "$pid"
  [[ $(cat "$stale/.lock" 2> /dev/null) == "$pid" ]] || problem "the killed run's .lock does not hold its pid"
  train_fg --set training.steps=60 --set checkpoint.interval=5 --set run.dir="$stale" > "$d/stale2.log" 2>&1
  rc=$?
  ((rc == 0)) && grep -q "resume: .* at step" "$d/stale2.log" ||
    problem "after a killed run (a stale .lock), the next run: exit $rc: $(tail -1 "$d/stale2.log")"
  # A lock file naming a live process (pid 1) that holds no lock.
  mkdir -p "$d/pid1"
  echo 1 > "$d/pid1/.lock"
  train_fg --set training.steps=2 --set run.dir="$d/pid1" > "$d/pid1.log" 2>&1
  rc=$?
  ((rc == 0)) || problem "a .lock naming pid 1 but not locked: exit $rc: $(tail -1 "$d/pid1.log")"
  report "4 two runs" "the second stopped after $(secs "$ms") s with exit $rc2 ('$(cut -c1-100 "$d/second.err" | head -1)'), the first finished (exit $rc1), metrics.jsonl steps 1-150 once each; a killed run's stale .lock and a .lock naming pid 1: the next runs started" "$t0"
}

# ---------------------------------------------------------------------------
# 5. SIGTERM, then SIGKILL, to rank 1 under mpirun -np 2. A wrapper records
# each rank's exit status (mpirun reports one status for the job).
trial_mpi() {
  local t0=$SECONDS d=$out/mpi
  if [[ -z $mpirun || ! -x $mpirun ]]; then
    skip "5 mpirun one rank" "no mpirun"
    return
  fi
  mkdir -p "$d"
  cat > "$d/rank.sh" << 'EOF'
#!/usr/bin/env bash
# rank.sh COMMAND...: runs COMMAND, appends "rank R exit S" to $FAULTS_RANK_STATUS.
"$@"
rc=$?
echo "rank ${OMPI_COMM_WORLD_RANK:-?} exit $rc" >> "$FAULTS_RANK_STATUS"
exit $rc
EOF
  chmod +x "$d/rank.sh"
  local summary=() sig
  for sig in TERM KILL; do
    local run=$d/$sig status=$d/$sig.ranks
    local cmd=(timeout -k 10 120 "$mpirun" -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1
      -x FAULTS_RANK_STATUS "$d/rank.sh" "$strata" train "${base[@]}" --set training.micro_batch_size=4
      --set training.steps=120 --set checkpoint.interval=10 --set run.dir="$run")
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      FAULTS_RANK_STATUS=$status "${cmd[@]}" > "$d/$sig.log" 2>&1 &
    local job=$!
    bg+=("$job")
    local waited=14
    [[ $sig == TERM ]] && waited=5
    wait_lines "$run/metrics.jsonl" "$waited" "$job" 90 ||
      problem "SIG$sig: the job did not start training: $(tail -1 "$d/$sig.log")"
    # timeout -> mpirun -> rank.sh -> strata; the rank from its environment.
    local mp w s target=""
    mp=$(pgrep -P "$job")
    for w in $(pgrep -P "$mp" 2> /dev/null); do
      for s in $(pgrep -P "$w"); do
        tr '\0' '\n' < "/proc/$s/environ" 2> /dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1' && target=$s
      done
    done
    local a rc ms
    a=$(now_ms)
    if [[ -n $target ]]; then
      kill -"$sig" "$target"
    else
      problem "SIG$sig: rank 1 not found"
    fi
    wait "$job" 2> /dev/null
    rc=$?
    ms=$(($(now_ms) - a))
    forget "$job"
    ((rc == 124 || ms > 100000)) && problem "SIG$sig: the job was still running after $(secs "$ms") s"
    ((rc == 0)) && problem "SIG$sig to rank 1: mpirun exited 0"
    local ranks stopped newest
    ranks=$(sort "$status" 2> /dev/null | sed 's/ exit /: /' | paste -sd, | sed 's/,/, /g')
    stopped=$(grep -o 'stopped by signal [0-9]* after step [0-9]*' "$d/$sig.log" | sort -u | paste -sd';')
    newest=$(newest_checkpoint "$run")
    if [[ -n $newest ]]; then
      verify_checkpoint "$newest"
    else
      problem "SIG$sig: no checkpoint"
    fi
    if [[ $sig == TERM ]]; then
      [[ -n $stopped ]] || problem "SIGTERM: no 'stopped by signal 15' line"
      [[ -n $newest && $stopped == *"after step $(step_of "$newest")" ]] ||
        problem "SIGTERM: the newest checkpoint $newest is not the stop's ($stopped)"
    fi
    # The same command resumes and finishes.
    local rrc first
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      FAULTS_RANK_STATUS=$status.resume "${cmd[@]}" > "$d/$sig.resume.log" 2>&1
    rrc=$?
    ((rrc == 0)) || problem "SIG$sig: the resume exited $rrc: $(grep -m1 error "$d/$sig.resume.log")"
    [[ -n $newest ]] && ! grep -q "resume: $newest at step" "$d/$sig.resume.log" &&
      problem "SIG$sig: the resume did not start from $newest"
    first=$(grep -m1 -Eo '^step +[0-9]+/' "$d/$sig.resume.log" | grep -Eo '[0-9]+')
    [[ -n $newest && $first == $(($(step_of "$newest") + 1)) ]] ||
      problem "SIG$sig: the resume's first step is '$first'"
    check_metrics_full "$run/metrics.jsonl" 120
    summary+=("SIG$sig to rank 1: job ended after $(secs "$ms") s, mpirun exit $rc, ${ranks:-no rank status} (a rank killed by mpirun writes none)${stopped:+, $stopped}, checkpoint ${newest:+step $(step_of "$newest")} loads, resumed and finished (exit $rrc)")
  done
  report "5 mpirun one rank" "$(joined "${summary[@]}")" "$t0"
}

# ---------------------------------------------------------------------------
# 6. SIGINT, SIGTERM, SIGHUP and SIGUSR1 (SLURM's preemption warning) alone,
# then resume: the same losses as an uninterrupted run.
trial_interrupt() {
  local t0=$SECONDS d=$out/int
  mkdir -p "$d"
  local args=(--set training.steps=80 --set checkpoint.interval=0)
  train_fg "${args[@]}" --set run.dir="$d/ref" > "$d/ref.log" 2>&1 || problem "uninterrupted run: $(tail -1 "$d/ref.log")"
  local summary=() sig code
  for sig in INT TERM HUP USR1; do
    code=$((128 + $(kill -l "$sig")))
    local run=$d/$sig pid rc stop
    train_bg "${args[@]}" --set run.dir="$run" > "$d/$sig.log" 2>&1 &
    pid=$!
    bg+=("$pid")
    wait_lines "$run/metrics.jsonl" 10 "$pid"
    kill -"$sig" "$pid"
    wait "$pid" 2> /dev/null
    rc=$?
    forget "$pid"
    ((rc == code)) || problem "SIG$sig: exit $rc (expected $code)"
    stop=$(grep -Eo 'stopped by signal [0-9]+ after step [0-9]+' "$d/$sig.log" | grep -Eo '[0-9]+$')
    [[ -n $stop && -f $(printf '%s/checkpoints/step_%08d.h5' "$run" "$stop") ]] ||
      problem "SIG$sig: no checkpoint of the step it stopped after ('$stop')"
    train_fg "${args[@]}" --set run.dir="$run" > "$d/$sig.resume.log" 2>&1 ||
      problem "SIG$sig: the resume failed: $(tail -1 "$d/$sig.resume.log")"
    grep -q "resume: .* at step $stop\$" "$d/$sig.resume.log" || problem "SIG$sig: did not resume at step $stop"
    local cmp
    cmp=$(metrics_compare "$d/ref/metrics.jsonl" "$run/metrics.jsonl")
    [[ $cmp == same* ]] || problem "SIG$sig: metrics differ from the uninterrupted run: ${cmp#differ }"
    summary+=("SIG$sig after step $stop: exit $rc, resumed, ${cmp%% *} as uninterrupted over 80 steps")
  done
  report "6 SIGINT/SIGTERM/SIGHUP/SIGUSR1" "$(joined "${summary[@]}")" "$t0"
}

for t in ${FAULTS_TRIALS:-1 2 3 4 5 6}; do
  case $t in
    1) trial_kill ;;
    2) trial_full_disk ;;
    3) trial_read_only ;;
    4) trial_two_runs ;;
    5) trial_mpi ;;
    6) trial_interrupt ;;
    *) echo "faults: no trial '$t' (FAULTS_TRIALS: 1-6)" >&2; exit 2 ;;
  esac
done
echo "faults: $pass passed, $fail failed${skipped:+, $skipped skipped} ($SECONDS s)"
((fail == 0))
