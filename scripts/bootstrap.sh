#!/usr/bin/env bash
# Idempotent set-up: installs the Debian packages crossmod needs if any are missing
# (apt-get update first), configures a Release build in build/ and builds it.
# Safe to run any number of times. Usage: scripts/bootstrap.sh [--asan]
#   --asan   also configure and build the ASan+UBSan unit-test build in build-asan/
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libcli11-dev libtomlplusplus-dev libzydis-dev libhwloc-dev libboost-dev
  nlohmann-json3-dev
  python3 python3-matplotlib python3-numpy python3-pytest
  sqlite3
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "bootstrap: installing ${missing[*]}" >&2
  if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null; then SUDO=sudo; else
      echo "bootstrap: need root to install: ${missing[*]}" >&2; exit 1; fi
  else SUDO=""; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

jobs=$(nproc)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"

if [[ "${1:-}" == "--asan" ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCROSSMOD_SANITIZE=ON -DCROSSMOD_BUILD_HARNESS=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
fi
