#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test that CI runs:
#   1. ctest labels unit and smoke on the Release build (build/)
#   2. the unit tests again under ASan+UBSan (build-asan/)
#   3. pytest for analysis/, evaluation/ and scripts/tests/
# Every layer runs even when an earlier one fails; a summary line per layer closes the
# output, and the exit status is non-zero if any layer failed.
# Stress tests (label stress) are opt-in: ctest --test-dir build -L stress
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --asan || { echo "test.sh: bootstrap failed" >&2; exit 1; }

names=() statuses=() failed=0
layer() {  # layer NAME COMMAND...: runs the command, records its status
  local name=$1 start=$SECONDS rc
  shift
  echo "=== test.sh: $name ===" >&2
  "$@"
  rc=$?
  names+=("$name ($((SECONDS - start)) s)")
  statuses+=("$rc")
  ((rc == 0)) || failed=1
}

# Tests run one at a time: the concurrency tests want both cores to themselves.
layer "unit+smoke (build/)" ctest --test-dir build -L 'unit|smoke' --output-on-failure --timeout 600
layer "unit under ASan+UBSan (build-asan/)" env ASAN_OPTIONS=detect_leaks=1 \
  ctest --test-dir build-asan -L unit --output-on-failure --timeout 900
layer "pytest" /usr/bin/python3 -m pytest -q analysis evaluation scripts/tests

echo "=== test.sh: summary ===" >&2
for i in "${!names[@]}"; do
  if ((statuses[i] == 0)); then verdict=passed; else verdict="FAILED (exit ${statuses[i]})"; fi
  echo "test.sh: ${names[i]}: $verdict" >&2
done
exit "$failed"
