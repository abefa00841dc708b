"""The Markdown table of experiments/glue_en.sh: for each task and position encoding, over the seeds,
the best validation metric (the checkpoint kept in best/) and the test metric of that checkpoint's
predictions (predictions.jsonl against the test labels), as mean ± sd, plus fine-tuning speed.
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
    if task == "sst2":
        t = [sum(p["label"] == test[p["line"] - 1]["label"] for p in pred) / len(pred)]
    elif task == "mrpc":
        gold, guess = [test[p["line"] - 1]["label"] for p in pred], [p["label"] for p in pred]
        t = [f1(gold, guess, "paraphrase"), sum(g == p for g, p in zip(gold, guess)) / len(pred)]
    else:
        ys, ps = [test[p["line"] - 1]["score"] for p in pred], [p["score"] for p in pred]
        t = [pearson(ys, ps), pearson(ranks(ys), ranks(ps))]
    return best_val, t, tok_s


def fmt(xs):
    return f"{statistics.fmean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


print("| task | position encoding | seeds | best validation | test | fine-tuning tok/s (1 thread) |")
print("|---|---|---|---|---|---|")
for task, what in (("sst2", "accuracy"), ("stsb", "Pearson (test: Pearson / Spearman)"),
                   ("mrpc", "F1 (test: F1 / accuracy)")):
    for pe in ("rope", "learned"):
        dirs = sorted(glob.glob(os.path.join(runs, f"ft-{task}-{pe}-*")))
        dirs = [d for d in dirs if os.path.isdir(d) and os.path.exists(os.path.join(d, "predictions.jsonl"))]
        if not dirs:
            continue
        res = [run_metrics(d, task) for d in dirs]
        val = [r[0] for r in res]
        tests = " / ".join(fmt([r[1][i] for r in res]) for i in range(len(res[0][1])))
        name = "RoPE" if pe == "rope" else "BERT (learned)"
        print(f"| {task} ({what}) | {name} | {len(dirs)} | {fmt(val)} | {tests} | {statistics.fmean(r[2] for r in res):.0f} |")
