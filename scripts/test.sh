#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test that CI runs:
#   1. ctest labels unit and smoke on the Release build (build/)
#   2. the engine unit tests again under ASan+UBSan (build-asan/)
#   3. pytest for analysis/ and scripts/tests/
# Stress tests (label stress) are opt-in: ctest --test-dir build -L stress
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/bootstrap.sh --asan

# Tests run one at a time: the concurrency tests want both cores to themselves.
ctest --test-dir build -L 'unit|smoke' --output-on-failure --timeout 600
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan -L unit --output-on-failure --timeout 900
/usr/bin/python3 -m pytest -q analysis scripts/tests
