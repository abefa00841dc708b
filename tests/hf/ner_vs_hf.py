"""`roformer finetune --task token-classification` against transformers 4.40.2 and seqeval 1.2.2, on a
generated entity task over the roformer-hf case1 fixture (entities: "hello world" GRT, "dog run" ANI,
"dog" alone ANI 70% of the time (so that no model is perfect), "今天" DAY; the rest O):
  - out/best loads with RoFormerForTokenClassification.from_pretrained (no weight missing or new) with
    our id2label;
  - transformers' logits on the validation words (each word tokenised on its own, [CLS] ... [SEP],
    the first sub-token's prediction) give seqeval scores equal to our metrics at the best step:
    precision, recall, f1, accuracy (default mode) and the strict IOB2 ones;
  - our out/predictions.jsonl holds transformers' tag for every test word, and out/test_metrics.json
    seqeval's scores of those tags;
  - the run learns the task (validation f1 >= 0.8).
Usage: ner_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import random
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from seqeval.metrics import accuracy_score, f1_score, precision_score, recall_score
from seqeval.scheme import IOB2
from transformers import RoFormerForTokenClassification, RoFormerTokenizer

roformer, fixtures, work = sys.argv[1:4]
model_dir = f"{fixtures}/case1_mlm_basic"
FILL = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "he", "said", "我们", "天气", "love", "stop"]


def sentence(rng):
    words, tags = [], []
    for _ in range(rng.randint(3, 10)):
        k = rng.random()
        if k < 0.15:
            words += ["hello", "world"]
            tags += ["B-GRT", "I-GRT"]
        elif k < 0.3:
            run = rng.random() < 0.5
            words += ["dog", "run"] if run else ["dog"]
            tags += ["B-ANI", "I-ANI"] if run else ["B-ANI" if rng.random() < 0.7 else "O"]  # ambiguous
        elif k < 0.4:
            words.append("今天")
            tags.append("B-DAY")
        else:
            words.append(rng.choice(FILL))
            tags.append("O")
    return {"tokens": words, "ner_tags": tags}


rng = random.Random(0)
for name, n in (("train", 240), ("val", 60), ("test", 20)):
    with open(f"{work}/{name}.jsonl", "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(json.dumps(sentence(rng), ensure_ascii=False) + "\n")

out = f"{work}/run"
subprocess.run([roformer, "finetune", "--task", "token-classification", "--model", model_dir,
                "--train", f"{work}/train.jsonl", "--validation", f"{work}/val.jsonl", "--test", f"{work}/test.jsonl",
                "--predict", "--out", out, "--epochs", "6", "--batch", "16", "--lr", "1e-3", "--max-length", "32",
                "--threads", "1", "--no-progress"], check=True)
records = [json.loads(line) for line in open(f"{out}/metrics.jsonl") if '"val_f1"' in line]
best = {k[4:]: v for k, v in max(records, key=lambda r: r["val_f1"]).items() if k.startswith("val_")}
print("best:", {k: best[k] for k in ("f1", "precision", "recall", "accuracy", "strict_f1")})

tokenizer = RoFormerTokenizer.from_pretrained(model_dir)
model, info = RoFormerForTokenClassification.from_pretrained(f"{out}/best", output_loading_info=True)
model.eval()
failures = []
if any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")):
    failures.append(f"loading info {info}")
labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
if labels != sorted({t for r in map(json.loads, open(f"{work}/train.jsonl")) for t in r["ner_tags"]}):
    failures.append(f"id2label {labels}")


def predict(row):
    ids, first = [tokenizer.cls_token_id], []
    for word in row["tokens"]:
        pieces = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
        first.append(len(ids) if pieces else None)
        ids += pieces
    ids.append(tokenizer.sep_token_id)
    with torch.no_grad():
        z = model(input_ids=torch.tensor([ids])).logits[0]
    return [labels[int(z[i].argmax())] if i is not None else None for i in first]


val = [json.loads(line) for line in open(f"{work}/val.jsonl")]
truth = [r["ner_tags"] for r in val]
pred = [predict(r) for r in val]
want = {"precision": precision_score(truth, pred), "recall": recall_score(truth, pred), "f1": f1_score(truth, pred),
        "accuracy": accuracy_score(truth, pred),
        "strict_precision": precision_score(truth, pred, mode="strict", scheme=IOB2),
        "strict_recall": recall_score(truth, pred, mode="strict", scheme=IOB2),
        "strict_f1": f1_score(truth, pred, mode="strict", scheme=IOB2)}
for k, v in want.items():
    if abs(best[k] - v) > 1e-9:
        failures.append(f"{k}: ours {best[k]}, seqeval on transformers' predictions {v}")
ours = [json.loads(line) for line in open(f"{out}/predictions.jsonl")]
test = [json.loads(line) for line in open(f"{work}/test.jsonl")]
for row, got in zip(test, ours):
    if predict(row) != got["tags"]:
        failures.append(f"test line {got['line']}: ours {got['tags']}, transformers {predict(row)}")
if len(ours) != len(test):
    failures.append(f"{len(ours)} predictions for {len(test)} test rows")
# The labelled test file is scored too: test_metrics.json holds seqeval's scores of transformers' tags.
scored = json.load(open(f"{out}/test_metrics.json"))
truth, pred = [r["ner_tags"] for r in test], [predict(r) for r in test]
for k, v in {"precision": precision_score(truth, pred), "recall": recall_score(truth, pred), "f1": f1_score(truth, pred),
             "accuracy": accuracy_score(truth, pred), "strict_f1": f1_score(truth, pred, mode="strict", scheme=IOB2)}.items():
    if abs(scored[k] - v) > 1e-9:
        failures.append(f"test {k}: ours {scored[k]}, seqeval on transformers' predictions {v}")
if best["f1"] < 0.8:
    failures.append(f"validation f1 {best['f1']:.3f} < 0.8: the task was not learnt")
print("\n".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
