#!/usr/bin/env bash
# Builds and runs the test suite. `scripts/test.sh` uses the release preset; `scripts/test.sh debug`
# the AddressSanitizer + UBSan one.
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
scripts/deps.sh
cmake --preset "$preset"
cmake --build --preset "$preset"
ctest --preset "$preset"
