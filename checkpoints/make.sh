#!/usr/bin/env bash
# Rebuilds the shipped models of checkpoints/ (see MANIFEST.md): stories260K
# converted from the llama2.c file in data/, and the quickstart and LayerSkip
# quickstart models trained from scratch (about 5 minutes each on 2 cores with
# native bf16, 10-20 without) and stored as bf16 weights without optimizer
# state. The bytes differ from the shipped ones (a creation time is stored,
# and training rounds differently on another CPU kind); print the new sha256s
# with `sha256sum checkpoints/*.h5`.
set -euo pipefail
cd "$(dirname "$0")/.."
strata=${STRATA:-build/strata}
"$strata" convert llama2c data/models/stories260K/stories260K.bin checkpoints/stories260K.h5 \
  --tokenizer data/tokenizers/tok512.model
for run in quickstart layerskip-pretrain; do
  rm -rf "runs/$run"
  "$strata" train "recipes/$run.toml"
done
"$strata" convert weights runs/quickstart/checkpoints/step_00000800.h5 checkpoints/quickstart.h5 \
  --dtype bf16
"$strata" convert weights runs/layerskip-pretrain/checkpoints/step_00000800.h5 \
  checkpoints/layerskip-quickstart.h5 --dtype bf16
sha256sum checkpoints/*.h5
