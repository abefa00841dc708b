#!/usr/bin/env bash
# Why RoPE does not learn the MRPC analogue (experiments/glue_en.sh): runs beside the learning-rate
# sweep that separate the recipe from the encoder. Both encoders alike, lr 2e-4, batch 32, warmup
# 10%, max length 96, one thread each, two side by side; seed 1, and DIAG_SEEDS for the short runs:
#   long-*:    from the pre-trained checkpoints, 8 epochs instead of 2 (does RoPE leave the plateau late?)
#   scratch-*: from randomly initialised encoders (runs/glue/init-*: one step at lr 1e-12), 2 epochs
#              (is it the pre-trained state or the encoding?)
#   short-*:   from the pre-trained checkpoints, 2 epochs, max length 40 instead of 96: about 18
#              tokens of each text, so a word of the second text sits at most ~38 positions after
#              its twin in the first instead of up to ~94 (does the distance between the texts matter?)
# And, with ROFORMER_PYTHON set to the hf venv's python (scripts/hf-env.sh), the attention probe
# (experiments/pair_attention.py): how much each pre-trained encoder's attention links a word of the
# second text to the same word in the first.
# Needs runs/glue from `GLUE_TASKS=mrpc experiments/glue_en.sh 600`. Resumes: finished runs are kept,
# runs cut short continue from their latest checkpoint.
# Writes runs/glue/diag-NAME-ENCODER-SEED and prints a table.
# Usage: [ROFORMER=binary] [DIAG_SEEDS="1 2 3"] [ROFORMER_PYTHON=build/hf-venv/bin/python] experiments/mrpc_diagnose.sh
set -euo pipefail
cd "$(dirname "$0")/.."
roformer="${ROFORMER:-build/release/tools/roformer}"
source experiments/finetune_lib.sh
seeds="${DIAG_SEEDS:-1}"
out=runs/glue
for pe in rope learned; do
  [ -f "$out/init-$pe/latest" ] && continue
  "$roformer" train --data "$out/corpus.txt" --tokenizer wordpiece --vocab "$out/tok" --task mlm --layers 4 \
    --hidden 256 --heads 4 --ff 1024 --seq 128 --batch 16 --steps 1 --lr 1e-12 --warmup 0 --min-lr 1e-12 \
    --eval-every 0 --save-every 0 --seed 1234 --threads 1 --no-progress --position "$pe" --out "$out/init-$pe" \
    2> "$out/init-$pe.log"
done
run() {  # name pe model epochs max-length seed
  local dir="$out/diag-$1-$2-$6"
  [ -f "$dir/predictions.jsonl" ] && return 0
  finetune_or_resume "$dir" --model "$3/$(cat "$3/latest")" --train data/bible-pairs/train.jsonl \
    --validation data/bible-pairs/validation.jsonl --test data/bible-pairs/test.jsonl --predict \
    --text-column sentence1 --text-pair-column sentence2 --label-column label --metric f1 --epochs "$4" \
    --batch 32 --lr 2e-4 --warmup-ratio 0.1 --max-length "$5" --seed "$6" --threads 1 --no-progress
  echo "   $1 $2 seed $6 done"
}
for seed in $seeds; do
  for pe in rope learned; do run short "$pe" "$out/pre-$pe" 2 40 "$seed" & done
  wait
done
for pe in rope learned; do run scratch "$pe" "$out/init-$pe" 2 96 1 & done
wait
for pe in rope learned; do run long "$pe" "$out/pre-$pe" 8 96 1 & done
wait
python3 - "$out" <<'EOF'
import glob, json, os, statistics, sys
print("| run | encoder | seed | epochs | max length | train loss, first / last 50 steps | best validation F1 | validation accuracy at the end | one class on test |")
print("|---|---|---|---|---|---|---|---|---|")
for d in sorted(glob.glob(os.path.join(sys.argv[1], "diag-*-*-*/"))):
    name, pe, seed = os.path.basename(d.rstrip("/")).split("-")[1:4]
    log = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    loss = [r["loss"] for r in log if "loss" in r]
    ev = [r for r in log if "val_f1" in r]
    pred = {json.loads(l)["label"] for l in open(os.path.join(d, "predictions.jsonl"))}
    epochs, length = (8, 96) if name == "long" else (2, 40) if name == "short" else (2, 96)
    print(f"| {name} | {pe} | {seed} | {epochs} | {length} | {statistics.fmean(loss[:50]):.4f} / {statistics.fmean(loss[-50:]):.4f} | "
          f"{max(r['val_f1'] for r in ev):.4f} | {ev[-1]['val_accuracy']:.4f} | {'yes' if len(pred) == 1 else 'no'} |")
EOF
if [ -n "${ROFORMER_PYTHON:-}" ]; then "$ROFORMER_PYTHON" experiments/pair_attention.py "$roformer" "$out" 200; fi
