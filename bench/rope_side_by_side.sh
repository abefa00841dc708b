#!/usr/bin/env bash
# Issue 17's whole side-by-side RoPE run, back to back, so that every figure in docs/perf.md's
# tables comes from one quiet stretch of the machine: librope against its memory floor (capped at
# AVX2, then the CPU's best target), ggml's ggml_rope_ext beside librope (an AVX2 build and a
# native one), PyTorch's best formulation (ATen capped at AVX2, then AVX-512), and the standalone
# loops behind the explanations (rope_inplace, rope_callgrind's timing mode, rope_decode_loop).
# The order is the order of importance: if the quiet stretch ends early, the first files are the
# complete ones. Each step logs its start time (UTC) to $OUT/log.txt.
#
# Run from the repository root after building (ggml is never part of the repository: build it
# elsewhere as bench/peers/rope_ggml.py's docstring says, once with -DGGML_AVX2=ON
# -DGGML_AVX512=OFF and once with -DGGML_NATIVE=ON):
#   cmake --preset release && cmake --build --preset release --target roformer rope
#   g++ -O2 -std=c++17 bench/rope_callgrind.cc -Iinclude -Lbuild/release/src/rope -lrope -lhwy \
#       -Wl,-rpath,$PWD/build/release/src/rope -o build/rope_callgrind
#   (likewise bench/rope_decode_loop.cc, bench/rope_bf16_steps.cc, and bench/rope_inplace.cc with
#   -O3 -mavx2 -mfma: the commands are in their headers)
#   GGML_SRC=... GGML_AVX2=... GGML_NATIVE=... OUT=/tmp/rope-run bench/rope_side_by_side.sh
set -euo pipefail
: "${GGML_SRC:?ggml source directory}" "${GGML_AVX2:?ggml build for AVX2}" "${GGML_NATIVE:?ggml native build}"
OUT=${OUT:-/tmp/rope-side-by-side}
BIN=${BIN:-build/release/tools/roformer}
TORCH_PY=${TORCH_PY:-/usr/bin/python3}  # the interpreter with PyTorch (Debian python3-torch)
mkdir -p "$OUT"
step() { echo "$(date -u +%H:%M:%S) $*" | tee -a "$OUT/log.txt"; }

step "librope, AVX2-capped"
"$BIN" bench rope --simd-target AVX2 --json > "$OUT/rope_avx2.json"
step "librope, native"
"$BIN" bench rope --json > "$OUT/rope_native.json"
step "ggml AVX2 beside librope AVX2"
python3 bench/peers/rope_ggml.py --ggml-src "$GGML_SRC" --ggml-build "$GGML_AVX2" --simd-target AVX2 \
  --json "$OUT/ggml_avx2.json" > "$OUT/ggml_avx2.txt"
step "ggml native beside librope native"
python3 bench/peers/rope_ggml.py --ggml-src "$GGML_SRC" --ggml-build "$GGML_NATIVE" \
  --json "$OUT/ggml_native.json" > "$OUT/ggml_native.txt"
# PyTorch 1.13 picks AVX2 kernels by default even on AVX-512 CPUs; name both capabilities.
step "PyTorch, ATen AVX2"
ATEN_CPU_CAPABILITY=avx2 "$TORCH_PY" bench/peers/rope_torch.py --ours "$OUT/rope_avx2.json" \
  --json "$OUT/torch_avx2.json" > "$OUT/torch_avx2.txt"
step "PyTorch, ATen AVX-512"
ATEN_CPU_CAPABILITY=avx512 "$TORCH_PY" bench/peers/rope_torch.py --ours "$OUT/rope_native.json" \
  --json "$OUT/torch_avx512.json" > "$OUT/torch_avx512.txt"
step "standalone loops"
{
  AVX2=1 build/rope_inplace
  build/rope_inplace
  for place in in out; do
    build/rope_callgrind floor decode f32 interleaved $place 20000
    AVX2=1 build/rope_callgrind rope decode f32 interleaved $place 20000
    build/rope_callgrind rope decode f32 interleaved $place 20000
  done
  AVX2=1 build/rope_decode_loop f32
  build/rope_decode_loop f32
  AVX2=1 build/rope_decode_loop bf16
  build/rope_decode_loop bf16
  build/rope_bf16_steps  # also measures the core clock
} > "$OUT/loops.txt" 2>&1
step "done"
