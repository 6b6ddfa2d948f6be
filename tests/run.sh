#!/usr/bin/env bash
# The test command: sets up the machine (Debian packages, skipping those
# present), configures, builds and runs the whole CTest suite; exits non-zero
# on any failure. Extra arguments go to ctest, e.g.
#   tests/run.sh -L unit          # one label (unit, grad)
#   tests/run.sh -R Attention     # tests matching a regex
# Environment: BUILD_DIR (default: build), STRATA_SKIP_APT=1 to skip apt.
# Besides launch/setup.sh's PACKAGES it installs its TEST_PACKAGES (Slurm and
# munge, for the label slurm).
# The fresh-machine check (label fresh_machine: a pristine Debian root, about
# ten minutes, needs root) is left out; run tests/fresh_machine.sh for it.
set -euo pipefail
cd "$(dirname "$0")/.."
STRATA_TEST_PACKAGES=1 launch/setup.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -LE fresh_machine "$@"
