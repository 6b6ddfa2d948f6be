#!/usr/bin/env bash
# mpi_train_test.sh MPIRUN STRATA SOURCE_DIR WORK_DIR PHASE: `strata train` under
# mpirun against the single-process run of the same recipe (recipes/debug.toml,
# global batch 8 sequences = 4 x 2 accumulation alone, 2 x 2 x dp 2 in parallel).
#   curve    dp=2 (2 ranks), and dp=2 x tp=2 with ZeRO-1 (4 ranks): the loss of
#            each of 20 steps and the final val_loss equal the single run's
#   layouts  save at dp=2 x tp=2 (ZeRO-1) after 10 steps, resume alone; save alone,
#            resume at dp=2 x tp=2: steps 11-20 equal the uninterrupted run's
#   signals  SIGTERM to one rank: every rank stops at the same step, rank 0
#            saves a checkpoint and the job exits 0; SIGKILL to one rank: the
#            job ends with an error within a bounded time
#   layerskip  layer dropout + early exits: tp=2 and dp=2 x tp=2 follow the single
#            run's curve; every rank computes the same global masks (digests)
#   lp       a Layer-Parallel pair (one whole layer per tp rank): tp=2 follows
#            the single run; dp=2 x tp=2 (ZeRO-1) saves at step 10, resumed alone
#   device   dp=2 x tp=2 (ZeRO-1), dp=2 with ZeRO-3, and pp=2, on the SIMT device (the
#            CUDA kernels; the collectives on device buffers, the pipeline's messages
#            staged through the host) follow the single CPU run
#   zero     ZeRO-2 and ZeRO-3 at dp=2, dp=4 and dp=2 x tp=2 against ZeRO-0 of
#            the same layout over 20 steps: losses to 1e-6 relative, final
#            weights to 1e-6 (||a - b|| / ||a|| per tensor, strata inspect
#            --compare), moments to 1e-4; LayerSkip on a ladder plan at dp=2
#   zero_layouts  ZeRO-3 at dp=4 saves at step 10 and resumes alone (ZeRO-0),
#            and the reverse: steps 11-20 follow the uninterrupted run
#   order    dp=2 x tp=2 on the SIMT device, ZeRO-1 (per-layer async dp
#            all-reduces beside the blocking tp ones) and ZeRO-3 (prefetching
#            gathers): the members of every group issue its collectives in
#            the same order, the ranks' orders have no cycle, all on one queue
#            (STRATA_COLLECTIVE_TRACE; the rule NcclComm follows:
#            parallel/collective_order.h)
#   pipeline a 4-layer model: pp 2 (1f1b, gpipe, interleaved x 2), pp 4, pp 2 x dp 2
#            (ZeRO-0 and -1), pp 2 x tp 2 (ZeRO-1) follow the single run (the same layout to 1e-6,
#            bit for bit where the summation order is the same); LayerSkip exits on
#            both stages of a ladder plan with a tied embedding and recomputation;
#            save at pp 2 x tp 2, resume alone and the reverse; a killed stage
#            ends the job; the sample generated through the stages equals the
#            single run's; placement over two named nodes (STRATA_NODE_NAME): a
#            pipeline across them is said, a tp group across them warned about
set -u
mpirun=$1 strata=$2 src=$3 work=$4 phase=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=PASSIVE
cd "$src" || exit 1
work=$work/$phase
rm -rf "$work"
mkdir -p "$work"

fail() {
  echo "FAIL: $*"
  exit 1
}
# Common settings; the dataset is prepared once, by the first run, in $work.
# The CPU on every host (a phase's own run.device comes later and wins).
common=(--set run.device=cpu --set data.dataset="$work/data" --set log.interval=1 --set training.grad_accum_steps=2
  --set lr_scheduler.decay_steps=20 --set log.sample_prompt= --set checkpoint.keep=0)
