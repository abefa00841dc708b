#!/usr/bin/env bash
# Two builds of `roformer bench train` side by side: rounds of OLD then NEW, one thread, printing each
# run's tokens/s and user CPU seconds (which another process's load disturbs less than wall time).
# Needs GNU time (Debian package `time`). Usage: bench/train_ab.sh OLD_ROFORMER NEW_ROFORMER PRESET STEPS [ROUNDS=3]
# PRECISION=bf16 in the environment runs both in bf16 mixed precision (default fp32).
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 OLD_ROFORMER NEW_ROFORMER small|large STEPS [ROUNDS]" >&2; exit 2; }
old=$1 new=$2 preset=$3 steps=$4 rounds=${5:-3} precision=${PRECISION:-fp32}
for ((r = 1; r <= rounds; ++r)); do
  for side in old new; do
    bin=$old; [ "$side" = new ] && bin=$new
    out=$({ OMP_NUM_THREADS=1 /usr/bin/time -f "cpu_s %U" "$bin" bench train --preset "$preset" --steps "$steps" \
            --warmup 1 --precision "$precision" --no-sgemm --json; } 2>&1)
    echo "$side $(grep -o '"tokens_per_s": *[0-9.]*' <<<"$out") $(grep '^cpu_s' <<<"$out")"
  done
done
