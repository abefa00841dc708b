#!/usr/bin/env bash
# The fused bf16 attention's AMX tile products (forward and backward) on a CPU with AMX-BF16
# (Sapphire Rapids and later), in one run: they are opt-in (ROFORMER_AMX_ATTENTION=1) until this
# passes and is timed. Runs the real tiles against the tiles emulated in scalar code and against fp64
# (ops_tests FlashAttentionBf16Amx.*, every FlashAttention* test with the fused kernels routed to the
# tiles, and the op × dtype NMSE table's amx columns), then times the dot-product and tile kernels in
# alternating rounds (`roformer bench attention --fused --precision bf16` for the forward,
# `--softmax-only` for forward + backward), RoFormer-base's bf16 forward (`roformer bench infer
# --quantize bf16`) and bf16 training at 2,048 tokens with row statistics (`roformer bench train`)
# with and without the tiles. Logs go to OUT; a summary is printed last.
#
#   scripts/amx-check.sh [OUT]        # OUT defaults to build/amx-check
#
# BUILD (default build/release) must hold tests/ops_tests and tools/roformer; they are built here with
# the release preset when missing. ROUNDS (default 2) alternating benchmark rounds. The inference
# timings run build/bench/roformer-base (bench/peers/roformer_infer_hf.py's RoFormer-base with random
# weights) where it exists, and otherwise an encoder of its shape that roformer itself makes (12 blocks
# of 768, 12 heads, feed-forward 3,072, 512 positions, a byte vocabulary: one training step on a
# generated text), which `bench infer` runs at the same speed (its head off): no Python needed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
case "${1:-}" in -*) echo "$(basename "$0"): usage: $(basename "$0") [OUT_DIR] (not an option: '$1')" >&2; exit 2 ;; esac
out="${1:-build/amx-check}"
build="${BUILD:-build/release}"
rounds="${ROUNDS:-2}"
mkdir -p "$out"
{ lscpu | grep -E 'Model name|^CPU\(s\)'; grep -o -w -E 'amx_(tile|bf16|int8)' /proc/cpuinfo | sort -u | tr '\n' ' '; echo; } \
  | tee "$out/cpu.txt"
if ! grep -q -w amx_bf16 /proc/cpuinfo; then
  echo "$(basename "$0"): this CPU has no AMX-BF16 (see $out/cpu.txt): nothing to check" >&2
  exit 2
fi
if [ ! -x "$build/tests/ops_tests" ] || [ ! -x "$build/tools/roformer" ]; then
  cmake --preset release && cmake --build --preset release --target ops_tests roformer || exit 1
fi

source scripts/check-steps.sh  # step NAME COMMAND...: logs to OUT/NAME.log, PASS/FAIL into the summary
export ROFORMER_AMX_ATTENTION=1
step tiles "$build/tests/ops_tests" --gtest_filter='FlashAttention*'
step nmse-table "$build/tests/ops_tests" --gtest_filter='EveryOp*flash_attention*'
if ! grep -q 'RealTilesAgreeWithTheEmulatedOnes' "$out/tiles.log" || grep -q 'SKIPPED.*RealTiles' "$out/tiles.log"; then
  echo "FAIL tiles: the real tiles' test did not run (the OS refused the tile data state?)" | tee -a "$out/summary.txt"
  status=1
fi
grep -h 'worst NMSE against the emulated tiles' "$out/tiles.log" | tee -a "$out/summary.txt"

# Timings, only where the tiles passed: each round the dot products (0) and the tiles (1) in turn.
if [ "$status" -eq 0 ]; then
  model=build/bench/roformer-base
  if [ ! -f "$model/config.json" ]; then  # RoFormer-base's shape, made here
    for i in $(seq 400); do echo "Rotary position embedding turns pair $i of each query and key by its angle."; done \
      > "$out/model-text.txt"
    step model "$build/tools/roformer" train --data "$out/model-text.txt" --task mlm --tokenizer byte --layers 12 \
      --hidden 768 --heads 12 --ff 3072 --max-positions 512 --batch 1 --seq 64 --steps 1 --out "$out/model-run" \
      --no-progress
    model="$out/model-run/step-000001"
  fi
  for round in $(seq "$rounds"); do
    for amx in 0 1; do
      for mask in full causal; do
        ROFORMER_AMX_ATTENTION=$amx step "attention-$mask-amx$amx-r$round" "$build/tools/roformer" bench attention \
          --fused --precision bf16 --heads 12 --head-dim 64 --mask $mask --batches 1 --lengths 512,2048,8192 \
          --thread-counts 1,2
      done
      ROFORMER_AMX_ATTENTION=$amx step "backward-amx$amx-r$round" "$build/tools/roformer" bench attention \
        --softmax-only --precision bf16 --heads 12 --head-dim 64 --mask causal --lengths 512,2048,8192 --threads 1
      for shape in 1x128 8x512; do
        ROFORMER_AMX_ATTENTION=$amx step "infer-$shape-amx$amx-r$round" "$build/tools/roformer" bench infer \
          --model "$model" --batch "${shape%x*}" --seq "${shape#*x}" --quantize bf16 --threads 2 --min-time 5
      done
      ROFORMER_AMX_ATTENTION=$amx step "train-amx$amx-r$round" "$build/tools/roformer" bench train --preset base \
        --batch 1 --seq 2048 --steps 3 --warmup 1 --threads 2 --precision bf16 --attention-memory linear --no-sgemm
    done
  done
  for f in "$out"/attention-*.log "$out"/backward-*.log "$out"/infer-*.log "$out"/train-*.log; do
    [ -f "$f" ] && { echo "== $(basename "$f" .log)"; grep -E '^\||tok/s|AVX512-BF16|AMX-BF16' "$f"; }
  done > "$out/timings.txt"
  echo "timings: $out/timings.txt"
fi
echo "summary ($out/summary.txt):"
cat "$out/summary.txt"
exit "$status"
