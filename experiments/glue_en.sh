#!/usr/bin/env bash
# The RoFormer paper's §4.2-4.3 at small scale, on real English data: pre-train two masked-LM encoders
# that differ only in position encoding (RoPE vs BERT's learned absolute positions) on the same
# WordPiece vocabulary, corpus and budget, then fine-tune each over 3 seeds on GLUE analogues:
#   sst2: VADER's movie-review snippets, sentiment sign (accuracy)          — SST-2 analogue
#   stsb: the same snippets' mean human rating, -4..+4 (Pearson/Spearman)   — STS-B analogue
# Corpus: the King James Bible (Debian bible-kjv) + the training split's sentences (no labels; the
# validation and test sentences are not in it). Each job runs on one thread; two run side by side.
# Writes runs/glue/ and docs/results/finetune_pretrain.png, docs/results/finetune_pretrain.md and
# docs/results/finetune_glue.md (experiments/glue_en_report.py).
# Usage: experiments/glue_en.sh [pre-training steps (600)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-600}"
scripts/corpus.sh data/kjv.txt
scripts/datasets.sh vader-movies
roformer=build/release/tools/roformer
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
out=runs/glue
mkdir -p "$out" docs/results
python3 -c "
import json
with open('$out/corpus.txt', 'w') as o:
    o.write(open('data/kjv.txt').read())
    for l in open('data/vader-movies/train.jsonl'): o.write(json.loads(l)['sentence'] + '\n')"
"$roformer" vocab --data "$out/corpus.txt" --size 8000 --out-dir "$out/tok"

pretrain=(--data "$out/corpus.txt" --tokenizer wordpiece --vocab "$out/tok" --task mlm --layers 4 --hidden 256
          --heads 4 --ff 1024 --seq 128 --batch 16 --steps "$steps" --lr 1e-3 --warmup $((steps / 10)) --min-lr 1e-5
          --eval-every 50 --eval-batches 16 --save-every 0 --seed 1234 --threads 1 --no-progress)
for pe in rope learned; do
  rm -rf "$out/pre-$pe"
  echo "== pre-training $pe ($steps steps)"
  "$roformer" train "${pretrain[@]}" --position "$pe" --out "$out/pre-$pe" 2> "$out/pre-$pe.log" &
done
wait
baseline=$(grep -o "unigram baseline [0-9.]*" "$out/pre-rope.log" | head -1 | awk '{print $3}')
"$roformer" plot runs --runs "$out/pre-rope" "$out/pre-learned" --labels "RoPE" "BERT (learned absolute)" \
  --baseline "$baseline" --title "MLM pre-training, 4x256, WordPiece 8k, KJV + movie snippets: validation loss" \
  --out docs/results/finetune_pretrain.png --table docs/results/finetune_pretrain.md

finetune() {  # task pe seed
  local task="$1" pe="$2" seed="$3" dir="$out/ft-$1-$2-$3"
  local label=label metric=accuracy
  [ "$task" = stsb ] && label=score metric=pearson
  rm -rf "$dir"
  "$roformer" finetune --model "$out/pre-$pe/$(cat "$out/pre-$pe/latest")" --train data/vader-movies/train.jsonl \
    --validation data/vader-movies/validation.jsonl --test data/vader-movies/test.jsonl --predict \
    --text-column sentence --label-column "$label" --metric "$metric" --epochs 3 --batch 32 --lr 2e-4 \
    --warmup-ratio 0.1 --max-length 64 --seed "$seed" --threads 1 --no-progress --out "$dir" 2> "$dir.log"
  echo "   $task $pe seed $seed done"
}
for pe in rope learned; do
  for seed in 1 2 3; do
    echo "== fine-tuning $pe, seed $seed"
    finetune sst2 "$pe" "$seed" &
    finetune stsb "$pe" "$seed" &
    wait
  done
done
python3 experiments/glue_en_report.py "$out" > docs/results/finetune_glue.md
cat docs/results/finetune_glue.md
