#!/usr/bin/env bash
# README command 1: set up a fresh machine (Debian packages, build) and run the
# main job on the shipped default: pretrain the quickstart model (7.2M
# parameters) on the six Jane Austen novels for about 10 minutes on 2 cores,
# with validation and a generated sample at the end. Extra arguments go to
# `strata train` (e.g. --set training.steps=100). Re-running resumes from the
# newest checkpoint in runs/quickstart; delete that directory to start over.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh
exec "${BUILD_DIR:-build}/strata" train recipes/quickstart.toml "$@"
