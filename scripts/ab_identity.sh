#!/usr/bin/env bash
# Checks that two builds of the roformer command line train and decode identically with fixed seeds,
# for refactors that must not change behaviour: pre-training (clm and mlm, and mlm from the roformer-hf
# case1 fixture with --init-from), fine-tuning (case1, early stopping, test predictions), translation
# training, then eval, generate (greedy and beam), classify and translate with many decoding flag sets
# on the trained checkpoints. Metrics are compared value by
# value with the timings (elapsed_s, tokens_per_s) left out; weights and outputs byte by byte.
#   scripts/ab_identity.sh BASE_BINARY NEW_BINARY [WORK_DIR]
# Exits non-zero at the first difference.
set -euo pipefail
base="$1" new="$2" w="${3:-/tmp/ab_identity}"
fixture="$(cd "$(dirname "$0")/.." && pwd)/../shared/fixtures/roformer-hf/case1_mlm_basic"
rm -rf "$w"; mkdir -p "$w"
export OMP_NUM_THREADS=2
same_metrics() {
  python3 - "$1" "$2" <<'PY'
import json, sys
def rows(p):
    out = []
    for line in open(p):
        j = json.loads(line); j.pop("elapsed_s"); j.pop("tokens_per_s"); out.append(j)
    return out
a, b = rows(sys.argv[1]), rows(sys.argv[2])
if a != b:
    sys.exit(f"metrics differ: {sys.argv[1]} vs {sys.argv[2]}")
print(f"  metrics: {len(a)} records identical (timings aside)")
PY
}
same() { cmp "$1" "$2" > /dev/null || { echo "differ: $1 $2" >&2; exit 1; }; echo "  ${3:-$(basename "$1")} identical"; }
run() { local v="$1"; shift; "${!v}" "$@"; }

python3 - "$w" <<'PY'
import json, random, sys
w = sys.argv[1]
r = random.Random(3)
words = "the river runs past the mill and the mill wheel turns the stone over and over".split()
open(f"{w}/lm.txt", "w").write(" ".join(r.choice(words) for _ in range(30000)))
EN = "zero one two three four five six seven eight nine ten eleven twelve".split()
ES = "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce".split()
for name, n, seed in (("ttrain", 800, 1), ("tvalid", 30, 2)):
    rng = random.Random(seed)
    with open(f"{w}/{name}.tsv", "w") as f:
        for _ in range(n):
            idx = [rng.randrange(len(EN)) for _ in range(rng.randint(2, 7))]
            f.write(" ".join(EN[i] for i in idx) + "\t" + " ".join(ES[i] for i in reversed(idx)) + "\n")
rng = random.Random(1)
POS, NEG = ["love", "好", "yes", "ok"], ["stop", "不", "run", "dog"]
FILL = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "hello", "world", "今天", "天气"]
for name, n in (("ftrain", 160), ("fval", 40)):
    with open(f"{w}/{name}.jsonl", "w") as f:
        for _ in range(n):
            y = rng.randint(0, 1); ws = [rng.choice(FILL) for _ in range(rng.randint(2, 8))]
            ws.insert(rng.randint(0, len(ws)), rng.choice(POS if y else NEG))
            f.write(json.dumps({"sentence": " ".join(ws), "label": "positive" if y else "negative"}, ensure_ascii=False) + "\n")
PY
cut -f1 "$w/tvalid.tsv" > "$w/src.txt"

for task in clm mlm; do
  echo "train $task"
  for v in base new; do
    run $v train --data "$w/lm.txt" --out "$w/$task-$v" --task $task --steps 40 --batch 8 --seq 64 --layers 2 --hidden 64 \
      --heads 2 --ff 128 --eval-every 10 --save-every 15 --dropout 0.1 --sample-tokens 0 --no-progress 2> "$w/$task-$v.log"
  done
  same_metrics "$w/$task-base/metrics.jsonl" "$w/$task-new/metrics.jsonl"
  same "$w/$task-base/step-000040/model.safetensors" "$w/$task-new/step-000040/model.safetensors"
