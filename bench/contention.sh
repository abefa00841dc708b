#!/usr/bin/env bash
# How OpenMP's idle policy behaves when another process holds a core: training (`roformer bench train
# --preset small`) and inference (`roformer bench infer`, RoFormer-base 1 x 128) at 2 threads, with
# and without a busy loop beside them, for each GOMP_SPINCOUNT (libgomp: how many turns an idle worker
# spins before it sleeps; 300000 is libgomp's default, 0 is OMP_WAIT_POLICY=passive), and 1 thread
# for reference. The policies take turns within each round. docs/perf.md has the table and the
# default roformer chose from it (tools/roformer/main.cc).
# Usage: bench/contention.sh [ROFORMER] [MODEL_DIR] [ROUNDS=2] [QUANTIZE=auto]
#   MODEL_DIR: a RoFormer-base directory (bench/peers/roformer_infer_hf.py makes build/bench/roformer-base).
#   QUANTIZE: the inference's --quantize (int8 and bf16 layers are short, so more of the time is waits).
set -euo pipefail
roformer=${1:-build/release/tools/roformer}
model=${2:-build/bench/roformer-base}
rounds=${3:-2}
quantize=${4:-auto}
spins=(300000 10000 3000 1000 0)
busy_pid=
stop_busy() {
  if [ -n "$busy_pid" ]; then kill "$busy_pid" 2> /dev/null || true; wait "$busy_pid" 2> /dev/null || true; fi
  busy_pid=
}
trap stop_busy EXIT
train() { "$roformer" bench train --preset small --steps 6 --warmup 1 --no-sgemm --threads "$1" --json |
          grep -o '"tokens_per_s": *[0-9.]*' | grep -o '[0-9.]*$'; }
infer() { "$roformer" bench infer --model "$model" --batch 1 --seq 128 --threads "$1" --min-time 2 --quantize "$quantize" --json |
          grep -o '"tokens_per_s": *[0-9.]*' | grep -o '[0-9.]*$'; }
echo "load spin threads train_tok_s infer_tok_s"
for ((r = 1; r <= rounds; ++r)); do
  for load in idle busy; do
    if [ "$load" = busy ]; then (while :; do :; done) & busy_pid=$!; fi
    for spin in "${spins[@]}"; do
      export GOMP_SPINCOUNT=$spin
      echo "$load $spin 2 $(train 2) $(infer 2)"
    done
    echo "$load 300000 1 $(GOMP_SPINCOUNT=300000 train 1) $(GOMP_SPINCOUNT=300000 infer 1)"
    stop_busy
  done
done
