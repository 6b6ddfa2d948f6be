#!/usr/bin/env bash
# Runs `strata train` on several processes of this machine (or of the hosts in
# an Open MPI hostfile) with mpirun. See `launch/mpirun.sh -h`.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: launch/mpirun.sh [--print] <nprocs> <recipe.toml> [strata train options ...]

Starts <nprocs> ranks of `strata train <recipe.toml> ...` under Open MPI's
mpirun. The ranks form a dp x tp grid (tp = parallelism.tp in the recipe,
dp = nprocs / tp). Run it from the repository root, like `strata train`
(paths inside recipes are relative to the current directory).

  launch/mpirun.sh 2 recipes/quickstart.toml
  launch/mpirun.sh 4 recipes/quickstart.toml --set parallelism.tp=2 --set run.name=tp2

What it adds to mpirun:
  --bind-to none      ranks are not pinned (OpenMP threads share the cores)
  --oversubscribe     when nprocs exceeds the cores of this machine
  --allow-run-as-root when run as root
  OMP_NUM_THREADS     threads per rank: max(1, cores / nprocs), unless already set;
                      exported to every rank (-x)
  OMP_WAIT_POLICY     PASSIVE when oversubscribed, unless already set

Options:
  --print             print the mpirun command line instead of running it
  -h, --help          this help

Environment:
  STRATA_BIN   the strata binary (default: <repo>/${BUILD_DIR:-build}/strata)
  MPIRUN       the mpirun command (default: mpirun)
  MPIRUN_ARGS  extra mpirun options, e.g. "--hostfile hosts --map-by ppr:8:node"
USAGE
}

print_only=0
while [[ $# -gt 0 && $1 == -* ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --print) print_only=1; shift ;;
    *) echo "mpirun.sh: unknown option '$1' (see launch/mpirun.sh -h)" >&2; exit 2 ;;
  esac
done
if [[ $# -lt 2 ]]; then
  echo "mpirun.sh: expected <nprocs> <recipe.toml> (see launch/mpirun.sh -h)" >&2
  exit 2
fi
nprocs=$1 recipe=$2
shift 2
if ! [[ $nprocs =~ ^[1-9][0-9]*$ ]]; then
  echo "mpirun.sh: <nprocs> must be a positive integer, got '$nprocs'" >&2
  exit 2
fi
if [[ ! -f $recipe ]]; then
  echo "mpirun.sh: recipe '$recipe' not found (run from the repository root)" >&2
  exit 1
fi

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${STRATA_BIN:-$root/${BUILD_DIR:-build}/strata}
if [[ $print_only -eq 0 && ! -x $bin ]]; then
  echo "mpirun.sh: $bin not found: build strata first (launch/setup.sh)" >&2
  exit 1
fi

cores=$(nproc)
args=(-np "$nprocs" --bind-to none)
oversubscribed=0
if ((nprocs > cores)); then
  args+=(--oversubscribe)
  oversubscribed=1
fi
[[ $(id -u) -eq 0 ]] && args+=(--allow-run-as-root)
threads=$((cores / nprocs))
((threads < 1)) && threads=1
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$threads}
args+=(-x OMP_NUM_THREADS)
if ((oversubscribed)) || [[ -n ${OMP_WAIT_POLICY:-} ]]; then
  export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
  args+=(-x OMP_WAIT_POLICY)
fi
read -r -a extra <<<"${MPIRUN_ARGS:-}"
cmd=("${MPIRUN:-mpirun}" "${args[@]}" "${extra[@]}" "$bin" train "$recipe" "$@")

echo "mpirun.sh: $nprocs processes, OMP_NUM_THREADS=$OMP_NUM_THREADS: ${cmd[*]}" >&2
((print_only)) && exit 0
exec "${cmd[@]}"
