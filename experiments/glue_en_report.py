"""The Markdown tables of experiments/glue_en.sh: for each task and position encoding, over the seeds,
the best validation metric (the checkpoint kept in best/) and the test metric of that checkpoint's
predictions (predictions.jsonl against the test labels), as mean ± sd, plus fine-tuning speed. Where
several learning rates were run, a sweep table lists each, and the main table takes, for each task
and encoder alike, the rate with the best mean validation metric. "one class" counts the runs whose
test predictions are all one label (a run that learned nothing).
Usage: glue_en_report.py RUNS_DIR (runs/glue)."""
import glob
import json
import math
import os
import statistics
import sys

runs = sys.argv[1]
TEST = {"sst2": "data/vader-movies/test.jsonl", "stsb": "data/vader-movies/test.jsonl",
        "mrpc": "data/bible-pairs/test.jsonl"}


def pearson(a, b):
    ma, mb = statistics.fmean(a), statistics.fmean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))


def ranks(v):
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(v):
        j = i
        while j + 1 < len(v) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return r


def f1(gold, pred, positive):
    tp = sum(g == positive and p == positive for g, p in zip(gold, pred))
    fp = sum(g != positive and p == positive for g, p in zip(gold, pred))
    fn = sum(g == positive and p != positive for g, p in zip(gold, pred))
    return 2 * tp / (2 * tp + fp + fn) if tp else 0.0


def run_metrics(d, task):
    test = [json.loads(l) for l in open(TEST[task])]
    log = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    key = {"sst2": "val_accuracy", "stsb": "val_pearson", "mrpc": "val_f1"}[task]
    best_val = max(r[key] for r in log if key in r)
    tok_s = statistics.median(r["tokens_per_s"] for r in log[5:])
    pred = [json.loads(l) for l in open(os.path.join(d, "predictions.jsonl"))]
    one_class = False
    if task == "sst2":
        t = [sum(p["label"] == test[p["line"] - 1]["label"] for p in pred) / len(pred)]
        one_class = len({p["label"] for p in pred}) == 1
    elif task == "mrpc":
        gold, guess = [test[p["line"] - 1]["label"] for p in pred], [p["label"] for p in pred]
        t = [f1(gold, guess, "paraphrase"), sum(g == p for g, p in zip(gold, guess)) / len(pred)]
        one_class = len(set(guess)) == 1
    else:
        ys, ps = [test[p["line"] - 1]["score"] for p in pred], [p["score"] for p in pred]
        t = [pearson(ys, ps), pearson(ranks(ys), ranks(ps))]
    return best_val, t, tok_s, one_class


def fmt(xs):
    return f"{statistics.fmean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def runs_by_lr(task, pe):
    """{lr: [run metrics]} of the finished runs ft-TASK-PE-lrLR-SEED."""
    out = {}
    for d in sorted(glob.glob(os.path.join(runs, f"ft-{task}-{pe}-lr*-*"))):
        if not (os.path.isdir(d) and os.path.exists(os.path.join(d, "predictions.jsonl"))):
            continue
        lr = os.path.basename(d)[len(f"ft-{task}-{pe}-lr"):].rsplit("-", 1)[0]
        out.setdefault(lr, []).append(run_metrics(d, task))
    return out


def row(task, what, pe, lr, res):
    val = [r[0] for r in res]
    tests = " / ".join(fmt([r[1][i] for r in res]) for i in range(len(res[0][1])))
    name = "RoPE" if pe == "rope" else "BERT (learned)"
    one = sum(r[3] for r in res)
    return (f"| {task} ({what}) | {name} | {lr} | {len(res)} | {fmt(val)} | {tests} | {one} | "
            f"{statistics.fmean(r[2] for r in res):.0f} |")


TASKS = (("sst2", "accuracy"), ("stsb", "Pearson (test: Pearson / Spearman)"), ("mrpc", "F1 (test: F1 / accuracy)"))
found = {(task, pe): runs_by_lr(task, pe) for task, _ in TASKS for pe in ("rope", "learned")}
swept = [(task, what) for task, what in TASKS if any(len(found[(task, pe)]) > 1 for pe in ("rope", "learned"))]
if swept:
    print("Learning-rate sweep (every rate, every seed):\n")
    print("| task | position encoding | lr | seeds | best validation | test | one class | fine-tuning tok/s (1 thread) |")
    print("|---|---|---|---|---|---|---|---|")
    for task, what in swept:
        for pe in ("rope", "learned"):
            for lr, res in sorted(found[(task, pe)].items(), key=lambda kv: float(kv[0])):
                print(row(task, what, pe, lr, res))
    print("\nEach encoder at the rate with its best mean validation metric:\n")
print("| task | position encoding | lr | seeds | best validation | test | one class | fine-tuning tok/s (1 thread) |")
print("|---|---|---|---|---|---|---|---|")
for task, what in TASKS:
    for pe in ("rope", "learned"):
        by_lr = found[(task, pe)]
        if not by_lr:
            continue
        lr, res = max(by_lr.items(), key=lambda kv: statistics.fmean(r[0] for r in kv[1]))
        print(row(task, what, pe, lr, res))
