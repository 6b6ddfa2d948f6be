#!/usr/bin/env bash
# mpi_hang_test.sh MPIRUN STRATA SOURCE_DIR WORK_DIR MODE: `strata train
# recipes/debug.toml` under mpirun -np 2 (dp 2), and rank 1 stops answering
# once training runs:
#   stop  kill -STOP rank 1, collective timeout 5 s: the job ends with a
#         non-zero status after the timeout (not before, and within 20 s more),
#         rank 0 printing one line that names the collective and rank 1
#   kill  kill -9 rank 1: mpirun ends the job (SIGTERM, then SIGKILL to rank 0),
#         and rank 0, waiting in a collective when SIGTERM comes, prints a
#         line naming rank 1 as the member that does not answer
set -u
mpirun=$1 strata=$2 src=$3 work=$4 mode=$5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
export OMP_WAIT_POLICY=PASSIVE
unset STRATA_COLLECTIVE_TIMEOUT
cd "$src" || exit 1
work=$work/$mode
rm -rf "$work"
mkdir -p "$work"
timeout_s=5

fail() {
  echo "FAIL: $*"
  [[ -f $work/run.log ]] && { echo "--- output:"; cat "$work/run.log"; }
  exit 1
}
job=
cleanup() {  # never leave a stopped rank behind
  local p
  for p in $(pgrep -f "^$strata train .*run.dir=$work/run" || true); do
    kill -KILL "$p" 2>/dev/null
    kill -CONT "$p" 2>/dev/null
  done
  [[ -n $job ]] && kill -KILL "$job" 2>/dev/null
}
trap cleanup EXIT

common=(--set run.device=cpu --set data.dataset="$work/data" --set log.interval=1
  --set log.sample_prompt= --set checkpoint.interval=0 --set checkpoint.final=false)
# The dataset first, alone: preparing it under mpirun would make rank 1 wait
# for rank 0 in a collective, which is what the timeout watches.
"$strata" train recipes/debug.toml "${common[@]}" --set run.dir="$work/prep" \
  --set training.steps=1 >"$work/prep.log" 2>&1 || { cat "$work/prep.log"; fail "preparing the data"; }

"$mpirun" -np 2 --oversubscribe --bind-to none "$strata" train recipes/debug.toml "${common[@]}" \
  --set run.dir="$work/run" --set training.steps=1000000 --set training.micro_batch_size=2 \
  --set parallelism.collective_timeout=$timeout_s >"$work/run.log" 2>&1 &
job=$!
for _ in $(seq 300); do
  [[ -s $work/run/metrics.jsonl ]] && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
[[ -s $work/run/metrics.jsonl ]] || fail "training did not start"
rank1=
for p in $(pgrep -f "^$strata train .*run.dir=$work/run"); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && rank1=$p
done
[[ -n $rank1 ]] || fail "rank 1's process not found"
if [[ $mode == stop ]]; then kill -STOP "$rank1"; else kill -KILL "$rank1"; fi
start=$SECONDS
limit=$((timeout_s + 20))
while kill -0 "$job" 2>/dev/null && ((SECONDS - start < limit)); do sleep 0.2; done
kill -0 "$job" 2>/dev/null && fail "$mode: the job is still running ${limit} s after rank 1 stopped"
wait "$job"
status=$?
job=
elapsed=$((SECONDS - start))
((status != 0)) || fail "$mode: mpirun exited 0"
if [[ $mode == stop ]]; then
  line="^strata: error: rank 0: [a-z -]+ #[0-9]+ of the (dp group|world) waited [0-9]+ s for rank 1, which does not answer \(stopped, hung or dead\); ending the job \(collective timeout 5 s"
  ((elapsed >= timeout_s - 1)) || fail "stop: the job ended after ${elapsed} s, before the ${timeout_s} s timeout"
else
  line="^strata: error: rank 0: signal 15 \(SIGTERM\) came while [a-z -]+ #[0-9]+ of the (dp group|world) had waited [0-9]+ s for rank 1, which does not answer"
fi
grep -Eq "$line" "$work/run.log" || fail "$mode: no line matching '$line'"
grep -q "^strata: error: rank 1" "$work/run.log" && fail "$mode: rank 1 reported itself"
echo "ok ($mode): mpirun exited $status ${elapsed} s after rank 1 stopped: $(grep -E "$line" "$work/run.log")"
