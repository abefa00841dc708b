#!/usr/bin/env bash
# librope's CUDA backend on a machine with an NVIDIA GPU, in one run: the GPU tests (tests/rope/cuda_test.cc:
# cos/sin bits, random calls against the oracle and the CPU, bad positions), compute-sanitizer memcheck and
# racecheck over them, the Python package's CUDA tests (python/tests/test_cuda.py), and the side-by-side
# benchmark (bench/peers/rope_cuda.py: copy floor, PyTorch eager and compiled, Liger, FlashAttention's
# Triton kernel, librope). Logs and JSON go to OUT; a short summary is printed last.
#
#   scripts/cuda-check.sh [OUT]        # OUT defaults to build/cuda-check
#
# BUILD (default build/release) must hold tests/rope_tests and src/rope/librope.so built with CUDA; it is
# built here with the release preset when missing. The Python extension is built into a temporary site
# directory with librope alone (ROFORMER_LIBROPE_ONLY; HWY_DIR points at Highway's CMake package when it is
# not installed). BENCH_ARGS (e.g. --quick) go to the benchmark.
#
# On a GPU machine without the Debian packages (the lent H100 had nvcc, PyTorch and CMake, no Highway,
# GoogleTest or Liger): build rope_tests and librope here, copy them with libhwy, libgomp, libquadmath and
# Highway's headers and CMake package into .devcarry/ (git-ignored), carry it with .whl/ (Liger's wheel)
# and .peers/ (FlashAttention's rotary.py), and run there with
#   LD_LIBRARY_PATH=$PWD/.devcarry/lib:$PWD/.devcarry/usr/lib/x86_64-linux-gnu BUILD=.devcarry/build \
#   HWY_DIR=$PWD/.devcarry/usr/lib/x86_64-linux-gnu/cmake/hwy scripts/cuda-check.sh /tmp/check
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [OUT_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
out="${1:-build/cuda-check}"
mkdir -p "$out"
build="${BUILD:-build/release}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv > "$out/device.txt" 2>&1
nvcc --version >> "$out/device.txt" 2>&1
cat "$out/device.txt"
if [ ! -x "$build/tests/rope_tests" ]; then
  cmake --preset release && cmake --build --preset release --target rope_tests rope || exit 1
fi

# The Python extension, in the background while the C++ checks run.
site="$(mktemp -d)/site"
(
  extra=()
  [ -n "${HWY_DIR:-}" ] && extra+=(-C "cmake.define.hwy_DIR=$HWY_DIR")
  python3 -m pip install --quiet --no-build-isolation --no-deps --no-index --target "$site" \
    -C cmake.define.ROFORMER_LIBROPE_ONLY=ON -C build.targets=_rope -C build-dir=/tmp/roformer-py-build \
    "${extra[@]}" . > "$out/python-build.log" 2>&1
) &
py_build=$!

source scripts/check-steps.sh  # step NAME COMMAND...: logs to OUT/NAME.log, PASS/FAIL into the summary
step gtest "$build/tests/rope_tests" --gtest_filter='RopeCuda*' --gtest_output="json:$out/gtest.json"
if wait "$py_build"; then
  echo "PASS python-build" | tee -a "$out/summary.txt"
  step pytest env PYTHONPATH="$site:$PWD/python/tests" python3 -m pytest -q -p no:cacheprovider \
    python/tests/test_cuda.py python/tests/test_rope.py
else
  echo "FAIL python-build: tail of $out/python-build.log" | tee -a "$out/summary.txt"
  tail -25 "$out/python-build.log"
  status=1
fi
step bench python3 bench/peers/rope_cuda.py --librope "$build/src/rope/librope.so" --json "$out/peers.json" ${BENCH_ARGS:-}
# The sanitizers last (slowest), on fewer random cases.
export ROPE_CUDA_CASES=25
step memcheck compute-sanitizer --tool memcheck --error-exitcode 1 "$build/tests/rope_tests" --gtest_filter='RopeCudaGpu.*'
step racecheck compute-sanitizer --tool racecheck --error-exitcode 1 "$build/tests/rope_tests" \
  --gtest_filter='RopeCudaGpu.*:-RopeCudaGpu.CosSin*'
unset ROPE_CUDA_CASES
echo
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests ran" "$out/gtest.log" || true
tail -4 "$out/pytest.log" 2>/dev/null || true
sed -n '/median µs per call/,$p' "$out/bench.log"
cat "$out/summary.txt"
exit $status
