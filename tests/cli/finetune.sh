#!/usr/bin/env bash
# `roformer finetune` as a user runs it, on the roformer-hf case1 fixture and a generated task:
#  - resume is bit-exact: runs killed with SIGKILL, or stopped with SIGINT (checkpoint, exit 130), then
#    resumed end with the losses, metrics and weights (best/ and the last checkpoint) of an
#    uninterrupted run, byte for byte, also when stopped before the first evaluation and with
#    --test --predict (the same predictions);
#  - --grad-accum 3 gives the same losses within fp32 rounding; --gradient-checkpointing the same bytes;
#  - TSV and CSV inputs with a sentence-pair column train; early stopping stops after --patience;
#    --keep-checkpoints N keeps the newest N step checkpoints; --save-every N adds checkpoints between
#    evaluations; an early-stopped run resumed says it is finished;
#  - metrics.csv holds metrics.jsonl's rows; a non-finite loss stops the run with status 3;
#  - --predict writes a prediction per test row, and with --quantize int8 the same labels as fp32
#    for at least 95% of the rows and scores (logits) within 10% of the largest; a --quantize the CPU
#    cannot run is refused before training; a labelled test file is also scored (test_metrics.json: on
#    the validation file, the best evaluation's metrics);
#  - bad rows and unknown labels end with one error line naming the file and line, and status 1.
# Usage: finetune.sh ROFORMER_BINARY FIXTURES WORK_DIR
set -euo pipefail
roformer="$1"
model="$2/case1_mlm_basic"
work="$3"
rm -rf "$work"
mkdir -p "$work"
export OMP_NUM_THREADS=2
source "$(dirname "$0")/resume_lib.sh"

python3 - "$work" <<'PY'
import csv, json, random, sys
work = sys.argv[1]
rng = random.Random(1)
POS, NEG = ["love", "好", "yes", "ok"], ["stop", "不", "run", "dog"]
FILL = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "hello", "world", "he", "said", "今天", "天气"]
def row():
    y = rng.randint(0, 1)
    w = [rng.choice(FILL) for _ in range(rng.randint(2, 8))]
    w.insert(rng.randint(0, len(w)), rng.choice(POS if y else NEG))
    return {"sentence": " ".join(w), "other": rng.choice(FILL), "label": "positive" if y else "negative"}
