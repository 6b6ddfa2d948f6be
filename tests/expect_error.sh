#!/usr/bin/env bash
# expect_error.sh REGEX COMMAND...: passes when COMMAND exits with status 1 or
# 2 (an error, not a crash) and prints exactly one line to stderr, which
# matches REGEX.
regex=$1
shift
err=$("$@" 2>&1 >/dev/null)
status=$?
if [[ $status -ne 1 && $status -ne 2 ]]; then
  echo "expected exit status 1 or 2, got $status; stderr: $err"
  exit 1
fi
lines=$(printf '%s\n' "$err" | wc -l)
if [[ $lines -ne 1 ]]; then
  echo "expected one line on stderr, got $lines:"
  printf '%s\n' "$err"
  exit 1
fi
if ! [[ $err =~ $regex ]]; then
  echo "stderr does not match '$regex': $err"
  exit 1
fi
echo "ok: $err"
