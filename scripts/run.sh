#!/usr/bin/env bash
# The main job: install dependencies, build the release preset, then report librope's accuracy
# (roformer rope check) and speed against this machine's memory floor (roformer bench rope).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake --preset release
cmake --build --preset release
build/release/tools/roformer rope check
build/release/tools/roformer bench rope "$@"
