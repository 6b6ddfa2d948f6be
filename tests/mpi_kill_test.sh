#!/usr/bin/env bash
# mpi_kill_test.sh MPIRUN TEST_BINARY MODE: under `mpirun -np 2`, rank 1 of
# TEST_BINARY (test_mpi_comm --fail-mode MODE --fail-rank 1) dies while rank 0
# waits in an allreduce:
#   kill        rank 1 raises SIGKILL; rank 0 is in a blocking allreduce
#   kill_async  rank 1 raises SIGKILL; rank 0 is in an async allreduce (progress, wait)
#   abort       rank 1 calls Communicator::abort("test abort")
#   mpi_error   rank 1 makes a failing MPI call (a send to a rank that does not exist)
#   busy        rank 1 sleeps (alive, outside collectives), collective timeout 2 s
#   other       rank 1 waits in a barrier of another group, collective timeout 2 s
# Passes when mpirun exits non-zero within the time limit (the job does not
# hang), and, for abort and mpi_error, the reason and rank were printed in one line;
# for busy and other, rank 0's timeout line names rank 1 and what it answered.
set -u
mpirun=$1 bin=$2 mode=$3
limit=${STRATA_KILL_TEST_LIMIT:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
unset STRATA_COLLECTIVE_TIMEOUT
[[ $mode == busy || $mode == other ]] && export STRATA_COLLECTIVE_TIMEOUT=2

start=$SECONDS
out=$(timeout -k 10 "$limit" "$mpirun" -np 2 --oversubscribe --bind-to none \
  "$bin" --fail-mode "$mode" --fail-rank 1 2>&1)
status=$?
elapsed=$((SECONDS - start))
printf '%s\n' "$out"
echo "---"
# timeout exits 124 (137 when it had to SIGKILL mpirun; but mpirun itself also
# exits 137 when a rank died of SIGKILL): tell them apart by the elapsed time.
if [[ $status -eq 124 ]] || ((elapsed >= limit)); then
  echo "FAIL: mpirun still running after ${limit}s: the job hangs when a rank dies ($mode)"
  exit 1
fi
if [[ $status -eq 0 ]]; then
  echo "FAIL: mpirun exited 0 although rank 1 died ($mode)"
  exit 1
fi
if [[ $mode == abort ]] && ! grep -q "strata: error: test abort (rank 1)" <<<"$out"; then
  echo "FAIL: no 'strata: error: test abort (rank 1)' line in the output"
  exit 1
fi
if [[ $mode == mpi_error ]] && ! grep -q "^strata: error: MPI failed on rank 1: .*ending the job$" <<<"$out"; then
  echo "FAIL: no one-line 'strata: error: MPI failed on rank 1: ...' in the output"
  exit 1
fi
timeout_line="^strata: error: rank 0: all-reduce #[0-9]+ of the world waited [0-9]+ s for rank 1, which"
if [[ $mode == busy ]] && ! grep -Eq "$timeout_line is busy outside collectives \(for [0-9]+ s since its last one ended\); ending the job" <<<"$out"; then
  echo "FAIL: no timeout line naming rank 1 as busy outside collectives"
  exit 1
fi
if [[ $mode == other ]] && ! grep -Eq "$timeout_line waits in barrier #1 of the dp group \(for [0-9]+ s\); ending the job" <<<"$out"; then
  echo "FAIL: no timeout line naming rank 1 as waiting in barrier #1 of the dp group"
  exit 1
fi
if [[ $mode == busy || $mode == other ]] && ((elapsed > 15)); then
  echo "FAIL: the job ended ${elapsed}s after the start, not soon after the 2 s timeout"
  exit 1
fi
if grep -q "returned without rank" <<<"$out"; then
  echo "FAIL: rank 0 finished an allreduce without rank 1"
  exit 1
fi
echo "ok: mpirun exited with status $status after ${elapsed}s ($mode)"
