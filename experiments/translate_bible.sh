#!/usr/bin/env bash
# The RoFormer paper's §4.1 (WMT14 En→De, RoPE 27.5 vs sinusoidal 27.3 BLEU) at small scale on 2 CPU
# cores: English → Spanish on the verse-aligned KJV ↔ Reina-Valera 1909 Bible, split by book
# (scripts/datasets.sh bible-en-es: 28,164 / 1,299 / 1,621 pairs; test = Judges, 1 Chronicles, 2 Peter).
# Two encoder-decoders that differ only in position encoding (rope, sinusoidal) get the same joint
# SentencePiece vocabulary (trained per run on the same data with the same seed, so identical), the
# same data order, recipe and step budget: fairseq's transformer recipe scaled down (3+3 layers,
# hidden 256, 4 heads, ff 1024, label smoothing 0.1, Adam (0.9, 0.98), inverse-sqrt after a warm-up,
# dropout 0.1). Each run has one thread; the two run side by side.
# Then, on the test set, with sacreBLEU's defaults (roformer bleu): greedy and beam 4 (length penalty
# 0.6, the paper's) with the last checkpoint, and beam 4 with the average of the last 5 checkpoints;
# each cell is BLEU / chrF2.
# Writes runs/mt/ and, in docs/results/translation/, translation_{bleu,loss}.png, translation_runs.md and
# translation_test.md.
# A run cut short (Ctrl-C, a killed session) is continued from its latest checkpoint by the next call
# (translate-train --resume, bit-exact); finished runs are skipped. Runs of another step budget go to
# runs/mt-STEPS/ and their tables to translation_*_STEPS.md, beside the 1,200-step ones.
# Usage: experiments/translate_bible.sh [STEPS (1200)] [SEEDS ("1")]
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-1200}"
seeds="${2:-1}"
scripts/datasets.sh bible-en-es
roformer="${ROFORMER:-build/release/tools/roformer}"  # ROFORMER: a frozen copy, so rebuilding does not change a run mid-way
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
suffix=""; [ "$steps" = 1200 ] || suffix="_$steps"
out=runs/mt${suffix/_/-}
mkdir -p "$out" docs/results/translation
data=data/bible-en-es
cut -f1 "$data/test.tsv" > "$out/test.src"
cut -f2 "$data/test.tsv" > "$out/test.ref"

for seed in $seeds; do
  for pe in rope sinusoidal; do
    run="$out/$pe-s$seed"
    [ -f "$run/step-$(printf %06d "$steps")/model.safetensors" ] && continue  # done before
    if [ -f "$run/latest" ]; then  # cut short: continue from its latest checkpoint
      echo "== $pe, seed $seed ($steps steps): resuming from $(cat "$run/latest")"
      "$roformer" translate-train --resume --out "$run" --no-progress 2>> "$run.log" &
      continue
    fi
    rm -rf "$run"
    echo "== $pe, seed $seed ($steps steps)"
    "$roformer" translate-train --train "$data/train.tsv" --validation "$data/valid.tsv" --out "$run" --position "$pe" \
      --vocab-size 4000 --layers 3 --hidden 256 --heads 4 --ff 1024 --steps "$steps" --warmup $((steps / 4)) --lr 1e-3 \
      --max-tokens 4096 --eval-every $((steps / 12)) --keep-checkpoints 5 --bleu-sentences 100 --seed "$seed" \
      --threads 1 --no-progress 2> "$run.log" &
  done
  wait
done

table="docs/results/translation/translation_test$suffix.md"
echo "Test BLEU / chrF2 ($(wc -l < "$out/test.ref") verses)" > "$table"
echo >> "$table"
echo "| model | seed | greedy, last | beam 4, last | beam 4, average of last 5 |" >> "$table"
echo "|---|---|---|---|---|" >> "$table"
for seed in $seeds; do
  for pe in rope sinusoidal; do
    run="$out/$pe-s$seed"
    last="$run/$(cat "$run/latest")"
    "$roformer" average --run "$run" --last 5 --out "$run/avg5" 2> /dev/null
    score() {  # MODEL BEAM: test BLEU / chrF2
      "$roformer" translate --model "$1" --input "$out/test.src" --beam "$2" --length-penalty 0.6 --max-len-a 1.5 \
        --max-len-b 10 --threads 2 > "$run/test.beam$2.$(basename "$1").hyp"
      "$roformer" bleu --ref "$out/test.ref" --score-only --chrf < "$run/test.beam$2.$(basename "$1").hyp" | paste -sd/ -
    }
    echo "| $pe | $seed | $(score "$last" 1) | $(score "$last" 4) | $(score "$run/avg5" 4) |" >> "$table"
  done
done
cat "$table"
runs=() labels=()
for seed in $seeds; do
  for pe in rope sinusoidal; do runs+=("$out/$pe-s$seed"); labels+=("$pe (seed $seed)"); done
done
"$roformer" plot runs --runs "${runs[@]}" --labels "${labels[@]}" --metric val_bleu --title "KJV → RV1909: validation BLEU (100 verses, greedy)" \
  --out "docs/results/translation/translation_bleu$suffix.png" --table "docs/results/translation/translation_runs$suffix.md"
"$roformer" plot runs --runs "${runs[@]}" --labels "${labels[@]}" --metric val_loss --title "KJV → RV1909: validation loss (label-smoothed)" \
  --out "docs/results/translation/translation_loss$suffix.png" > /dev/null
