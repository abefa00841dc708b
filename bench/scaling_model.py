#!/usr/bin/env python3
"""The scaling model of docs/distributed.md: step time and data-parallel efficiency for N machines.

Each machine keeps a fixed local batch (weak scaling, as DDP runs: the global batch grows with N), so
its compute time per step T_c stays what one machine measures. The gradient sum is a ring allreduce:
    T_ar(N) = 2(N-1)/N * bytes / bandwidth + 2(N-1) * latency   (per bucket; buckets add latency only)
Without overlap a step takes T_c + T_ar; with the backward's buckets the sum hides behind the backward
(about 2/3 of T_c) except for the last bucket, so a step takes T_c + max(T_ar - 2/3 T_c, T_ar / buckets).
Efficiency = T_c / step time.

Usage: bench/scaling_model.py [--small-ms MS] [--base-ms MS]  (compute ms per step on one machine)
"""
import argparse

LINKS = {"10 Gb/s": 10e9 / 8, "25 Gb/s": 25e9 / 8, "100 Gb/s": 100e9 / 8}
LATENCY = 30e-6  # s per message hop: TCP on loopback measured ~30 µs for a 4 KiB allreduce (bench comm)


def allreduce_s(n, nbytes, bandwidth, buckets):
    if n == 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bandwidth + 2 * (n - 1) * LATENCY * buckets


def step_s(t_c, n, nbytes, bandwidth, buckets, overlap):
    t_ar = allreduce_s(n, nbytes, bandwidth, buckets)
    exposed = max(t_ar - 2 / 3 * t_c, t_ar / buckets) if overlap else t_ar
    return t_c + exposed


def first_below(t_c, nbytes, bandwidth, buckets, overlap, target=0.9):
    for n in range(2, 100001):
        if t_c / step_s(t_c, n, nbytes, bandwidth, buckets, overlap) < target:
            return n
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--small-ms", type=float, required=True, help="small model: compute ms per step on one machine")
    ap.add_argument("--small-params", type=int, default=3292160)
    ap.add_argument("--base-ms", type=float, required=True, help="base model: compute ms per step on one machine")
    ap.add_argument("--base-params", type=int, default=124099664)
    ap.add_argument("--bucket-mb", type=float, default=4)
    args = ap.parse_args()
    # (name, parameters, compute s per step, gradient bytes, buckets)
    models = [(name, params, ms / 1e3, 4 * params, max(1, int(4 * params / (args.bucket_mb * 2**20))))
              for name, params, ms in (("small", args.small_params, args.small_ms), ("base", args.base_params, args.base_ms))]
    print("| model | link | N | allreduce ms | step ms, no overlap | efficiency | step ms, buckets | efficiency |")
    print("|---|---|---|---|---|---|---|---|")
    for name, _, t_c, nbytes, buckets in models:
        for link, bw in LINKS.items():
            for n in (2, 8, 64):
                plain = step_s(t_c, n, nbytes, bw, buckets, False)
                over = step_s(t_c, n, nbytes, bw, buckets, True)
                print(f"| {name} | {link} | {n} | {allreduce_s(n, nbytes, bw, buckets) * 1e3:.1f} | {plain * 1e3:.0f} | "
                      f"{t_c / plain:.0%} | {over * 1e3:.0f} | {t_c / over:.0%} |")
    print()
    print("| model | link | efficiency < 90% from N (no overlap) | (buckets) |")
    print("|---|---|---|---|")
    for name, _, t_c, nbytes, buckets in models:
        for link, bw in LINKS.items():
            a = first_below(t_c, nbytes, bw, buckets, False)
            b = first_below(t_c, nbytes, bw, buckets, True)
            print(f"| {name} | {link} | {a or 'never (≤ 100000)'} | {b or 'never (≤ 100000)'} |")
    print()
    print("| model | parameters | per rank: params + grads + AdamW moments | with ZeRO-1, N = 8 | N = 64 |")
    print("|---|---|---|---|---|")
    for name, params, *_ in models:
        full = 16 * params
        z = lambda n: 8 * params + 8 * params / n
        print(f"| {name} | {params / 1e6:.1f} M | {full / 2**20:.0f} MiB | {z(8) / 2**20:.0f} MiB | {z(64) / 2**20:.0f} MiB |")


if __name__ == "__main__":
    main()
