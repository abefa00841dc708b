#!/usr/bin/env python3
"""Per-shape times of oneDNN's matmuls in ONEDNN_VERBOSE=1 logs, side by side: which products a training
step spends its time in, and how fast each runs in our process and in a peer's (PyTorch's bundled
oneDNN prints the same lines). Shapes are oneDNN's problem descriptors (src:weights[:dst]; ours carry
the destination, PyTorch's do not, so a shape is keyed on its first two parts). The first quarter of a
shape's calls is dropped as warm-up; the median and the sum of the rest are printed, in milliseconds.

    env -u OPENBLAS_CORETYPE ONEDNN_VERBOSE=1 OMP_NUM_THREADS=1 build/release/tools/roformer bench train \\
      --preset large --threads 1 --steps 3 --warmup 1 --precision bf16 --no-sgemm > ours.verbose
    ONEDNN_VERBOSE=1 torch-venv/bin/python bench/peers/roformer_torch.py --preset large --threads 1 \\
      --steps 3 --warmup 1 --precision bf16 > pytorch.verbose
    python3 bench/onednn_products.py ours.verbose pytorch.verbose [--min-ms 1]
"""
import argparse
import statistics
from collections import defaultdict


def products(path):
    """shape (src:weights) -> exec times in ms of every matmul line in a verbose log."""
    times = defaultdict(list)
    with open(path, errors="replace") as f:
        for line in f:
            fields = line.rstrip("\n").split(",")
            if "exec" not in fields or "matmul" not in fields:
                continue
            try:
                ms = float(fields[-1])
            except ValueError:
                continue
            times[":".join(fields[-2].split(":")[:2])].append(ms)
    return times


def kept(ms):
    return ms[len(ms) // 4:] or ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+", help="ONEDNN_VERBOSE=1 outputs")
    ap.add_argument("--min-ms", type=float, default=0.0, help="hide shapes whose total is below this in every log")
    args = ap.parse_args()
    logs = [products(p) for p in args.logs]
    shapes = sorted({s for log in logs for s in log}, key=lambda s: -max(sum(kept(log.get(s, [0]))) for log in logs))
    print("| shape | " + " | ".join(f"{p}: calls, median ms, total ms" for p in args.logs) + " |")
    print("|---|" + "---|" * len(logs))
    for s in shapes:
        if max(sum(kept(log.get(s, [0]))) for log in logs) < args.min_ms:
            continue
        cells = []
        for log in logs:
            ms = kept(log[s]) if s in log else []
            cells.append(f"{len(ms)}, {statistics.median(ms):.3f}, {sum(ms):.1f}" if ms else "—")
        print(f"| {s} | " + " | ".join(cells) + " |")
    print("| all | " + " | ".join(f"{sum(len(kept(v)) for v in log.values())} calls, "
                                   f"{sum(sum(kept(v)) for v in log.values()):.1f} ms" for log in logs) + " |")


if __name__ == "__main__":
    main()