done
echo "eval"
for v in base new; do run $v eval --model "$w/clm-base/step-000040" --data "$w/lm.txt" --seq 64 > "$w/e-$v.txt"; done
same "$w/e-base.txt" "$w/e-new.txt" "eval"
echo "generate (greedy, beam 4)"
for flags in "--temperature 0" "--beam 4"; do
  if ! run base generate --model "$w/clm-base/step-000040" --prompt "the river " --tokens 40 $flags > "$w/g-base.txt" 2> /dev/null; then
    echo "  the base build does not take generate $flags: skipped"; continue
  fi
  run new generate --model "$w/clm-new/step-000040" --prompt "the river " --tokens 40 $flags > "$w/g-new.txt"
  same "$w/g-base.txt" "$w/g-new.txt" "generate $flags"
done
if [ -d "$fixture" ]; then
  echo "finetune"
  for v in base new; do
    run $v finetune --model "$fixture" --max-length 24 --batch 8 --dropout 0.1 --no-progress --lr 5e-4 --train "$w/ftrain.jsonl" \
      --validation "$w/fval.jsonl" --test "$w/fval.jsonl" --predict --epochs 4 --eval-every 10 --patience 3 --out "$w/ft-$v" \
      > /dev/null 2> "$w/ft-$v.log"
  done
  same_metrics "$w/ft-base/metrics.jsonl" "$w/ft-new/metrics.jsonl"
  same "$w/ft-base/best/model.safetensors" "$w/ft-new/best/model.safetensors"
  same "$w/ft-base/predictions.jsonl" "$w/ft-new/predictions.jsonl"
  echo "classify"
  cut -c1-60 "$w/fval.jsonl" | sed 's/[{}"]//g' > "$w/ctext.txt"
  for v in base new; do run $v classify --model "$w/ft-base/best" --input "$w/ctext.txt" > "$w/c-$v.txt"; done
  # Scores to fp32 rounding, labels exactly: the sequence-classification head runs batched inside the
  # model, where the base build may have run it one row at a time.
  python3 - "$w/c-base.txt" "$w/c-new.txt" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:])
worst = max(abs(p - q) for x, y in zip(a, b) for p, q in zip(x["scores"], y["scores"]))
if len(a) != len(b) or any(x["label"] != y["label"] for x, y in zip(a, b)) or worst > 1e-6:
    sys.exit(f"classify differs: {len(a)} vs {len(b)} lines, largest score difference {worst:.3g}")
print(f"  classify: {len(a)} labels identical, scores within {worst:.2g}")
PY
  echo "train mlm --init-from"
  for v in base new; do
    run $v train --data "$w/lm.txt" --out "$w/init-$v" --task mlm --init-from "$fixture" --steps 20 --batch 8 --seq 32 \
      --eval-every 10 --sample-tokens 0 --no-progress 2> "$w/init-$v.log"
  done
  same_metrics "$w/init-base/metrics.jsonl" "$w/init-new/metrics.jsonl"
  same "$w/init-base/step-000020/model.safetensors" "$w/init-new/step-000020/model.safetensors"
fi
echo "translate-train"
for v in base new; do
  run $v translate-train --train "$w/ttrain.tsv" --validation "$w/tvalid.tsv" --vocab-size 40 --layers 2 --hidden 32 --heads 4 \
    --ff 64 --max-positions 32 --max-tokens 256 --keep-checkpoints 2 --bleu-sentences 16 --bleu-beam 4 --dropout 0.1 \
    --no-progress --warmup 10 --lr 3e-3 --eval-every 20 --steps 60 --out "$w/tr-$v" > /dev/null 2> "$w/tr-$v.log"
done
same_metrics "$w/tr-base/metrics.jsonl" "$w/tr-new/metrics.jsonl"
same "$w/tr-base/step-000060/model.safetensors" "$w/tr-new/step-000060/model.safetensors"
echo "translate"
for flags in "--beam 4" "--beam 4 --nbest 3 --scores" "--beam 1 --scores" "--beam 5 --length-penalty 0.6 --no-repeat-ngram-size 2 --scores" \
             "--beam 4 --early-stopping --nbest 2 --scores" "--beam 1 --sample --temperature 1.3 --top-k 5 --seed 7 --scores" \
             "--beam 3 --batch 7 --scores"; do
  for v in base new; do run $v translate --model "$w/tr-base/step-000060" --input "$w/src.txt" $flags > "$w/t-$v.txt"; done
  same "$w/t-base.txt" "$w/t-new.txt" "translate $flags"
done
echo "identical"
