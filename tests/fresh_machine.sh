#!/usr/bin/env bash
# tests/fresh_machine.sh [--tests] [--keep]: the README's set-up on a pristine
# machine. Builds a minimal Debian bookworm root with mmdebstrap (from this
# machine's apt sources), copies the checkout in (tracked and untracked files,
# not what git ignores), and runs there, as a new user would:
#   launch/setup.sh                 packages, configure, build
#   build/strata info
#   build/strata train recipes/debug.toml   (5 steps)
# and with --tests the README's test command (tests/run.sh) as well
# (FRESH_TEST_ARGS, e.g. "-L slurm", goes to it: a part of the suite). Nothing
# that this machine installed by hand is visible inside, so a package missing
# from launch/setup.sh fails here. Needs root and the network to the Debian
# mirrors; --keep leaves the root in place for a look inside.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(pwd)
run_tests=0
keep=0
for a in "$@"; do
  case "$a" in
    --tests) run_tests=1 ;;
    --keep) keep=1 ;;
    *) echo "fresh_machine: unknown argument '$a' (--tests, --keep)" >&2; exit 2 ;;
  esac
done
[[ $(id -u) -eq 0 ]] || { echo "fresh_machine: needs root (chroot, mount)" >&2; exit 2; }
command -v git >/dev/null || { echo "fresh_machine: needs git" >&2; exit 2; }
if ! command -v mmdebstrap >/dev/null; then
  echo "fresh_machine: installing mmdebstrap"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
fi

root=$(mktemp -d /tmp/strata-fresh.XXXXXX)
cleanup() {
  # The root's own bind mount and everything under it (proc, shm, sys).
  umount -R "$root" 2>/dev/null || true
  umount "$root/proc" 2>/dev/null || true
  umount "$root/dev/shm" 2>/dev/null || true
  if grep -q " $root/" /proc/self/mounts; then
    echo "fresh_machine: $root still has mounts; left in place" >&2
    return
  fi
  if [[ $keep -eq 0 ]]; then rm -rf "$root"; else echo "fresh_machine: root kept at $root"; fi
}
trap cleanup EXIT

start=$(date +%s)
step() { echo "== fresh_machine: $* ($(($(date +%s) - start)) s)"; }
step "mmdebstrap --variant=minbase bookworm $root"
mmdebstrap --quiet --variant=minbase bookworm "$root"
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The network's certificate authorities for pip, as for name resolution: where
# this machine reaches PyPI through a proxy that signs with its own CA
# (PIP_CERT), the root trusts it too, so setup's PyPI fetch
# (cmake/fetch_gemm_libraries.sh) meets the network a machine here would.
pip_cert=()
if [[ -n ${PIP_CERT:-} && -f $PIP_CERT ]]; then
  cp "$PIP_CERT" "$root/etc/fresh-machine-pip-ca.crt"
  pip_cert=(PIP_CERT=/etc/fresh-machine-pip-ca.crt)
fi
# A machine's root is a mount point with /sys: the code-execution sandbox
# makes its mounts private and pivots its root (neither works in a plain
# chroot), and slurmd reads /sys/fs/cgroup.
mount --bind "$root" "$root"
mount --make-rprivate "$root"
mount --rbind /sys "$root/sys"
mount --make-rslave "$root/sys"
mount -t proc proc "$root/proc"
mkdir -p "$root/dev/shm" && mount -t tmpfs tmpfs "$root/dev/shm"  # MPI's shared memory

step "copying the checkout to /root/strata"
mkdir -p "$root/root/strata"
git ls-files -z --cached --others --exclude-standard | tar -C "$src" --null -T - -cf - |
  tar -C "$root/root/strata" -xf -

inside() { chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin \
  TERM=dumb "${pip_cert[@]}" bash -c "cd /root/strata && $*"; }
step "launch/setup.sh"
inside launch/setup.sh
step "strata info"
inside build/strata info
step "strata train recipes/debug.toml (5 steps)"
inside build/strata train recipes/debug.toml --set training.steps=5 --set run.dir=runs/fresh
if [[ $run_tests -eq 1 ]]; then
  step "tests/run.sh ${FRESH_TEST_ARGS:-}"
  # shellcheck disable=SC2086  # the words of FRESH_TEST_ARGS, each quoted for bash -c
  inside "tests/run.sh $(printf '%q ' ${FRESH_TEST_ARGS:-})"
fi
step "passed"
