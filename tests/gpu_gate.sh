#!/usr/bin/env bash
# gpu_gate.sh present|absent STRATA COMMAND...: runs COMMAND where a GPU is
# present (or absent) as the test needs, else says why and exits 77 (CTest
# SKIP_RETURN_CODE). A GPU is visible when strata itself would use one:
# `strata info` reports the CUDA backend built and at least one device
# ("cuda: backend built (runtime 13.0); 1 device(s) visible"); a build
# without CUDA, or one on a machine without a GPU or driver, reports none.
want=$1 strata=$2
shift 2
[[ $want == present || $want == absent ]] || { echo "gpu_gate.sh: present or absent, got '$want'"; exit 2; }
devices=$("$strata" info | sed -nE 's/^cuda: +backend built .*; ([0-9]+) device\(s\) visible.*/\1/p')
devices=${devices:-0}
if [[ $want == present && $devices -eq 0 ]]; then
  echo "skip: this test needs a GPU, and no CUDA device is visible"
  exit 77
fi
if [[ $want == absent && $devices -gt 0 ]]; then
  echo "skip: this test expects no GPU, and $devices CUDA device(s) are visible"
  exit 77
fi
exec "$@"
