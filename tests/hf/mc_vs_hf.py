"""`roformer finetune --task multiple-choice` against transformers 4.40.2, on a generated SWAG-style task
over the roformer-hf case1 fixture: the context names a word, and the right ending holds its partner
("hello" → "world", "dog" → "run", ...) among endings of other partners; 20% of the contexts end in a
second cue whose partner is a wrong ending (the cue's place tells them apart). Checks:
  - out/best loads with RoFormerForMultipleChoice.from_pretrained (no weight missing or new);
  - transformers' logits on the validation set, batched and padded as ours (--batch examples, every row
    padded to the batch's longest: HF's SequenceSummary reads the last, padded, position), give the
    accuracy we report at the best step (to 1e-9);
  - our out/predictions.jsonl holds transformers' logits (1e-4) and argmax for every test row;
  - the run learns the task (validation accuracy >= 0.7).
Usage: mc_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import random
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from transformers import RoFormerForMultipleChoice, RoFormerTokenizer

roformer, fixtures, work = sys.argv[1:4]
model_dir = f"{fixtures}/case1_mlm_basic"
PAIRS = {"hello": "world", "dog": "run", "今天": "天气", "love": "fox", "quick": "lazy", "我们": "stop"}
FILL = ["the", "brown", "jump", "over", "he", "said"]


def row(rng):
    cue = rng.choice(list(PAIRS))
    context = " ".join([rng.choice(FILL), cue, rng.choice(FILL)])
    others = rng.sample([w for w in PAIRS.values() if w != PAIRS[cue]], 3)
    if rng.random() < 0.2:  # ambiguous: a second cue whose partner is among the endings
        context += " " + next(k for k, v in PAIRS.items() if v == others[0])
    endings = others + [PAIRS[cue]]
    rng.shuffle(endings)
    out = {"sent1": context, "sent2": rng.choice(FILL), "label": endings.index(PAIRS[cue])}
    out.update({f"ending{k}": f"{e} {rng.choice(FILL)}" for k, e in enumerate(endings)})
    return out


rng = random.Random(0)
for name, n in (("train", 300), ("val", 60), ("test", 20)):
    with open(f"{work}/{name}.jsonl", "w", encoding="utf-8") as f:
        for _ in range(n):
            f.write(json.dumps(row(rng), ensure_ascii=False) + "\n")

out, batch = f"{work}/run", 8
subprocess.run([roformer, "finetune", "--task", "multiple-choice", "--model", model_dir,
                "--train", f"{work}/train.jsonl", "--validation", f"{work}/val.jsonl", "--test", f"{work}/test.jsonl",
                "--predict", "--out", out, "--epochs", "20", "--batch", str(batch), "--lr", "1e-3", "--max-length", "32",
                "--threads", "1", "--no-progress"], check=True)
records = [json.loads(line) for line in open(f"{out}/metrics.jsonl") if '"val_accuracy"' in line]
best = max(records, key=lambda r: r["val_accuracy"])["val_accuracy"]
print("best validation accuracy:", best)

tokenizer = RoFormerTokenizer.from_pretrained(model_dir)
model, info = RoFormerForMultipleChoice.from_pretrained(f"{out}/best", output_loading_info=True)
model.eval()
failures = []
if any(info[k] for k in ("missing_keys", "unexpected_keys", "mismatched_keys")):
    failures.append(f"loading info {info}")


def logits(rows):
    """(examples, choices) scores of rows batched as ours: --batch examples, padded to the batch's longest row."""
    out = []
    for start in range(0, len(rows), batch):
        chunk = rows[start:start + batch]
        choices = sum(1 for k in chunk[0] if k.startswith("ending"))
        first = [r["sent1"] for r in chunk for _ in range(choices)]
        second = [f"{r['sent2']} {r[f'ending{k}']}" for r in chunk for k in range(choices)]
        enc = tokenizer(first, second, truncation=True, max_length=32, padding=True, return_tensors="pt")
        with torch.no_grad():
            z = model(**{k: v.view(len(chunk), choices, -1) for k, v in enc.items()}).logits
        out += z.tolist()
    return out


val = [json.loads(line) for line in open(f"{work}/val.jsonl")]
hf_val = logits(val)
accuracy = sum(max(range(len(z)), key=z.__getitem__) == r["label"] for z, r in zip(hf_val, val)) / len(val)
if abs(accuracy - best) > 1e-9:
    failures.append(f"validation accuracy: ours {best}, transformers {accuracy}")
test = [json.loads(line) for line in open(f"{work}/test.jsonl")]
ours = [json.loads(line) for line in open(f"{out}/predictions.jsonl")]
if len(ours) != len(test):
    failures.append(f"{len(ours)} predictions for {len(test)} test rows")
worst = 0.0
for z, got in zip(logits(test), ours):
    worst = max(worst, max(abs(a - b) for a, b in zip(z, got["logits"])))
    if got["label"] != max(range(len(z)), key=z.__getitem__):
        failures.append(f"test line {got['line']}: ours {got['label']}, transformers' argmax of {z}")
print(f"max |ours - transformers| over the test logits: {worst:.2e}")
if worst > 1e-4:
    failures.append(f"test logits differ by {worst:.2e}")
if best < 0.7:
    failures.append(f"validation accuracy {best:.3f} < 0.7: the task was not learnt")
print("\n".join(failures) if failures else "ok")
sys.exit(1 if failures else 0)
