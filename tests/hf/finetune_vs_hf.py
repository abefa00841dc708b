"""Fine-tunes the roformer-hf case1 fixture with `roformer finetune` on generated tasks and checks each
result against transformers 4.40.2's RoFormerForSequenceClassification.from_pretrained(out/best):
  - single-label classification on word cues, regression on a score, multi-label on two cues, a
    sentence-pair task, and a long-text task fine-tuned at --max-length 96, past the fixture's 64
    positions (plain RoPE extrapolation: the saved config declares 96);
  - transformers loads the same id2label, label2id and problem_type, and gives the logits of our
    out/predictions.jsonl on the test texts (|ours - HF| <= 1e-5 + 1e-4·|HF|);
  - transformers' loss on the validation set (labels given to the model) equals our val_loss at the
    best step (relative 1e-4);
  - `roformer classify` (--pairs for the pair task) serves out/best with the scores of transformers'
    logits: softmax for single-label, sigmoid for multi-label, the raw score for regression;
  - the single-label, pair and long-text runs learn their task (validation accuracy >= 0.9).
Usage: finetune_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import random
import re
import subprocess
import sys

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from transformers import RoFormerForSequenceClassification, RoFormerTokenizer

roformer, fixtures, work = sys.argv[1:4]
model_dir = f"{fixtures}/case1_mlm_basic"
POS, NEG = ["love", "好", "yes", "ok"], ["stop", "不", "run", "dog"]
FILL = ["the", "quick", "brown", "fox", "jump", "over", "lazy", "hello", "world", "he", "said", "今天", "天气", "我们"]


def example(rng, words_min=2, words_max=9, cues=1):
    y = rng.randint(0, 1)
    words = [rng.choice(FILL) for _ in range(rng.randint(words_min, words_max))]
    for _ in range(cues):
        words.insert(rng.randint(0, len(words)), rng.choice(POS if y else NEG))
    tags = [t for t, cue in (("animal", "dog"), ("greeting", "hello")) if cue in words]
    # The pair task's label is the cue of the second text: only a model that reads it can learn it.
    y2 = rng.randint(0, 1)
    second = [rng.choice(FILL) for _ in range(rng.randint(1, 5))]
    second.insert(rng.randint(0, len(second)), rng.choice(POS if y2 else NEG))
    return {"sentence": " ".join(words), "label": "positive" if y else "negative",
            "score": round(y * 2.0 + rng.random() * 0.5, 3), "tags": tags or ["none"],
            "second": " ".join(second), "second_label": "positive" if y2 else "negative"}


def write_split(prefix, rng, **lengths):
    for name, n in (("train", 240), ("val", 60), ("test", 25)):
        with open(f"{work}/{prefix}{name}.jsonl", "w", encoding="utf-8") as f:
            for _ in range(n):
                f.write(json.dumps(example(rng, **lengths), ensure_ascii=False) + "\n")


write_split("", random.Random(0))
write_split("long_", random.Random(1), words_min=40, words_max=80, cues=3)  # 60-100 tokens: past 64 positions

# name, label column, problem type, data prefix, pair column, max length, epochs
RUNS = [("single", "label", "single_label_classification", "", None, 32, 4),
        ("regression", "score", "regression", "", None, 32, 4),
        ("multi", "tags", "multi_label_classification", "", None, 32, 4),
        ("pair", "second_label", "single_label_classification", "", "second", 32, 6),
        ("long", "label", "single_label_classification", "long_", None, 96, 8)]
SCORE = {"single_label_classification": lambda z: torch.softmax(z, -1),
         "multi_label_classification": torch.sigmoid, "regression": lambda z: z}


def rows(path):
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def encode(tokenizer, batch, pair, max_length):
    first = [r["sentence"] for r in batch]
    second = [r[pair] for r in batch] if pair else None
    return tokenizer(first, second, truncation=True, max_length=max_length, padding=True, return_tensors="pt")


def labels_tensor(config, batch, column, problem):
    if problem == "regression":
        return torch.tensor([[r[column]] for r in batch], dtype=torch.float32)
    if problem == "multi_label_classification":
        names = [config.id2label[i] for i in range(config.num_labels)]
        return torch.tensor([[float(name in r[column]) for name in names] for r in batch])
    return torch.tensor([config.label2id[r[column]] for r in batch])


def relative_error(ours, theirs):
    return max(abs(a - b) / (1e-5 + 1e-4 * abs(b)) for a, b in zip(ours, theirs))


def check(name, column, problem, prefix, pair, max_length, epochs):
    out = f"{work}/{name}"
    cmd = [roformer, "finetune", "--model", model_dir, "--train", f"{work}/{prefix}train.jsonl", "--validation",
           f"{work}/{prefix}val.jsonl", "--test", f"{work}/{prefix}test.jsonl", "--predict", "--out", out,
           "--label-column", column, "--epochs", str(epochs), "--batch", "16", "--lr", "1e-3", "--max-length",
           str(max_length), "--no-progress", "--text-column", "sentence"]
    if pair:
        cmd += ["--text-pair-column", pair]
    log = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True).stderr
    best_step = int(re.search(r"at step (\d+), saved in", log).group(1))
    config = json.load(open(f"{out}/best/config.json"))
    errors = []
    if config["problem_type"] != problem:
        errors.append(f"problem_type {config['problem_type']}")
    if config["max_position_embeddings"] != max(64, max_length):
        errors.append(f"max_position_embeddings {config['max_position_embeddings']}, expected {max(64, max_length)}")
    model = RoFormerForSequenceClassification.from_pretrained(f"{out}/best").eval()
    tokenizer = RoFormerTokenizer.from_pretrained(f"{out}/best")
    if (model.config.problem_type, model.config.id2label, model.config.label2id) != \
            (problem, {int(k): v for k, v in config["id2label"].items()}, config["label2id"]):
        errors.append("transformers reads other labels or problem_type")
    test, val = rows(f"{work}/{prefix}test.jsonl"), rows(f"{work}/{prefix}val.jsonl")
    ours = rows(f"{out}/predictions.jsonl")
    with torch.no_grad():
        logits = model(**encode(tokenizer, test, pair, max_length)).logits
        hf_loss = model(**encode(tokenizer, val, pair, max_length),
                        labels=labels_tensor(model.config, val, column, problem)).loss.item()
    worst = max(relative_error(p["logits"], z.tolist())
                for p, z in zip(ours, logits))
    # `roformer classify` on the test inputs (its max length is the model's: no truncation needed here).
    lines = [json.dumps({"text": r["sentence"], "text_pair": r[pair]} if pair else {"text": r["sentence"]},
                        ensure_ascii=False) for r in test]
    served = subprocess.run([roformer, "classify", "--model", f"{out}/best"] + (["--pairs"] if pair else []),
                            input="\n".join(lines) + "\n", check=True, stdout=subprocess.PIPE, text=True).stdout
    served = [json.loads(line) for line in served.splitlines()]
    worst_served = max(relative_error(s["values" if problem == "regression" else "probabilities"], SCORE[problem](z).tolist()) for s, z in zip(served, logits))
    evals = [m for m in rows(f"{out}/metrics.jsonl") if "val_loss" in m]
    ours_loss = next(m["val_loss"] for m in evals if m["step"] == best_step)
    loss_error = abs(ours_loss - hf_loss) / abs(hf_loss)
    print(f"{name} ({problem}): worst |ours-HF| / (1e-5 + 1e-4|HF|): predictions {worst:.3f}, classify "
          f"{worst_served:.3f}; validation loss at step {best_step} ours {ours_loss:.6f} HF {hf_loss:.6f}; "
          f"best validation {({k: round(v, 4) for k, v in evals[-1].items() if k.startswith('val_')})}")
    if worst > 1 or len(ours) != len(test):
        errors.append("predictions differ from transformers' logits")
    if worst_served > 1 or len(served) != len(test):
        errors.append("roformer classify differs from transformers' scores")
    if loss_error > 1e-4:
        errors.append(f"validation loss differs from transformers' (relative {loss_error:.1e})")
    if problem == "single_label_classification" and max(m["val_accuracy"] for m in evals) < 0.9:
        errors.append("the task was not learned (validation accuracy < 0.9)")
    for e in errors:
        print(f"FAIL: {name}: {e}")
    return len(errors)


sys.exit(1 if sum(check(*run) for run in RUNS) else 0)