for name, n in (("train", 160), ("val", 40)):
    rows = [row() for _ in range(n)]
    with open(f"{work}/{name}.jsonl", "w", encoding="utf-8") as f:
        for r in rows: f.write(json.dumps(r, ensure_ascii=False) + "\n")
    with open(f"{work}/{name}.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, ["sentence", "other", "label"]); w.writeheader(); w.writerows(rows)
    with open(f"{work}/{name}.tsv", "w", encoding="utf-8") as f:
        f.write("sentence\tother\tlabel\n")
        for r in rows: f.write(f"{r['sentence']}\t{r['other']}\t{r['label']}\n")
PY

common=(--model "$model" --max-length 24 --batch 8 --dropout 0.1 --no-progress)
opts=("${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 12 --eval-every 10)
fields() { grep -o '"\(step\|loss\|lr\|grad_norm\|val_[a-z0-9_]*\)":[^,}]*' "$1/metrics.jsonl"; }
echo "== uninterrupted run"
"$roformer" finetune "${opts[@]}" --out "$work/a" 2> "$work/a.log"

echo "== SIGKILL at step >= 95, then --resume"
interrupt_and_resume KILL 95 "$work/b" finetune "${opts[@]}"
echo "== SIGINT at step >= 133 (checkpoint and exit 130), then --resume"
interrupt_and_resume INT 133 "$work/c" finetune "${opts[@]}"

for run in b c; do
  diff <(fields "$work/a") <(fields "$work/$run") > /dev/null || { echo "run $run: metrics differ" >&2; exit 1; }
  cmp "$work/a/best/model.safetensors" "$work/$run/best/model.safetensors"
  cmp "$work/a/$(cat "$work/a/latest")/model.safetensors" "$work/$run/$(cat "$work/$run/latest")/model.safetensors"
done
grep -q '"val_accuracy"' "$work/a/metrics.jsonl"
[ -f "$work/a/curves.png" ]
echo "resumed runs equal the uninterrupted one"

echo "== --grad-accum 3: the same run within fp32 rounding"
"$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
  --eval-every 10 --out "$work/plain" 2> "$work/plain.log"
"$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
  --eval-every 10 --grad-accum 3 --out "$work/accum" 2> "$work/accum.log"
python3 - "$work/plain/metrics.jsonl" "$work/accum/metrics.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 40, (len(a), len(b))
worst = max(abs(x[k] - y[k]) / max(abs(x[k]), 1e-3) for x, y in zip(a, b) for k in ("loss", "val_loss") if k in x)
print(f"--grad-accum 3 vs 1: largest relative loss difference {worst:.1e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY

echo "== --gradient-checkpointing: the run of --grad-accum's plain one, byte for byte"
"$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
  --eval-every 10 --gradient-checkpointing --out "$work/checkpointed" 2> "$work/checkpointed.log"
grep -q "gradient checkpointing" "$work/checkpointed.log"
cmp <(fields "$work/plain") <(fields "$work/checkpointed")
cmp "$work/plain/best/model.safetensors" "$work/checkpointed/best/model.safetensors"

echo "== TSV and CSV sentence pairs"
for fmt in tsv csv; do
  "$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.$fmt" --validation "$work/val.$fmt" --text-pair-column other \
    --epochs 1 --out "$work/pair-$fmt" 2> "$work/pair-$fmt.log"
  grep -q "done after 20 steps" "$work/pair-$fmt.log"
done
cmp <(fields "$work/pair-tsv") <(fields "$work/pair-csv")  # the same rows give the same run

echo "== --predict in fp32 and --quantize int8"
for q in none int8; do
  "$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
    --test "$work/val.jsonl" --predict --quantize "$q" --gemm blas --out "$work/predict-$q" 2> "$work/predict-$q.log"
done
python3 - "$work/predict-none/predictions.jsonl" "$work/predict-int8/predictions.jsonl" <<'PY'
import json, sys
a, b = ([json.loads(l) for l in open(p)] for p in sys.argv[1:3])
assert len(a) == len(b) == 40, (len(a), len(b))
same = sum(x["label"] == y["label"] for x, y in zip(a, b)) / len(a)
scale = max(abs(s) for x in a for s in x["logits"])
worst = max(abs(s - t) for x, y in zip(a, b) for s, t in zip(x["logits"], y["logits"])) / scale
print(f"--predict --quantize int8: {same:.0%} of the labels equal fp32's, scores within {worst:.1%} of the largest")
assert a != b, "int8 predictions equal fp32's bit for bit: not run in int8?"
sys.exit(0 if same >= 0.95 and worst <= 0.1 else 1)
PY

echo "== a finished run predicts afterwards: --resume --test --predict gives the predictions of the run itself"
mv "$work/predict-none/predictions.jsonl" "$work/predict-none/during.jsonl"
"$roformer" finetune --resume --out "$work/predict-none" --test "$work/val.jsonl" --predict --gemm blas --no-progress \
  2> "$work/predict-after.log"
grep -q "finished at step .*: nothing to train; predicting" "$work/predict-after.log"
cmp "$work/predict-none/during.jsonl" "$work/predict-none/predictions.jsonl"
echo "== --keep-checkpoints: the newest N step checkpoints stay (2 by default), best/ apart"
"$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
  --keep-checkpoints 1 --out "$work/keep1" 2> "$work/keep1.log"
[ "$(ls -d "$work/keep1"/step-* | wc -l)" -eq 1 ] && [ -d "$work/keep1/step-000040" ] && [ -d "$work/keep1/best" ] ||
  { ls "$work/keep1" >&2; exit 1; }
[ "$(ls -d "$work/predict-none"/step-* | wc -l)" -eq 2 ] || { ls "$work/predict-none" >&2; exit 1; }
echo "== --save-every: a checkpoint every N steps besides those of the evaluations (each epoch: 20 steps)"
"$roformer" finetune "${common[@]}" --lr 5e-4 --train "$work/train.jsonl" --validation "$work/val.jsonl" --epochs 2 \
  --save-every 15 --keep-checkpoints 10 --out "$work/save15" 2> "$work/save15.log"
[ "$(cd "$work/save15" && echo step-*)" = "step-000015 step-000020 step-000030 step-000040" ] || { ls "$work/save15" >&2; exit 1; }
echo "== a labelled --test is scored too: on the validation file, the best evaluation's metrics"
grep -q "val.jsonl (.*best): accuracy " "$work/predict-after.log"
python3 - "$work/predict-none" <<'PY'
import json, sys
run = sys.argv[1]
test = json.load(open(f"{run}/test_metrics.json"))
evals = [r for r in map(json.loads, open(f"{run}/metrics.jsonl")) if "val_accuracy" in r]
best = max(evals, key=lambda r: r["val_accuracy"])  # the first of the best, as the run keeps it
want = {k[4:]: v for k, v in best.items() if k.startswith("val_") and k != "val_loss"}
assert set(test) == set(want), (test, want)
worst = max(abs(test[k] - want[k]) for k in want)
print(f"test_metrics.json: {test}; largest difference from the best evaluation {worst:.1e}")
assert worst <= 1e-9, (test, want)
PY
if "$roformer" finetune --resume --out "$work/predict-none" --lr 1 2> "$work/predict-lr.log"; then exit 1; fi
grep -q -- "--lr cannot change them" "$work/predict-lr.log"

echo "== SIGINT before the first evaluation (no best yet), then --resume: the same run and predictions"
for _ in $(seq 10); do cat "$work/train.jsonl"; done > "$work/train10.jsonl"  # 200 steps to the first evaluation
long=("${common[@]}" --lr 5e-4 --train "$work/train10.jsonl" --validation "$work/val.jsonl" --epochs 1 --test "$work/val.jsonl" --predict)
"$roformer" finetune "${long[@]}" --out "$work/long" 2> "$work/long.log"
interrupt_and_resume INT 5 "$work/long-resumed" finetune "${long[@]}"
stopped_at=$(grep -o "interrupted at step [0-9]*" "$work/long-resumed.log" | grep -o "[0-9]*$")
[ "$stopped_at" -lt 200 ] || { echo "stopped at step $stopped_at, not before the first evaluation" >&2; exit 1; }
cmp <(fields "$work/long") <(fields "$work/long-resumed")
cmp "$work/long/predictions.jsonl" "$work/long-resumed/predictions.jsonl"

echo "== early stopping: no progress at lr 1e-12, patience 1"
"$roformer" finetune "${common[@]}" --train "$work/train.jsonl" --validation "$work/val.jsonl" --lr 1e-12 \
  --epochs 10 --eval-every 5 --patience 1 --metric accuracy --out "$work/early" 2> "$work/early.log"
grep -q "stopped early after 10 steps" "$work/early.log"
"$roformer" finetune --resume --out "$work/early" 2> "$work/early-resume.log"
grep -q "finished at step 10 (stopped early): nothing to train" "$work/early-resume.log"

echo "== metrics.csv holds the rows of metrics.jsonl"
python3 - "$work/a" <<'PY'
import csv, json, sys
jsonl = [json.loads(l) for l in open(f"{sys.argv[1]}/metrics.jsonl")]
rows = list(csv.DictReader(open(f"{sys.argv[1]}/metrics.csv")))
assert len(rows) == len(jsonl) and rows, (len(rows), len(jsonl))
for j, r in zip(jsonl, rows):
    for k, v in j.items():
        if isinstance(v, (int, float)) and r.get(k) not in (None, ""):
            assert abs(float(r[k]) - v) <= 1e-5 * abs(v) + 1e-12, (k, r[k], v)  # CSV: 6 significant digits
    assert int(r["step"]) == j["step"]
print(f"metrics.csv: {len(rows)} rows equal metrics.jsonl")
PY

echo "== divergence: a non-finite loss stops fine-tuning with status 3"
status=0
"$roformer" finetune "${common[@]}" --train "$work/train.jsonl" --validation "$work/val.jsonl" --lr 1e30 \
  --warmup-ratio 0 --clip 0 --epochs 2 --eval-every 5 --out "$work/nan" 2> "$work/nan.log" || status=$?
[ "$status" -eq 3 ] || { echo "divergence: expected status 3, got $status" >&2; cat "$work/nan.log" >&2; exit 1; }
grep -E "became (NaN|infinite) at step [0-9]+; stopping. The last good checkpoint is " "$work/nan.log"

expect_error() {  # expected message, then the arguments
  local want="$1" status=0
  shift
  "$roformer" finetune "${common[@]}" --epochs 1 "$@" > "$work/err.out" 2> "$work/err.log" || status=$?
  [ "$status" -eq 1 ] || { echo "expected status 1, got $status: $*" >&2; cat "$work/err.log" >&2; exit 1; }
  [ "$(wc -l < "$work/err.log")" -eq 1 ] || { echo "expected one error line:" >&2; cat "$work/err.log" >&2; exit 1; }
  grep -qF -- "$want" "$work/err.log" || { echo "expected '$want' in:" >&2; cat "$work/err.log" >&2; exit 1; }
}
echo "== bad input"
{ head -2 "$work/train.jsonl"; echo '{"sentence": "broken'; } > "$work/bad.jsonl"
expect_error "bad.jsonl:3: not valid JSON" --train "$work/bad.jsonl" --validation "$work/val.jsonl" --out "$work/e1"
{ head -3 "$work/train.csv"; echo 'one,two'; } > "$work/bad.csv"
expect_error "bad.csv:4: 2 fields, but the header has 3" --train "$work/bad.csv" --validation "$work/val.csv" --out "$work/e2"
{ head -1 "$work/val.jsonl"; echo '{"sentence": "he said", "label": "maybe"}'; } > "$work/unknown.jsonl"
expect_error "unknown.jsonl:2: label 'maybe' is not one of the model's labels" \
  --train "$work/train.jsonl" --validation "$work/unknown.jsonl" --out "$work/e3"
expect_error "the header has no column 'text'" --train "$work/train.tsv" --validation "$work/val.tsv" \
  --text-column text --out "$work/e4"
expect_error "train.jsonl.txt: unknown data format" --train "$work/train.jsonl.txt" --validation "$work/val.jsonl" --out "$work/e5"
# Empty label lists (a multi-label row with no label set) no longer crash; a file with no label at all is refused.
sed 's/"label": "[a-z]*"/"label": []/' "$work/train.jsonl" > "$work/nolabels.jsonl"
expect_error "nolabels.jsonl: no row has a label" --train "$work/nolabels.jsonl" --validation "$work/val.jsonl" --out "$work/e7"
# An epoch count whose steps overflow (found by cli_fuzz) names --epochs and the most that works.
status=0
"$roformer" finetune "${common[@]}" --train "$work/train.jsonl" --validation "$work/val.jsonl" \
  --epochs 9223372036854775807 --out "$work/e8" 2> "$work/err.log" || status=$?
[ "$status" -eq 1 ] && [ "$(wc -l < "$work/err.log")" -eq 1 ] || { cat "$work/err.log" >&2; exit 1; }
grep -qF -- "--epochs 9223372036854775807: " "$work/err.log" || { cat "$work/err.log" >&2; exit 1; }
grep -qE -- "steps per epoch make more than 2\^40 steps; at most [0-9]+ epochs" "$work/err.log" || { cat "$work/err.log" >&2; exit 1; }
# A precision this CPU cannot run is refused before training, not when the predictions are due.
ONEDNN_MAX_CPU_ISA=AVX2 expect_error "--quantize bf16: this CPU has no native bf16" --train "$work/train.jsonl" \
  --validation "$work/val.jsonl" --test "$work/val.jsonl" --predict --quantize bf16 --out "$work/e6"
[ ! -e "$work/e6" ] || { echo "a refused run wrote $work/e6" >&2; exit 1; }
echo "all finetune checks passed"