train1() {  # run_dir steps [args]: alone, micro-batch 4
  local dir=$1 steps=$2
  shift 2
  "$strata" train recipes/debug.toml "${common[@]}" --set run.dir="$dir" \
    --set training.steps="$steps" --set training.micro_batch_size=4 "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "single-process run $dir failed"; }
}
trainp() {  # np tp run_dir steps [args]: micro-batch 8 / (2 x np / tp) (pp: give it)
  local np=$1 tp=$2 dir=$3 steps=$4
  shift 4
  local dp=$((np / tp))
  timeout -k 10 300 "$mpirun" -np "$np" --oversubscribe --bind-to none "$strata" train \
    recipes/debug.toml "${common[@]}" --set run.dir="$dir" --set training.steps="$steps" \
    --set parallelism.tp="$tp" --set training.micro_batch_size=$((4 / dp)) "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "mpirun -np $np (tp $tp) run $dir failed"; }
}
losses() {  # metrics.jsonl -> "step loss" lines
  sed -n 's/.*"loss":\([-0-9.e]*\).*"step":\([0-9]*\).*/\2 \1/p' "$1/metrics.jsonl"
}
val_loss() {
  sed -n 's/.*"val_loss":\([-0-9.e]*\).*/\1/p' "$1/metrics.jsonl" | tail -1
}
# compare A B first_step: losses of steps >= first_step agree to 1e-4 (float
# summation order differs between layouts; a wrong reduction is off by 1e-2+).
compare() {
  local a=$1 b=$2 from=$3
  local n
  n=$(join <(losses "$a") <(losses "$b") | awk -v from="$from" '$1 >= from' | wc -l)
  [[ $n -eq $((21 - from)) ]] || fail "expected steps $from-20 in both $a and $b, found $n in common"
  join <(losses "$a") <(losses "$b") | awk -v from="$from" -v a="$a" -v b="$b" '
    $1 >= from { d = $2 - $3; if (d < 0) d = -d; if (d > max) max = d
                 if (d > 1e-4) { printf "step %d: loss %s (%s) vs %s (%s)\n", $1, $2, a, $3, b; bad = 1 } }
    END { printf "max |loss difference| %.3g over steps %d-20\n", max, from; exit bad }' ||
    fail "$b does not follow $a"
  awk -v x="$(val_loss "$a")" -v y="$(val_loss "$b")" 'BEGIN {
    d = x - y; if (d < 0) d = -d; printf "val_loss %s vs %s\n", x, y; exit !(x != "" && d < 1e-4) }' ||
    fail "val_loss differs between $a and $b"
}

# compare_rel A B: every step's loss and the final val_loss of B within 1e-6
# of A's, relative (the same layout: only the summation order may differ).
compare_rel() {
  local a=$1 b=$2
  local n
  n=$(join <(losses "$a") <(losses "$b") | wc -l)
  ((n == 20)) || fail "expected steps 1-20 in both $a and $b, found $n in common"
  join <(losses "$a") <(losses "$b") | awk -v a="$a" -v b="$b" '
    { d = ($2 - $3) / $2; if (d < 0) d = -d; if (d > max) max = d
      if (d > 1e-6) { printf "step %d: loss %s (%s) vs %s (%s)\n", $1, $2, a, $3, b; bad = 1 } }
    END { printf "max relative loss difference %.3g over 20 steps\n", max; exit bad }' ||
    fail "$b does not follow $a to 1e-6"
  awk -v x="$(val_loss "$a")" -v y="$(val_loss "$b")" 'BEGIN {
    d = (x - y) / x; if (d < 0) d = -d; printf "val_loss %s vs %s\n", x, y
    exit !(x != "" && d < 1e-6) }' || fail "val_loss of $b differs from $a's by more than 1e-6"
}
# weights_match A B: the final checkpoints' weights to 1e-6, moments to 1e-4.
weights_match() {
  "$strata" inspect "$1/checkpoints/step_00000020.h5" \
    --compare "$2/checkpoints/step_00000020.h5" --rtol 1e-6 --moments-rtol 1e-4 ||
    fail "the final weights of $2 differ from $1's"
}

