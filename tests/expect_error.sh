#!/usr/bin/env bash
# expect_error.sh [--status N] REGEX COMMAND...: passes when COMMAND exits
# with status 1 or 2 (an error, not a crash; exactly N where given) and
# prints exactly one line to stderr, which matches REGEX.
want=""
if [[ $1 == --status ]]; then
  want=$2
  shift 2
fi
regex=$1
shift
err=$("$@" 2>&1 >/dev/null)
status=$?
if [[ $status -ne 1 && $status -ne 2 ]] || [[ -n $want && $status -ne $want ]]; then
  echo "expected exit status ${want:-1 or 2}, got $status; stderr: $err"
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
