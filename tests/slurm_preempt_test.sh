#!/usr/bin/env bash
# slurm_preempt_test.sh STRATA OUTDIR [MPIRUN]: launch/slurm/train.sbatch on a real,
# one-node Slurm cluster that this script starts for itself (munged,
# slurmctld and slurmd with a private key, socket, ports, state and spool
# under a temporary folder; the machine's own services are not touched):
#   1. an uninterrupted reference: mpirun -np 2 strata train recipes/debug.toml
#      (300 steps, a checkpoint every 20, every step recorded)
#   2. STRATA_SRUN_MPI naming a plugin srun lacks: the job ends at once with
#      exit 2 and one line
#   3. the same training as 1. submitted with sbatch on 2 tasks (srun
#      --mpi=pmix), preempted with notice: `scancel --signal=USR1 --batch` (what
#      --signal=B:USR1@300 sends before the time limit); the script passes
#      SIGTERM on to the ranks, they save a checkpoint of the step they are in,
#      the script requeues the job, restart 1 resumes at that step
#   4. preempted without notice: `scontrol requeue`; Slurm signals the ranks
#      itself; restart 2 resumes from the newest checkpoint
#   5. crashed: SIGKILL to the ranks' step; the job fails, `scontrol requeue`
#      restarts it, restart 3 resumes from the newest periodic checkpoint
#   6. the job completes (exit 0, 3 restarts) with metrics.jsonl equal to the
#      reference's: every step's loss, gradient norm, learning rate and tokens,
#      and the final validation loss, exactly
# Needs root and Debian's slurmctld, slurmd, slurm-client and munge (tests/run.sh
# installs them through launch/setup.sh's TEST_PACKAGES); without them it fails
# in one line. On failure it prints the job's output and the daemons' logs.
# Environment: STRATA_SLURM_STEPS (default 300), STRATA_SLURM_KEEP=1 leaves the
# cluster's folder in place.
set -uo pipefail
if (($# < 2 || $# > 3)); then
  echo "usage: $0 STRATA OUTDIR [MPIRUN]" >&2
  exit 2
fi
strata=$(realpath "$1")
out=$(realpath -m "$2")
src=$(cd "$(dirname "$0")/.." && pwd)
mpirun=${3:-mpirun}
steps=${STRATA_SLURM_STEPS:-300}
interval=20  # checkpoint.interval: where a kill without notice resumes
t0=$SECONDS

say() { echo "slurm_preempt: [$((SECONDS - t0)) s] $*"; }
# fail MESSAGE: one line, then what there is to see, then exit 1.
cluster=""
jid=""
fail() {
  echo "slurm_preempt: FAIL: $*"
  if [[ -n $jid && -f $out/job-$jid.out ]]; then
    echo "--- job $jid output (last 60 lines) ---"
    tail -n 60 "$out/job-$jid.out"
    echo "--- scontrol show job $jid ---"
    scontrol show job "$jid" 2>&1 | head -n 30
  fi
  if [[ -n $cluster ]]; then
    local f
    for f in munged slurmctld slurmd; do
      [[ -f $cluster/$f.log ]] || continue
      echo "--- $f log (last 25 lines) ---"
      tail -n 25 "$cluster/$f.log"
    done
  fi
  exit 1
}

[[ -x $strata ]] || fail "$1 is not an executable"
((EUID == 0)) || fail "needs root (slurmd starts the job's tasks; CI runs as root)"
for tool in munged munge slurmctld slurmd sbatch srun scontrol scancel squeue sinfo "$mpirun"; do
  command -v "$tool" > /dev/null ||
    fail "$tool not found: install slurmctld slurmd slurm-client munge (tests/run.sh does, through launch/setup.sh's TEST_PACKAGES)"
done

# Nothing of a Slurm job this script may run inside leaks into ours.
while IFS='=' read -r name _; do
  [[ $name == SLURM_* || $name == SBATCH_* || $name == SRUN_* || $name == SALLOC_* ]] && unset "$name"
done < <(env)
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

rm -rf "$out"
mkdir -p "$out"
# The cluster lives under /tmp: munged wants its socket's folders open to all
# (searchable), which a build tree under /root is not.
cluster=$(mktemp -d /tmp/strata-slurm.XXXXXX) || fail "mktemp failed"
chmod 755 "$cluster"
mkdir -p "$cluster"/{munge,state,spool,tmp}
chmod 755 "$cluster/munge"
conf=$cluster/slurm.conf

daemons=()
cleanup() {
  local p i
  if [[ -f $conf ]]; then
    [[ -n $jid ]] && SLURM_CONF=$conf timeout 10 scancel "$jid" 2> /dev/null
    # The job's processes end with it; wait for them (up to 20 s) before the daemons go.
    for ((i = 0; i < 200; i++)); do
      ranks_of_ours || break
      sleep 0.1
    done
  fi
  for ((i = ${#daemons[@]} - 1; i >= 0; i--)); do kill -TERM "${daemons[i]}" 2> /dev/null; done
  for p in "${daemons[@]}"; do
    for ((i = 0; i < 150; i++)); do kill -0 "$p" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2> /dev/null
    wait "$p" 2> /dev/null
  done
  # A task slurmd left behind: its environment names this cluster's slurm.conf.
  for p in $(pgrep -x strata; pgrep -x slurmstepd); do
    { tr '\0' '\n' < "/proc/$p/environ"; } 2> /dev/null | grep -qx "SLURM_CONF=$conf" && kill -KILL "$p"
  done
  [[ ${STRATA_SLURM_KEEP:-0} == 1 ]] || rm -rf "$cluster"
}
# ranks_of_ours: true while a strata process of this cluster runs.
ranks_of_ours() {
  local p
  for p in $(pgrep -x strata); do
    { tr '\0' '\n' < "/proc/$p/environ"; } 2> /dev/null | grep -qx "SLURM_CONF=$conf" && return 0
  done
  return 1
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# poll SECONDS WHAT COMMAND...: runs COMMAND every 0.2 s until it succeeds; fails
# the test after SECONDS.
poll() {
  local limit=$1 what=$2 end=$((SECONDS + $1))
  shift 2
  until "$@"; do
    ((SECONDS < end)) || fail "$what: not after ${limit} s"
    sleep 0.2
  done
}
# A free local TCP port: nothing answers a connection to it.
free_port() {
  local p
  for ((p = $1; p < $1 + 200; p++)); do
    (exec 3<> "/dev/tcp/127.0.0.1/$p") 2> /dev/null || { echo "$p"; return; }
  done
}

# --- the cluster -----------------------------------------------------------
host=$(uname -n)
host=${host%%.*}
ctld_port=$(free_port $((20000 + $$ % 20000)))
[[ -n $ctld_port ]] || fail "no free TCP port for slurmctld"
slurmd_port=$(free_port $((ctld_port + 1)))
[[ -n $slurmd_port ]] || fail "no free TCP port for slurmd"
srun_ports=$((slurmd_port + 1))-$((slurmd_port + 200))
dd if=/dev/urandom of="$cluster/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$cluster/munge/munge.key"
munged --foreground --socket="$cluster/munge/socket" --key-file="$cluster/munge/munge.key" \
  --pid-file="$cluster/munge/munged.pid" --seed-file="$cluster/munge/seed" \
  --log-file="$cluster/munged.log" > "$cluster/munged.log" 2>&1 &
daemons+=($!)
poll 30 "munged's socket $cluster/munge/socket" test -S "$cluster/munge/socket"

cat > "$conf" << EOF
# A one-node cluster of tests/slurm_preempt_test.sh.
ClusterName=strata-test
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SrunPortRange=$srun_ports
AuthType=auth/munge
CredType=cred/munge
# cred_expire also delays a requeued job's next start (cred_expire + 1 s; 120 s by default).
AuthInfo=socket=$cluster/munge/socket,cred_expire=5
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$cluster/state
SlurmdSpoolDir=$cluster/spool
TmpFS=$cluster/tmp
SlurmctldPidFile=$cluster/slurmctld.pid
SlurmdPidFile=$cluster/slurmd.pid
SlurmctldLogFile=$cluster/slurmctld.log
SlurmdLogFile=$cluster/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
ReturnToService=2
JobRequeue=1
MinJobAge=600
KillWait=30
# The node as configured (2 CPUs), whatever this machine has.
SlurmdParameters=config_overrides
NodeName=$host NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$conf
slurmctld -D -i -f "$conf" > /dev/null 2>&1 &
daemons+=($!)
slurmd -D -f "$conf" > /dev/null 2>&1 &
daemons+=($!)
node_idle() { [[ $(sinfo -h -N -o %t 2> /dev/null) == idle ]]; }
poll 90 "the node $host idle (sinfo)" node_idle
say "cluster up in $((SECONDS - t0)) s: $(sinfo -V 2>&1), node $host (2 CPUs), ports $ctld_port/$slurmd_port, $cluster"

# --- 1. the reference ---------------------------------------------------------
cd "$src" || fail "cannot enter $src"
args=(recipes/debug.toml --set run.device=cpu --set training.steps="$steps" --set log.interval=1
  --set checkpoint.interval="$interval" --set checkpoint.keep=3 --set data.dataset="$out/data")
t=$SECONDS
timeout -k 10 300 "$mpirun" -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS -x OMP_WAIT_POLICY \
  "$strata" train "${args[@]}" --set run.dir="$out/ref" > "$out/ref.log" 2>&1 ||
  { tail -n 20 "$out/ref.log"; fail "the reference run (mpirun -np 2) failed"; }
say "reference: mpirun -np 2, $steps steps in $((SECONDS - t)) s"

# --- 2. a plugin srun does not have: one line, exit 2 ------------------------
bad=$(STRATA_BIN=$strata STRATA_SRUN_MPI=no_such_plugin timeout 120 sbatch --wait --parsable \
  --job-name=strata-bad-mpi --chdir="$src" --output="$out/bad-mpi-%j.out" launch/slurm/train.sbatch \
  "${args[@]}" --set run.dir="$out/bad-mpi")
rc=$?
bad_out=$(cat "$out/bad-mpi-${bad%%;*}.out" 2> /dev/null)
[[ $rc == 2 && $bad_out == "train.sbatch: this Slurm has no MPI plugin 'no_such_plugin' (srun --mpi=list: "*"pmix"*"); set STRATA_SRUN_MPI" ]] ||
  fail "STRATA_SRUN_MPI=no_such_plugin: sbatch --wait exit $rc (expected 2), output: $bad_out"
say "STRATA_SRUN_MPI=no_such_plugin: exit 2 and one line"

# --- 3.-6. the job -------------------------------------------------------------
run=$out/job
jid=$(STRATA_BIN=$strata sbatch --parsable --job-name=strata-preempt --chdir="$src" \
  --output="$out/job-%j.out" launch/slurm/train.sbatch "${args[@]}" --set run.dir="$run") ||
  fail "sbatch failed: $jid"
jid=${jid%%;*}
log=$out/job-$jid.out
field() { scontrol show job "$jid" 2> /dev/null | grep -Eo "(^| )$1=[^ ]*" | head -n 1 | cut -d= -f2-; }
records() { [[ -f $run/metrics.jsonl ]] && wc -l < "$run/metrics.jsonl" || echo 0; }
# running_past RESTART STEP: the job's start number RESTART is training past STEP.
running_past() {
  local state
  state=$(field JobState)
  [[ $state == RUNNING || $state == PENDING || $state == CONFIGURING || $state == REQUEUE* ||
    $state == COMPLETING ]] || fail "job $jid is $state before the preemption"
  [[ $state == RUNNING ]] && grep -q "(restart $1)" "$log" 2> /dev/null && (($(records) >= $2))
}
# The last "stopped by signal S after step N" of the ranks.
stop_line() { grep -Eo 'stopped by signal [0-9]+ after step [0-9]+' "$log" | tail -n 1; }

# 3. Notice: SIGUSR1 to the batch script alone.
poll 120 "job $jid training past step 40" running_past 0 40
scancel --signal=USR1 --batch "$jid" || fail "scancel --signal=USR1 --batch $jid failed"
requeued() { grep -q "requeueing job $jid" "$log" 2> /dev/null; }
poll 120 "the script's requeue after SIGUSR1" requeued
stop1=$(stop_line | grep -Eo '[0-9]+$')
[[ -n $stop1 ]] || fail "SIGUSR1: the ranks did not stop by a signal after a step (no 'stopped by signal' line)"
((stop1 < steps)) || fail "SIGUSR1 came after the training's end (step $stop1): raise STRATA_SLURM_STEPS"
ckpt1=$(printf '%s/checkpoints/step_%08d.h5' "$run" "$stop1")
[[ -f $ckpt1 ]] || fail "SIGUSR1: no checkpoint of step $stop1, where the ranks stopped"
say "SIGUSR1 to the script: the ranks stopped after step $stop1 with a checkpoint; the job requeued itself"

poll 120 "job $jid's restart 1 training past step $((stop1 + 30))" running_past 1 $((stop1 + 30))
grep -q "resume: $ckpt1 at step $stop1\$" "$log" || fail "restart 1 did not resume from $ckpt1"

# 4. No notice: scontrol requeue; Slurm signals the ranks (SIGTERM, SIGKILL after KillWait).
killed_at=$(records)
scontrol requeue "$jid" || fail "scontrol requeue $jid failed"
resumed_twice() { running_past 2 0 && (($(grep -c '^resume: ' "$log") >= 2)); }
poll 120 "job $jid's restart 2 resuming" resumed_twice
resume2=$(grep -Eo "^resume: [^ ]+ at step [0-9]+\$" "$log" | tail -n 1)
stop2=${resume2##* }
[[ $(grep -c '^resume: ' "$log") -eq 2 && -n $stop2 ]] || fail "restart 2 did not resume from a checkpoint: '$resume2'"
((stop2 >= stop1 && stop2 < steps)) ||
  fail "restart 2 resumed at step $stop2; the kill came at about step $killed_at, the notice's checkpoint is step $stop1"
say "scontrol requeue at about step $killed_at: restart 2 resumed at step $stop2"

finished() {
  local state
  state=$(field JobState)
  case $state in
    COMPLETED) return 0 ;;
    FAILED | CANCELLED* | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
      fail "job $jid ended $state (exit $(field ExitCode))" ;;
  esac
  return 1
}

# 5. A crash: SIGKILL to the ranks' step; the job fails, and a requeue by hand
# resumes from the newest periodic checkpoint.
poll 120 "job $jid's restart 2 training past step $((stop2 + interval + 5))" running_past 2 $((stop2 + interval + 5))
killed_at3=$(records)
# The ranks' step (scancel --signal=KILL on the whole job would cancel it).
step=$(squeue -h -s -j "$jid" -o %i 2> /dev/null | grep -E "^$jid\.[0-9]+\$" | head -n 1)
[[ -n $step ]] || fail "no step of job $jid in squeue -s"
scancel --signal=KILL "$step" || fail "scancel --signal=KILL $step failed"
failed() {
  local state
  state=$(field JobState)
  [[ $state == FAILED ]] && return 0
  [[ $state == RUNNING || $state == COMPLETING ]] || fail "job $jid is $state after SIGKILL to its ranks, expected FAILED"
  return 1
}
poll 120 "job $jid failed after SIGKILL to its ranks" failed
scontrol requeue "$jid" || fail "scontrol requeue $jid (failed) failed"
started3() { grep -q "(restart 3)" "$log"; }
poll 120 "job $jid's restart 3 started" started3
poll 240 "job $jid completed (restart 3)" finished
resume3=$(grep -Eo "^resume: [^ ]+ at step [0-9]+\$" "$log" | tail -n 1)
stop3=${resume3##* }
# SIGKILL leaves no time to save: the newest checkpoint is a periodic one (or restart 2's start).
if [[ -z $stop3 ]] || (($(grep -c '^resume: ' "$log") != 3 || stop3 < stop2 || stop3 >= steps || (stop3 % interval != 0 && stop3 != stop2))); then
  fail "restart 3 resumed at '$resume3'; SIGKILL came at about step $killed_at3, checkpoints every $interval steps after step $stop2"
fi
say "SIGKILL to the ranks at about step $killed_at3: the job failed, scontrol requeue, restart 3 resumed at step $stop3 and completed"

# 6. The end.
[[ $(field ExitCode) == 0:0 ]] || fail "job $jid exit code $(field ExitCode)"
[[ $(field Restarts) == 3 ]] || fail "job $jid restarted $(field Restarts) times, expected 3"
! grep -q "^train.sbatch: requeueing" <(sed -n '/(restart 3)/,$p' "$log") ||
  fail "the job requeued itself after its last start"

# metrics.jsonl: one record per step; compared without the timings.
fields() {
  local line k out
  while IFS= read -r line || [[ -n $line ]]; do
    out=""
    for k in step loss grad_norm lr tokens val_loss; do
      [[ $line =~ \"$k\":([^,}]+) ]] && out+=" $k=${BASH_REMATCH[1]}"
    done
    [[ $line == \{*\} && $out == " step="*" loss="* ]] || out=" torn: $line"
    echo "${out# }"
  done < "$1"
}
fields "$out/ref/metrics.jsonl" > "$out/ref.fields"
fields "$run/metrics.jsonl" > "$out/job.fields"
[[ $(grep -c . "$out/ref.fields") -eq $steps && $(grep -Eo '^step=[0-9]+' "$out/ref.fields" | cut -d= -f2 | paste -sd' ') == $(seq -s ' ' 1 "$steps") ]] ||
  fail "the reference's metrics.jsonl does not hold steps 1-$steps once each"
grep -q 'val_loss=' "$out/ref.fields" || fail "the reference's metrics.jsonl has no val_loss"
if ! diff -q "$out/ref.fields" "$out/job.fields" > /dev/null; then
  diff "$out/ref.fields" "$out/job.fields" | head -n 10
  fail "the preempted job's metrics.jsonl differs from the uninterrupted run's (above: < reference, > job)"
fi
last=$(tail -n 1 "$out/job.fields")
say "job $jid completed after 3 restarts (resumed at steps $stop1, $stop2, $stop3): all $steps records equal the uninterrupted run's ($last)"
echo "slurm_preempt: ok ($((SECONDS - t0)) s)"