# signal_one_rank SIG name: starts a long 2-rank run in $work/name, sends SIG
# to its last rank once it trains, and waits (60 s at most) for mpirun to end;
# sets job (mpirun's pid, for `wait`) and start.
signal_one_rank() {  # SIG name [args]
  local sig=$1 name=$2
  shift 2
  "$mpirun" -np 2 --oversubscribe --bind-to none "$strata" train recipes/debug.toml \
    "${common[@]}" --set run.dir="$work/$name" --set training.steps=100000 \
    --set training.micro_batch_size=2 "$@" >"$work/$name.log" 2>&1 &
  job=$!
  for _ in $(seq 600); do
    [[ -s $work/$name/metrics.jsonl ]] && break
    sleep 0.1
  done
  local pids
  pids=$(pgrep -f "^$strata train .*run.dir=$work/$name") || fail "no rank processes found"
  kill -"$sig" "$(tail -1 <<<"$pids")"
  start=$SECONDS
  while kill -0 "$job" 2>/dev/null && ((SECONDS - start < 60)); do sleep 0.2; done
  if kill -0 "$job" 2>/dev/null; then
    kill -KILL "$job"
    pkill -KILL -f "run.dir=$work/$name"
    fail "SIG$sig to one rank: the job is still running after 60 s"
  fi
}

