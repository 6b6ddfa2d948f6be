#!/usr/bin/env bash
# README command 1: set up a fresh machine (packages, build) and run the main
# job on the shipped default. Until the trainer lands this is the whole-model
# training-step benchmark of the 6-layer, 288-wide model (forward + backward of
# every op strata has), which prints tokens/s and GFLOP/s.
set -euo pipefail
cd "$(dirname "$0")/.."
launch/setup.sh
exec "${BUILD_DIR:-build}/strata" bench model --model 288 --vocab 4096 --steps 5 "$@"
