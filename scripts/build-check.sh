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
# Without nvcc: PATH without the CUDA toolkit's own bin directory (never a system one such as /usr/bin,
# where Debian's nvidia-cuda-toolkit puts nvcc beside cmake), and CUDACXX pointing nowhere, because
# CMake also searches the toolkit's default place.
nvcc_dir="$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")"
path_without_nvcc="$PATH"
case "$nvcc_dir" in
  /usr/bin | /bin | /usr/local/bin) ;;
  *) path_without_nvcc="$(echo "$PATH" | tr ':' '\n' | grep -vx "$nvcc_dir" | paste -sd: -)" ;;
esac
check() {  # NAME GENERATOR nvcc|no-nvcc
  local dir="build/plain-$1" log
  log="$(mktemp)"
  rm -rf "$dir"
  local env_cuda=(env "PATH=$PATH") want=ON
  [ "$3" = no-nvcc ] && env_cuda=(env "PATH=$path_without_nvcc" CUDACXX=/nonexistent/nvcc) want=OFF
  if ! { "${env_cuda[@]}" cmake -S . -B "$dir" -G "$2" -DCMAKE_BUILD_TYPE=Release &&
         "${env_cuda[@]}" cmake --build "$dir" --target rope -j "$(nproc)" &&
         tests/package/check_package.sh "$dir" "$PWD" librope; } > "$log" 2>&1; then
    cat "$log" >&2
    echo "build-check: $1 failed: cmake -S . -B $dir -G \"$2\" ($3)" >&2
    exit 1
  fi
  if ! grep -q "librope CUDA backend: $want" "$log"; then
    echo "build-check: $1 ($2, $3) configured $(grep -o 'librope CUDA backend: [A-Z]*' "$log"), expected $want" >&2
    exit 1
  fi
  echo "build-check: $1 ($2, $3): librope CUDA backend: $want; $(grep -m1 '^librope ' "$log")"
  rm -f "$log"
}
if command -v nvcc > /dev/null || [ -x /usr/local/cuda/bin/nvcc ]; then
  check make-nvcc "Unix Makefiles" nvcc
  check ninja-nvcc Ninja nvcc
fi
check make "Unix Makefiles" no-nvcc
check ninja Ninja no-nvcc
