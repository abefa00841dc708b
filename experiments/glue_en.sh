#!/usr/bin/env bash
# The RoFormer paper's §4.2-4.3 at small scale, on real English data: pre-train two masked-LM encoders
# that differ only in position encoding (RoPE vs BERT's learned absolute positions) on the same
# WordPiece vocabulary, corpus and budget, then fine-tune each over 3 seeds on GLUE analogues:
#   sst2: VADER's movie-review snippets, sentiment sign (accuracy)          — SST-2 analogue
#   stsb: the same snippets' mean human rating, -4..+4 (Pearson/Spearman)   — STS-B analogue
#   mrpc: a KJV verse against the same verse in the World English Bible or another verse of its
#         chapter (F1 of "paraphrase"; scripts/datasets.sh bible-pairs)      — MRPC analogue
# Corpus: the King James Bible (Debian bible-kjv) + the training split's sentences (no labels; the
# validation and test sentences are not in it). Each job runs on one thread; two run side by side.
# Every learning rate in GLUE_LRS (default 2e-4) is fine-tuned for every task, encoder and seed; the
# report picks, for each task and encoder alike, the rate with the best mean validation metric.
# Resumes: a finished pre-training (its checkpoint written) and a finished fine-tuning run
# (predictions.jsonl written) are kept; a fine-tuning cut short is continued from its latest
# checkpoint (bit-exact); a pre-training cut short is run again from its start.
# Writes runs/glue/ and, in docs/results/finetune/, finetune_pretrain.png, finetune_pretrain.md and
# finetune_glue.md (experiments/glue_en_report.py).
# Usage: [GLUE_TASKS="sst2 stsb mrpc"] [GLUE_LRS="2e-4"] [GLUE_SEEDS="1 2 3"] experiments/glue_en.sh [pre-training steps (600)]
# Every run is deterministic (one thread each), so the tasks can be run separately.
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-600}"
scripts/corpus.sh data/kjv.txt
scripts/datasets.sh vader-movies
scripts/datasets.sh bible-pairs
tasks="${GLUE_TASKS:-sst2 stsb mrpc}"
lrs="${GLUE_LRS:-2e-4}"
seeds="${GLUE_SEEDS:-1 2 3}"
roformer="${ROFORMER:-build/release/tools/roformer}"  # ROFORMER: a fixed binary for long runs while the tree is rebuilt
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
source experiments/finetune_lib.sh
out=runs/glue
mkdir -p "$out" docs/results/finetune
python3 -c "
import json
with open('$out/corpus.txt', 'w') as o:
    o.write(open('data/kjv.txt').read())
    for l in open('data/vader-movies/train.jsonl'): o.write(json.loads(l)['sentence'] + '\n')"
[ -f "$out/tok/vocab.txt" ] || "$roformer" vocab --data "$out/corpus.txt" --size 8000 --out-dir "$out/tok"

pretrain=(--data "$out/corpus.txt" --tokenizer wordpiece --vocab "$out/tok" --task mlm --layers 4 --hidden 256
          --heads 4 --ff 1024 --seq 128 --batch 16 --steps "$steps" --lr 1e-3 --warmup $((steps / 10)) --min-lr 1e-5
          --eval-every 50 --eval-batches 16 --save-every 0 --seed 1234 --threads 1 --no-progress)
for pe in rope learned; do
  [ -f "$out/pre-$pe/latest" ] && [ -d "$out/pre-$pe/$(cat "$out/pre-$pe/latest")" ] && continue  # done
  rm -rf "$out/pre-$pe"
  echo "== pre-training $pe ($steps steps)"
  "$roformer" train "${pretrain[@]}" --position "$pe" --out "$out/pre-$pe" 2> "$out/pre-$pe.log" &
done
wait
baseline=$(grep -o "unigram baseline [0-9.]*" "$out/pre-rope.log" | head -1 | awk '{print $3}')
"$roformer" plot runs --runs "$out/pre-rope" "$out/pre-learned" --labels "RoPE" "BERT (learned absolute)" \
  --baseline "$baseline" --title "MLM pre-training, 4x256, WordPiece 8k, KJV + movie snippets: validation loss" \
  --out docs/results/finetune/finetune_pretrain.png --table docs/results/finetune/finetune_pretrain.md

finetune() {  # task pe lr seed
  local task="$1" pe="$2" lr="$3" seed="$4" dir="$out/ft-$1-$2-lr$3-$4"
  [ -f "$dir/predictions.jsonl" ] && return 0  # finished
  local data=data/vader-movies text=(--text-column sentence) label=label metric=accuracy epochs=3 length=64
  [ "$task" = stsb ] && label=score metric=pearson
  if [ "$task" = mrpc ]; then  # verse pairs run longer: 2 epochs, 96 tokens
    data=data/bible-pairs text=(--text-column sentence1 --text-pair-column sentence2) metric=f1 epochs=2 length=96
  fi
  finetune_or_resume "$dir" --model "$out/pre-$pe/$(cat "$out/pre-$pe/latest")" --train "$data/train.jsonl" \
    --validation "$data/validation.jsonl" --test "$data/test.jsonl" --predict "${text[@]}" \
    --label-column "$label" --metric "$metric" --epochs "$epochs" --batch 32 --lr "$lr" --warmup-ratio 0.1 \
    --max-length "$length" --seed "$seed" --threads 1 --no-progress
  echo "   $task $pe lr $lr seed $seed done"
}
jobs=()  # every (task, pe, lr, seed), two at a time; every rate's first seed before any second one
for task in $tasks; do
  for seed in $seeds; do
    for lr in $lrs; do
      for pe in rope learned; do jobs+=("$task $pe $lr $seed"); done
    done
  done
done
for ((i = 0; i < ${#jobs[@]}; i += 2)); do
  finetune ${jobs[i]} &
  [ $((i + 1)) -lt ${#jobs[@]} ] && finetune ${jobs[i + 1]} &
  wait
done
python3 experiments/glue_en_report.py "$out" > docs/results/finetune/finetune_glue.md
cat docs/results/finetune/finetune_glue.md
