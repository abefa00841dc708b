#!/usr/bin/env bash
# int8 accuracy on a fine-tuned classifier (issue 15): the SST-2 analogue of experiments/glue_en.sh
# (VADER's movie snippets, sign of the rating), one RoPE encoder pre-trained and fine-tuned as there,
# then its test accuracy with fp32 and with dynamic int8 linear layers, ours (`roformer classify
# --quantize int8`) beside ONNX Runtime's quantize_dynamic of the same checkpoint
# (bench/peers/int8_accuracy.py); on CPUs with AVX512-BF16 (or AMX), bf16 too (--quantize bf16 beside
# PyTorch's bf16 autocast). Writes runs/int8/ and docs/results/int8_accuracy/README.md.
# Usage: experiments/int8_accuracy.sh [pre-training steps (600)]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-600}"
roformer=build/release/tools/roformer
python="${ROFORMER_PYTHON:-build/hf-venv/bin/python}"
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
scripts/corpus.sh data/kjv.txt
scripts/datasets.sh vader-movies
out=runs/int8
mkdir -p "$out" docs/results/int8_accuracy
python3 -c "
import json
with open('$out/corpus.txt', 'w') as o:
    o.write(open('data/kjv.txt').read())
    for l in open('data/vader-movies/train.jsonl'): o.write(json.loads(l)['sentence'] + '\n')"
[ -f "$out/tok/vocab.txt" ] || "$roformer" vocab --data "$out/corpus.txt" --size 8000 --out-dir "$out/tok"
if [ ! -f "$out/pre/latest" ]; then
  "$roformer" train --data "$out/corpus.txt" --tokenizer wordpiece --vocab "$out/tok" --task mlm --layers 4 \
    --hidden 256 --heads 4 --ff 1024 --seq 128 --batch 16 --steps "$steps" --lr 1e-3 --warmup $((steps / 10)) \
    --min-lr 1e-5 --eval-every 100 --eval-batches 16 --save-every 0 --seed 1234 --no-progress --position rope \
    --out "$out/pre" 2> "$out/pre.log"
fi
if [ ! -d "$out/ft/best" ]; then
  "$roformer" finetune --model "$out/pre/$(cat "$out/pre/latest")" --train data/vader-movies/train.jsonl \
    --validation data/vader-movies/validation.jsonl --test data/vader-movies/test.jsonl --text-column sentence \
    --label-column label --metric accuracy --epochs 3 --batch 32 --lr 2e-4 --warmup-ratio 0.1 --max-length 64 \
    --seed 1 --no-progress --out "$out/ft" 2> "$out/ft.log"
fi
bf16=()
grep -qw avx512_bf16 /proc/cpuinfo && bf16=(--bf16)
"$python" bench/peers/int8_accuracy.py --roformer "$roformer" --model "$out/ft/best" \
  --test data/vader-movies/test.jsonl "${bf16[@]}" | tee docs/results/int8_accuracy/README.md
