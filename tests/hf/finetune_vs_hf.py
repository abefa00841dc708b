"""Fine-tunes the roformer-hf case1 fixture with `roformer finetune` on a generated task, three times
(single-label classification on word cues, regression on a score, multi-label on two cues), and checks
that transformers 4.40.2's RoFormerForSequenceClassification.from_pretrained(out/best) gives the logits of
our out/predictions.jsonl on the test texts (|ours - HF| <= 1e-5 + 1e-4·|HF|), with the same id2label,
label2id and problem_type. The single-label run must also learn the task (validation accuracy >= 0.9).
Usage: finetune_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import random
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from transformers import RoFormerForSequenceClassification, RoFormerTokenizer

roformer, fixtures, work = sys.argv[1:4]
model_dir = f"{fixtures}/case1_mlm_basic"
POS, NEG = ["love", "好", "yes", "ok"], ["stop", "不", "run", "dog"]
FILL = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "hello", "world", "he", "said", "今天", "天气", "我们"]


def example(rng):
    y = rng.randint(0, 1)
    words = [rng.choice(FILL) for _ in range(rng.randint(2, 9))]
    words.insert(rng.randint(0, len(words)), rng.choice(POS if y else NEG))
    tags = [t for t, cue in (("animal", "dog"), ("greeting", "hello")) if cue in words]
    return {"sentence": " ".join(words), "label": "positive" if y else "negative",
            "score": round(y * 2.0 + rng.random() * 0.5, 3), "tags": tags or ["none"]}


rng = random.Random(0)
for name, n in (("train", 240), ("val", 60), ("test", 25)):
    with open(f"{work}/{name}.jsonl", "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(json.dumps(example(rng), ensure_ascii=False) + "\n")

texts = [json.loads(line)["sentence"] for line in open(f"{work}/test.jsonl", encoding="utf-8")]
tokenizer = RoFormerTokenizer.from_pretrained(model_dir)
failures = 0
for label_column, problem in (("label", "single_label_classification"), ("score", "regression"),
                              ("tags", "multi_label_classification")):
    out = f"{work}/{problem}"
    cmd = [roformer, "finetune", "--model", model_dir, "--train", f"{work}/train.jsonl", "--validation",
           f"{work}/val.jsonl", "--test", f"{work}/test.jsonl", "--predict", "--out", out, "--label-column",
           label_column, "--epochs", "4", "--batch", "16", "--lr", "1e-3", "--max-length", "32", "--no-progress"]
    subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    config = json.load(open(f"{out}/best/config.json"))
    assert config["problem_type"] == problem, config["problem_type"]
    model = RoFormerForSequenceClassification.from_pretrained(f"{out}/best").eval()
    assert model.config.problem_type == problem
    assert model.config.id2label == {int(k): v for k, v in config["id2label"].items()}
    assert model.config.label2id == config["label2id"]
    ours = [json.loads(line) for line in open(f"{out}/predictions.jsonl")]
    worst = 0.0
    with torch.no_grad():
        for text, pred in zip(texts, ours):
            enc = tokenizer(text, truncation=True, max_length=32, return_tensors="pt")
            hf = model(**enc).logits[0].tolist()
            mine = [pred["score"]] if problem == "regression" else pred["scores"]
            for a, b in zip(mine, hf):
                worst = max(worst, abs(a - b) / (1e-5 + 1e-4 * abs(b)))
    metrics = [json.loads(line) for line in open(f"{out}/metrics.jsonl")]
    evals = [m for m in metrics if "val_loss" in m]
    print(f"{problem}: {len(ours)} test texts, worst |ours-HF| / (1e-5 + 1e-4|HF|) = {worst:.3f}; "
          f"last evaluation {({k: round(v, 4) for k, v in evals[-1].items() if k.startswith('val_')})}")
    if worst > 1 or len(ours) != len(texts):
        failures += 1
        print(f"FAIL: {problem}: logits differ from transformers'")
    if problem == "single_label_classification" and max(m["val_accuracy"] for m in evals) < 0.9:
        failures += 1
        print("FAIL: the single-label task was not learned (validation accuracy < 0.9)")
sys.exit(1 if failures else 0)
