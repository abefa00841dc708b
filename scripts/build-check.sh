#!/usr/bin/env bash
# The conventional builds, beside the presets (which scripts/test.sh builds and tests in full): plain
# `cmake -S . -B DIR` with the Unix Makefiles and the Ninja generators, with nvcc on the PATH (where
# this machine has one) and without. Each configures and generates the whole project (every target,
# tests included), builds librope, installs it (`cmake --install DIR --component librope`) and builds
# and runs the C consumer through find_package(rope) and pkg-config (tests/package/check_package.sh).
# `pip install .` is scripts/python-test.sh's. Builds go to build/plain-*.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
nvcc_dir="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
path_without_nvcc="$(echo "$PATH" | tr ':' '\n' | grep -vx "$nvcc_dir" | paste -sd: -)"
# The CUDA toolkit's default place is searched even without PATH: hide it with CUDACXX pointing nowhere.
check() {  # NAME GENERATOR nvcc|no-nvcc
  local dir="build/plain-$1" log
  log="$(mktemp)"
  rm -rf "$dir"
  local env_cuda=(env "PATH=$PATH")
  [ "$3" = no-nvcc ] && env_cuda=(env "PATH=$path_without_nvcc" CUDACXX=/nonexistent/nvcc)
  if ! { "${env_cuda[@]}" cmake -S . -B "$dir" -G "$2" -DCMAKE_BUILD_TYPE=Release &&
         "${env_cuda[@]}" cmake --build "$dir" --target rope -j "$(nproc)" &&
         tests/package/check_package.sh "$dir" "$PWD" librope; } > "$log" 2>&1; then
    cat "$log" >&2
    echo "build-check: $1 failed: cmake -S . -B $dir -G \"$2\" ($3)" >&2
    exit 1
  fi
  echo "build-check: $1 ($2, $3): $(grep -o 'librope CUDA backend: [A-Z]*' "$log"); $(grep -m1 '^librope ' "$log")"
  rm -f "$log"
}
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  check make-nvcc "Unix Makefiles" nvcc
  check ninja-nvcc Ninja nvcc
fi
check make "Unix Makefiles" no-nvcc
check ninja Ninja no-nvcc