# order_check DIR: DIR.trace.* (one per rank) follow the order rule
# (tests/collective_order_check.cpp, built as collective_order_check), with collectives of both groups and
# async ones among them.
order_check() {
  local dir=$1
  local files=("$dir".trace.*)
  [[ ${#files[@]} -eq 4 ]] || fail "expected 4 traces of $dir, found ${#files[@]}"
  grep -q '^tp allreduce_sum q' "${files[0]}" || fail "no tp all-reduce traced in $dir"
  grep -q '^dp [a-z_]*_async q' "${files[0]}" || fail "no async dp collective traced in $dir"
  "${STRATA_ORDER_CHECK:?the collective_order_check binary (set by CTest)}" 2 "${files[@]}" || fail "$dir breaks the collective order rule"
}

case $phase in
  order)
    STRATA_COLLECTIVE_TRACE="$work/zero1.trace" trainp 4 2 "$work/zero1" 3 \
      --set parallelism.zero=1 --set run.device=simt
    order_check "$work/zero1"
    STRATA_COLLECTIVE_TRACE="$work/zero3.trace" trainp 4 2 "$work/zero3" 3 \
      --set parallelism.zero=3 --set run.device=simt
    order_check "$work/zero3"
    ;;
  device)
    train1 "$work/single" 20
    trainp 4 2 "$work/simt" 20 --set parallelism.zero=1 --set run.device=simt
    grep -q "device simt" "$work/simt.log" || fail "the run does not say it is on simt"
    compare "$work/single" "$work/simt" 1
    # ZeRO-3's store on the device: its buffers, gathers and reduce-scatters
    # on device memory (the SIMT executor's) follow the CPU run too.
    trainp 2 1 "$work/simt-zero3" 20 --set parallelism.zero=3 --set run.device=simt
    compare "$work/single" "$work/simt-zero3" 1
    # Pipeline stages on the device: the messages between them staged through
    # host memory (the pipeline's communicator is MPI), as on cuda.
    trainp 2 1 "$work/simt-pp2" 20 --set parallelism.pp=2 --set run.device=simt \
      --set training.micro_batch_size=4
    compare "$work/single" "$work/simt-pp2" 1
    ;;
  curve)
    train1 "$work/single" 20
    trainp 2 1 "$work/dp2" 20
    grep -q "parallel: 2 processes (mpi) = dp 2 x tp 1" "$work/dp2.log" || fail "no grid line"
    grep -q "time per step: .* ms = compute .* ms + communication .* ms" "$work/dp2.log" ||
      fail "no compute/communication split"
    compare "$work/single" "$work/dp2" 1
    trainp 4 2 "$work/dp2tp2" 20 --set parallelism.zero=1
    grep -q "dp 2 x tp 2.*(ZeRO-1)" "$work/dp2tp2.log" || fail "no ZeRO-1 grid line"
    compare "$work/single" "$work/dp2tp2" 1
    ;;
  layouts)
    train1 "$work/single" 20
    # dp2 x tp2 (ZeRO-1) for 10 steps, then alone to 20.
    trainp 4 2 "$work/a" 10 --set parallelism.zero=1
    train1 "$work/a" 20
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/a.log" || fail "run a did not resume"
    compare "$work/single" "$work/a" 11
    # Alone for 10 steps, then dp2 x tp2 to 20.
    train1 "$work/b" 10
    trainp 4 2 "$work/b" 20
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/b.log" || fail "run b did not resume"
    compare "$work/single" "$work/b" 11
    # And with the stages' weight stores: pp 2 x dp 2 with ZeRO-3, then alone;
    # alone, then pp 2 x dp 2 with ZeRO-2.
    trainp 4 1 "$work/c" 10 "${four[@]}" --set parallelism.pp=2 --set parallelism.zero=3 \
      --set training.micro_batch_size=2
    train1 "$work/c" 20 "${four[@]}"
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/c.log" || fail "run c did not resume"
    compare "$work/single" "$work/c" 11
    train1 "$work/d" 10 "${four[@]}"
    trainp 4 1 "$work/d" 20 "${four[@]}" --set parallelism.pp=2 --set parallelism.zero=2 \
      --set training.micro_batch_size=2
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/d.log" || fail "run d did not resume"
    compare "$work/single" "$work/d" 11
    # Checkpoints saved by either layout hold the same tensors.
    "$strata" inspect "$work/a/checkpoints/step_00000010.h5" | grep -q "step: *10" ||
      fail "inspect of the tp=2 checkpoint"
    ;;
  signals)
    train1 "$work/prep" 1  # prepares the dataset
    # Alone, SIGINT at arbitrary moments (inside GEMM kernels too): the step
    # finishes, a checkpoint is saved and the exit status is 130, every time.
    for i in 1 2 3 4 5 6; do
      "$strata" train recipes/debug.toml "${common[@]}" --set run.dir="$work/int$i" \
        --set training.steps=100000 --set training.micro_batch_size=4 >"$work/int$i.log" 2>&1 &
      job=$!
      for _ in $(seq 600); do
        [[ -s $work/int$i/metrics.jsonl ]] && break
        sleep 0.05
      done
      sleep "0.$((RANDOM % 5))"
      kill -INT "$job"
      wait "$job"
      status=$?
      ((status == 130)) || { cat "$work/int$i.log"; fail "SIGINT alone: exit status $status, not 130"; }
      ls "$work"/int$i/checkpoints/step_*.h5 >/dev/null 2>&1 || fail "no checkpoint after SIGINT"
    done
    echo "SIGINT alone: 6 of 6 stopped cleanly with a checkpoint"
    # SIGTERM to rank 1 only: both stop at the same step and save.
    signal_one_rank TERM term
    wait "$job"
    status=$?
    # A run stopped by a signal exits 128 + the signal on every rank.
    ((status == 143)) || { cat "$work/term.log"; fail "SIGTERM to one rank: mpirun exited $status, not 143"; }
    grep -q "stopped by signal 15 after step" "$work/term.log" || fail "no stop message"
    grep -q "strata: error" "$work/term.log" && fail "SIGTERM to one rank: an error was reported"
    ls "$work"/term/checkpoints/step_*.h5 >/dev/null 2>&1 || fail "no checkpoint after SIGTERM"
    echo "SIGTERM: $(grep -o 'stopped by signal.*' "$work/term.log")"
    # SIGKILL to rank 1: the job ends with an error, not a hang.
    signal_one_rank KILL kill
    wait "$job" && fail "SIGKILL to one rank: mpirun exited 0"
    echo "SIGKILL: job ended after $((SECONDS - start)) s"
    ;;
  layerskip)
    # LayerSkip (layer dropout + early exits): masks are keyed by global sample
    # index, so tp=2 and dp=2 x tp=2 follow the single run's loss curve; every
    # rank prints its masks' digest and the whole micro-batch's.
    ls=(--set layerskip.p_max=0.5 --set layerskip.e_scale=1.0 --set layerskip.curriculum=rotational
      --set layerskip.rotation=1 --set layerskip.e_formula=cumulative)
    train1 "$work/single" 20 "${ls[@]}"
    trainp 2 2 "$work/tp2" 20 "${ls[@]}"
    compare "$work/single" "$work/tp2" 1
    STRATA_DEBUG_LAYERSKIP=1 trainp 4 2 "$work/dp2tp2" 20 "${ls[@]}"
    compare "$work/single" "$work/dp2tp2" 1
    grep "^layerskip masks" "$work/dp2tp2.log" >"$work/masks.txt"
    n=$(wc -l <"$work/masks.txt")
    ((n == 4 * 20 * 2)) || fail "expected 160 mask lines (4 ranks x 20 steps x 2 micro-batches), got $n"
    # Fields: 4 rank, 6 dp rank, 8 step, 10 micro, 12 local digest, 14 global digest.
    global=$(awk '{ print $8, $10, $14 }' "$work/masks.txt" | sort -u | wc -l)
    ((global == 40)) || fail "ranks disagree on the global masks: $global distinct, not 40"
    local_tp=$(awk '{ print $6, $8, $10, $12 }' "$work/masks.txt" | sort -u | wc -l)
    ((local_tp == 80)) || fail "tp ranks of one dp rank drew different masks: $local_tp, not 80"
    echo "masks: 4 ranks agree on all 40 global micro-batches; tp pairs agree on their slices"
    ;;
  lp)
    # The model's two layers as one lp pair: under tp 2 rank 0 holds and runs
    # layer 0, rank 1 layer 1; checkpoints hold full tensors whatever the layout.
    lp=(--set model.plan=lp*2)
    train1 "$work/single" 20 "${lp[@]}"
    trainp 2 2 "$work/tp2" 20 "${lp[@]}"
    compare "$work/single" "$work/tp2" 1
    trainp 4 2 "$work/a" 10 --set parallelism.zero=1 "${lp[@]}"
    train1 "$work/a" 20 "${lp[@]}"
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/a.log" || fail "run a did not resume"
    compare "$work/single" "$work/a" 11
    ;;
  zero)
    # (np tp): dp 2, dp 4, dp 2 x tp 2; ZeRO-0 first, then stages 2 and 3.
    for layout in "2 1" "4 1" "4 2"; do
      read -r np tp <<<"$layout"
      trainp "$np" "$tp" "$work/z0-$np-$tp" 20
      for z in 2 3; do
        trainp "$np" "$tp" "$work/z$z-$np-$tp" 20 --set parallelism.zero=$z
        grep -q "dp $((np / tp)) x tp $tp.*(ZeRO-$z)" "$work/z$z-$np-$tp.log" ||
          fail "no ZeRO-$z grid line in $work/z$z-$np-$tp.log"
        echo "ZeRO-$z at np $np tp $tp:"
        compare_rel "$work/z0-$np-$tp" "$work/z$z-$np-$tp"
        weights_match "$work/z0-$np-$tp" "$work/z$z-$np-$tp"
      done
    done
    # LayerSkip (dropout and early exits; ZeRO-3 keeps the head gathered for
    # every exit) on a ladder plan with full recomputation, one micro-batch
    # per step: at dp 2 the sum of two gradients does not depend on the
    # collective, so ZeRO-2 and ZeRO-3 equal ZeRO-0 bit for bit (with
    # accumulation they differ in how micro-batches associate, above). Four
    # layers, two sequences per rank: a ladder unit dropped on one rank and
    # run on the other must not change the order of the stores' collectives.
    ls=(--set layerskip.p_max=0.5 --set layerskip.e_scale=1.0 --set layerskip.curriculum=rotational
      --set layerskip.rotation=1 --set model.num_hidden_layers=4 --set model.plan=ladder*4
      --set training.recompute=full --set training.grad_accum_steps=1)
    trainp 2 1 "$work/ls0" 20 "${ls[@]}"
    for z in 2 3; do
      trainp 2 1 "$work/ls$z" 20 "${ls[@]}" --set parallelism.zero=$z
      echo "LayerSkip ladder, full recomputation, ZeRO-$z against ZeRO-0, bit for bit:"
      cmp <(losses "$work/ls0") <(losses "$work/ls$z") || fail "ZeRO-$z losses differ"
      "$strata" inspect "$work/ls0/checkpoints/step_00000020.h5" \
        --compare "$work/ls$z/checkpoints/step_00000020.h5" --rtol 0 ||
        fail "ZeRO-$z weights or moments differ"
    done
    ;;
  zero_layouts)
    trainp 4 1 "$work/dp4" 20
    # ZeRO-3 at dp 4 for 10 steps, then alone (ZeRO-0) to 20.
    trainp 4 1 "$work/a" 10 --set parallelism.zero=3
    train1 "$work/a" 20
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/a.log" || fail "run a did not resume"
    compare "$work/dp4" "$work/a" 11
    # Alone for 10 steps, then ZeRO-3 at dp 4 to 20.
    train1 "$work/b" 10
    trainp 4 1 "$work/b" 20 --set parallelism.zero=3
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/b.log" || fail "run b did not resume"
    compare "$work/dp4" "$work/b" 11
    # ZeRO-2 at dp 2 x tp 2 resumes ZeRO-3's checkpoint of dp 4.
    trainp 4 1 "$work/c" 10 --set parallelism.zero=3
    trainp 4 2 "$work/c" 20 --set parallelism.zero=2
    compare "$work/dp4" "$work/c" 11
    ;;
  pipeline)
    four=(--set model.num_hidden_layers=4)
    train1 "$work/single" 20 "${four[@]}"
    for variant in "1f1b 1" "gpipe 1" "interleaved 2"; do
      read -r sched v <<<"$variant"
      trainp 2 1 "$work/pp2-$sched" 20 "${four[@]}" --set parallelism.pp=2 \
        --set parallelism.schedule="$sched" --set parallelism.virtual_stages="$v" \
        --set training.micro_batch_size=4
      grep -q "pipeline: pp 2.*$sched" "$work/pp2-$sched.log" || fail "no pipeline line ($sched)"
      grep -Eq "^memory per pipeline rank: peak resident rank 0 [0-9.]+ [kMG]B \(estimate [0-9.]+ [kMG]B\); rank 1 " \
        "$work/pp2-$sched.log" || fail "no memory line per pipeline rank ($sched)"
      grep -Eq "pipeline: the stages waited for each other [0-9]+\.[0-9]% of the schedule's time" \
        "$work/pp2-$sched.log" || fail "no measured bubble ($sched)"
      echo "pp 2, $sched:"
      compare_rel "$work/single" "$work/pp2-$sched"
      weights_match "$work/single" "$work/pp2-$sched"
    done
    trainp 4 1 "$work/pp4" 20 "${four[@]}" --set parallelism.pp=4 --set training.micro_batch_size=4
    echo "pp 4:"
    compare_rel "$work/single" "$work/pp4"
    weights_match "$work/single" "$work/pp4"
    # pp 2 x dp 2 against dp 2 alone; pp 2 x tp 2 (ZeRO-1) against tp 2.
    trainp 2 1 "$work/dp2" 20 "${four[@]}"
    trainp 4 1 "$work/pp2dp2" 20 "${four[@]}" --set parallelism.pp=2 --set training.micro_batch_size=2
    echo "pp 2 x dp 2:"
    compare_rel "$work/dp2" "$work/pp2dp2"
    weights_match "$work/dp2" "$work/pp2dp2"
    # ZeRO-1 within each stage's data-parallel group.
    trainp 2 1 "$work/dp2z1" 20 "${four[@]}" --set parallelism.zero=1
    trainp 4 1 "$work/pp2dp2z1" 20 "${four[@]}" --set parallelism.pp=2 --set parallelism.zero=1 \
      --set training.micro_batch_size=2
    echo "pp 2 x dp 2, ZeRO-1:"
    compare_rel "$work/dp2z1" "$work/pp2dp2z1"
    weights_match "$work/dp2z1" "$work/pp2dp2z1"
    # ZeRO-2 and -3: each stage's weight store shards its own tensors over its
    # data-parallel group.
    for z in 2 3; do
      trainp 2 1 "$work/dp2z$z" 20 "${four[@]}" --set parallelism.zero=$z
      trainp 4 1 "$work/pp2dp2z$z" 20 "${four[@]}" --set parallelism.pp=2 --set parallelism.zero=$z \
        --set training.micro_batch_size=2
      echo "pp 2 x dp 2, ZeRO-$z:"
      compare_rel "$work/dp2z$z" "$work/pp2dp2z$z"
      weights_match "$work/dp2z$z" "$work/pp2dp2z$z"
    done
    trainp 2 2 "$work/tp2" 20 "${four[@]}" --set parallelism.zero=1
    trainp 4 2 "$work/pp2tp2" 20 "${four[@]}" --set parallelism.pp=2 --set parallelism.zero=1 \
      --set training.micro_batch_size=4
    echo "pp 2 x tp 2, ZeRO-1:"
    compare_rel "$work/tp2" "$work/pp2tp2"
    weights_match "$work/tp2" "$work/pp2tp2"
    # LayerSkip: dropout and rotational exits on both stages (each holds the
    # head; the gradients summed), a ladder boundary between the stages, a
    # tied embedding, full recomputation.
    ls=(--set layerskip.p_max=0.5 --set layerskip.e_scale=1.0 --set layerskip.curriculum=rotational
      --set layerskip.rotation=1 --set model.plan=ladder*4 --set model.tie_word_embeddings=true
      --set training.recompute=full)
    train1 "$work/ls1" 20 "${four[@]}" "${ls[@]}"
    trainp 2 1 "$work/ls2" 20 "${four[@]}" "${ls[@]}" --set parallelism.pp=2 \
      --set training.micro_batch_size=4
    echo "LayerSkip on a ladder plan, tied, recomputed, pp 2:"
    compare_rel "$work/ls1" "$work/ls2"
    weights_match "$work/ls1" "$work/ls2"
    # The same at pp 2 x dp 2 with ZeRO-3 against dp 2 with ZeRO-3: the head's
    # and the tied embedding's gradients summed over the stages shard by shard.
    trainp 2 1 "$work/lsz3" 20 "${four[@]}" "${ls[@]}" --set parallelism.zero=3
    trainp 4 1 "$work/lspz3" 20 "${four[@]}" "${ls[@]}" --set parallelism.pp=2 \
      --set parallelism.zero=3 --set training.micro_batch_size=2
    echo "LayerSkip on a ladder plan, tied, recomputed, pp 2 x dp 2, ZeRO-3:"
    compare_rel "$work/lsz3" "$work/lspz3"
    weights_match "$work/lsz3" "$work/lspz3"
    # Layout changes on resume: pp 2 x tp 2 for 10 steps, then alone; alone,
    # then pp 2 x dp 2.
    trainp 4 2 "$work/a" 10 "${four[@]}" --set parallelism.pp=2 --set training.micro_batch_size=4
    train1 "$work/a" 20 "${four[@]}"
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/a.log" || fail "run a did not resume"
    compare "$work/single" "$work/a" 11
    train1 "$work/b" 10 "${four[@]}"
    trainp 4 1 "$work/b" 20 "${four[@]}" --set parallelism.pp=2 --set training.micro_batch_size=2
    grep -q "resume: .*step_00000010.h5 at step 10" "$work/b.log" || fail "run b did not resume"
    compare "$work/single" "$work/b" 11
    # The dry run: each stage's rank says its layers and its estimate (rank 0
    # keeps two micro-batches in flight under 1F1B, rank 1 one); a stage
    # boundary inside an LP pair is refused.
    "$mpirun" -np 2 --oversubscribe --bind-to none "$strata" train recipes/debug.toml "${common[@]}" \
      "${four[@]}" --set parallelism.pp=2 --dry-run >"$work/dry.log" 2>&1 || fail "pp 2 dry run failed"
    grep -q "^# memory of pipeline rank 0 (layers \[0,2)) (estimate): " "$work/dry.log" &&
      grep -q "^# memory of pipeline rank 1 (layers \[2,4)) (estimate): " "$work/dry.log" ||
      fail "the dry run does not give each stage's estimate"
    "$mpirun" -np 2 --oversubscribe --bind-to none "$strata" train recipes/debug.toml "${common[@]}" \
      "${four[@]}" --set parallelism.pp=2 --set model.plan='"standard,lp*2,standard"' \
      --set parallelism.stages='"2,2"' --dry-run >"$work/lp.log" 2>&1 && fail "an LP pair across stages ran"
    grep -q "parallelism.stages: the boundary before layer 2 splits a unit" "$work/lp.log" ||
      fail "no one-line refusal of an LP pair across stages"
    # The sample at the end: the pipeline of dp rank 0 generates it through the
    # stages, token for token the single run's (sampled at temperature 0.8).
    sample=(--set log.sample_prompt=ROMEO: --set log.sample_tokens=24 --set log.sample_temperature=0.8)
    train1 "$work/sample1" 10 "${four[@]}" "${sample[@]}"
    trainp 4 1 "$work/sample2" 10 "${four[@]}" "${sample[@]}" --set parallelism.pp=2 \
      --set parallelism.zero=2 --set training.micro_batch_size=2
    [[ -s $work/sample1/sample.txt ]] && cmp "$work/sample1/sample.txt" "$work/sample2/sample.txt" ||
      fail "the sample of pp 2 x dp 2 differs from the single run's"
    echo "sample at pp 2 x dp 2: $(head -c 60 "$work/sample2/sample.txt" | tr -c '[:print:]' '.')"
    # Placement over (named) nodes: a pipeline across two nodes is said, a
    # tensor-parallel group across them is warned about in one line.
    for layout in "pp" "tp"; do
      run_on=()
      for node in a b; do
        run_on+=(-np 1 env STRATA_NODE_NAME="$node" "$strata" train recipes/debug.toml
          "${common[@]}" "${four[@]}" --set parallelism.$layout=2 --set training.steps=1
          --set checkpoint.final=false --set run.dir="$work/nodes-$layout" :)
      done
      "$mpirun" --oversubscribe --bind-to none "${run_on[@]:0:${#run_on[@]}-1}" \
        >"$work/nodes-$layout.log" 2>&1 || fail "the $layout 2 run on two named nodes failed"
    done
    grep -q "^placement: 2 ranks on 2 nodes (at most 1 on one); tensor-parallel groups inside a node; a pipeline spans up to 2 nodes$" \
      "$work/nodes-pp.log" && ! grep -q "warning: placement" "$work/nodes-pp.log" ||
      fail "pp 2 across two nodes: no placement line, or a warning"
    grep -q "^warning: placement: 1 of 1 tensor-parallel groups span nodes (the first, world ranks 0-1, is on a, b)" \
      "$work/nodes-tp.log" || fail "tp 2 across two nodes: no warning"
    # A stage killed mid-run ends the job.
    signal_one_rank KILL kill "${four[@]}" --set parallelism.pp=2
    wait "$job" && fail "SIGKILL to one stage: mpirun exited 0"
    echo "SIGKILL to one stage: job ended after $((SECONDS - start)) s"
    ;;
  *) fail "unknown phase '$phase'" ;;
esac
echo "ok: $phase"
