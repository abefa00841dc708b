#!/usr/bin/env bash
# Position-encoding ablation, the RoFormer paper's Fig. 3 (left) at small scale: the same model, data,
# seed and steps with rope, sinusoidal (additive, eq. 4), learned absolute and no positions, for the
# masked LM and for the causal LM, on the King James Bible (character level). Writes the runs to
# runs/ablation/, and the validation-loss plots and tables to docs/results/pe_ablation/.
# Usage: experiments/pe_ablation.sh [extra roformer train flags]   (about 1 minute per run on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/corpus.sh data/kjv.txt
roformer=build/release/tools/roformer
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
out=runs/ablation
mkdir -p "$out" docs/results/pe_ablation
common=(--data data/kjv.txt --layers 2 --hidden 128 --heads 4 --ff 512 --seq 128 --batch 16 --steps 300
        --lr 3e-3 --warmup 30 --min-lr 1e-4 --eval-every 25 --eval-batches 16 --save-every 0 --seed 1234
        --sample-tokens 0 --no-progress "$@")
for task in mlm clm; do
  runs=()
  for pe in rope sinusoidal learned none; do
    dir="$out/$task-$pe"
    rm -rf "$dir"
    echo "== $task $pe"
    "$roformer" train "${common[@]}" --task "$task" --position "$pe" --out "$dir" 2> "$dir.log" || { cat "$dir.log"; exit 1; }
    tail -2 "$dir.log" | head -1
    runs+=("$dir")
  done
  baseline=$(grep -o "unigram baseline [0-9.]*" "$out/$task-rope.log" | head -1 | awk '{print $3}')
  name=$([ "$task" = mlm ] && echo "masked LM" || echo "causal LM")
  "$roformer" plot runs --runs "${runs[@]}" --labels rope sinusoidal learned none --baseline "$baseline" \
    --title "Position encodings, RoFormer $name (2×128, char-level KJV): validation loss" \
    --out "docs/results/pe_ablation/pe_ablation_$task.png" --table "docs/results/pe_ablation/pe_ablation_$task.md"
done
