#!/usr/bin/env bash
# RoPE with linear attention, the RoFormer paper's Fig. 3 (right) at small scale: a character-level
# causal LM on the King James Bible with linear (elu+1) and Performer (FAVOR+) attention, each with
# and without RoPE (RoPE rotates the feature maps in the numerator only, eq. 19), same seed, data and
# steps. Writes runs/linear/ and docs/results/linear_attention/linear_attention.{png,md}; then times
# softmax vs linear attention against the sequence length into docs/results/attention_scaling/README.md.
# Usage: experiments/linear_attention.sh [extra roformer train flags]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/corpus.sh data/kjv.txt
roformer=build/release/tools/roformer
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
out=runs/linear
mkdir -p "$out" docs/results/linear_attention docs/results/attention_scaling
common=(--data data/kjv.txt --task clm --layers 2 --hidden 128 --heads 4 --ff 512 --seq 128 --batch 16 --steps 300
        --lr 3e-3 --warmup 30 --min-lr 1e-4 --eval-every 25 --eval-batches 16 --save-every 0 --seed 1234
        --performer-features 64 --sample-tokens 0 --no-progress "$@")
runs=()
labels=()
for attention in linear performer; do
  for pe in rope none; do
    dir="$out/$attention-$pe"
    rm -rf "$dir"
    echo "== $attention attention, positions: $pe"
    "$roformer" train "${common[@]}" --attention "$attention" --position "$pe" --out "$dir" 2> "$dir.log" || { cat "$dir.log"; exit 1; }
    tail -2 "$dir.log" | head -1
    runs+=("$dir")
    labels+=("$attention, $pe")
  done
done
baseline=$(grep -o "unigram baseline [0-9.]*" "$out/linear-rope.log" | head -1 | awk '{print $3}')
"$roformer" plot runs --runs "${runs[@]}" --labels "${labels[@]}" --baseline "$baseline" \
  --title "Linear attention with and without RoPE (causal LM, 2×128, char-level KJV)" \
  --out docs/results/linear_attention/linear_attention.png --table docs/results/linear_attention/linear_attention.md
"$roformer" bench attention --lengths 512,1024,2048,4096,8192,16384,32768 | tee docs/results/attention_scaling/README.md
