#!/usr/bin/env bash
# Outputs never overwrite inputs: every command that writes a model directory, a run directory or a
# file beside its inputs refuses an output that is (or holds) one of its inputs, and a model
# directory writer refuses a non-empty directory that holds anything but its own files, each with
# one error line naming the option; the inputs stay byte for byte as they were.
# Usage: outputs.sh ROFORMER_BINARY FIXTURES WORK_DIR
set -euo pipefail
roformer="$1"
fixtures="$2"
work="$3"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=2
model="$work/model"
mkdir -p "$model"
cp "$fixtures/case1_mlm_basic/config.json" "$fixtures/case1_mlm_basic/model.safetensors" "$model/"
cp "$fixtures/tokenizer/vocab.txt" "$fixtures/tokenizer/tokenizer_config.json" "$fixtures/tokenizer/special_tokens_map.json" "$model/"
(cd "$model" && sha256sum ./* > "$work/model.sha256")

refused() {  # PATTERN COMMAND...: status 1, one stderr line matching PATTERN
  local pattern="$1" status=0
  shift
  "$@" > /dev/null 2> "$work/err.txt" || status=$?
  [ "$status" -eq 1 ] || { echo "expected status 1, got $status: $*" >&2; cat "$work/err.txt" >&2; exit 1; }
  [ "$(wc -l < "$work/err.txt")" -eq 1 ] && grep -q -- "$pattern" "$work/err.txt" ||
    { echo "expected one line matching '$pattern':" >&2; cat "$work/err.txt" >&2; exit 1; }
}

echo "== quantize"
refused "--out $model: is the input $model" "$roformer" quantize --model "$model" --out "$model"
refused "--out $model/..: holds the input $model" "$roformer" quantize --model "$model" --out "$model/.."
mkdir -p "$work/home/Documents"
refused "--out $work/home: a directory that holds other things (Documents)" "$roformer" quantize --model "$model" --out "$work/home"
"$roformer" quantize --model "$model" --out "$work/q8" > /dev/null
"$roformer" quantize --model "$model" --out "$work/q8" > /dev/null  # its own earlier output is replaced

echo "== average"
refused "--out $model: is the input $model" "$roformer" average "$model" "$work/q8" --out "$model"
refused "--out $work/home: a directory that holds other things" "$roformer" average "$model" "$model" --out "$work/home"

echo "== forward"
refused "--out $model/model.safetensors: is a file of the input $model" "$roformer" forward --model "$model" \
  --inputs "$fixtures/case1_mlm_basic/io.safetensors" --out "$model/model.safetensors"
cp "$fixtures/case1_mlm_basic/io.safetensors" "$work/io.safetensors"
refused "--out $work/io.safetensors: is the input $work/io.safetensors" "$roformer" forward --model "$model" \
  --inputs "$work/io.safetensors" --out "$work/io.safetensors"

echo "== finetune, train, vocab"
printf '{"sentence": "good", "label": "pos"}\n{"sentence": "bad", "label": "neg"}\n' > "$work/train.jsonl"
refused "--out $model: is the input $model" "$roformer" finetune --model "$model" --train "$work/train.jsonl" \
  --validation "$work/train.jsonl" --out "$model" --no-progress
refused "--out $work: holds the input $work/q8" "$roformer" finetune --model "$work/q8" --train "$work/train.jsonl" \
  --validation "$work/train.jsonl" --out "$work" --no-progress
awk 'BEGIN { for (i = 0; i < 200; i++) print "the river and the mountain " i }' > "$work/corpus.txt"
refused "--out $work: holds the input $work/corpus.txt" "$roformer" train --data "$work/corpus.txt" --steps 1 --out "$work" --no-progress
refused "--out $work/corpus.txt: is the input $work/corpus.txt" "$roformer" vocab --data "$work/corpus.txt" --out "$work/corpus.txt"

(cd "$model" && sha256sum -c --quiet "$work/model.sha256")
[ ! -e "$work/home/model.safetensors" ]
echo "inputs unchanged"
