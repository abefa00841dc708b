#!/usr/bin/env python3
"""roformer.rope called from PyTorch, side by side in one run with PyTorch's best formulation and with
the C benchmark (`roformer bench rope --json`): the call overhead of the Python binding and its speed-up
over PyTorch, on the shapes of `roformer bench rope` (bench/peers/rope_torch.py has the formulas).

    roformer bench rope --json > ours.json
    build/py-venv/bin/python bench/peers/rope_python.py --ours ours.json

Per case (prefill: q and k [1, 4096, 32, 128] at positions 0..; decode: [1, 16, 32, 128] at 4000..),
dtype (f32, bf16) and threads (1, 2), interleaved pairs, forward, q and k:
  python   roformer.rope.apply_qk(q, k, config=..., start=..., inplace=True, threads=T), with a table
           plan (rope.Config(128, table_positions=8192)) and computing cos/sin on the fly
  C        our in-place result for the same case in ours.json, same mode
  torch    the fastest of rope_torch.py's PyTorch variants (out of place, as PyTorch has no in-place RoPE),
           torch.compile's among them with --compile
`--overhead` prints the cost of a whole call on [1, 1, 1, 128] tensors (torch and NumPy) and of the
decode case at threads=1 and 2 instead (best of 5 × 20,000 calls; OMP_WAIT_POLICY from the environment).
Ratios: python/C, fastest repetition against the C benchmark's fastest, same mode (target: prefill
within 1.10), and torch/python, median against median (target: decode at least 5).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rope_torch as peer  # noqa: E402  (sets OMP_WAIT_POLICY before importing torch)
from rope_torch import torch  # noqa: E402

from roformer import rope  # noqa: E402


MODES = {"table": rope.Config(peer.HEAD_DIM, table_positions=8192), "on_the_fly": rope.Config(peer.HEAD_DIM)}


def time_ours(case, dname, threads, mode, args):
    tokens, pos0 = peer.CASES[case]
    torch.set_num_threads(threads)
    q = torch.randn(1, tokens, peer.HEADS, peer.HEAD_DIM).to(peer.DTYPES[dname])
    k = torch.randn(1, tokens, peer.HEADS, peer.HEAD_DIM).to(peer.DTYPES[dname])
    cfg = MODES[mode]
    call = lambda: rope.apply_qk(q, k, config=cfg, start=pos0, inplace=True, threads=threads)  # noqa: E731
    med, mn, reps, inner = peer.time_fn(call, args.reps, args.warmup, args.min_rep_s, args.max_config_s)
    return med, mn


def overhead():
    import time
    import numpy as np

    def best_us(fn, n=20000):
        for _ in range(1000):
            fn()
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
        return best * 1e6

    cfg = MODES["table"]
    tiny = {"torch": (torch.randn(1, 1, 1, 128), torch.randn(1, 1, 1, 128)),
            "numpy": (np.ones((1, 1, 1, 128), np.float32), np.ones((1, 1, 1, 128), np.float32))}
    torch.set_num_threads(1)
    for name, (q, k) in tiny.items():
        us = best_us(lambda: rope.apply_qk(q, k, config=cfg, start=4000, inplace=True, threads=1))
        print(f"[1, 1, 1, 128] {name}: {us:.2f} us a call")
    q, k = (torch.randn(1, 16, 32, peer.HEAD_DIM) for _ in range(2))
    for threads in (1, 2):
        torch.set_num_threads(threads)
        us = best_us(lambda: rope.apply_qk(q, k, config=cfg, start=4000, inplace=True, threads=threads), 5000)
        print(f"decode f32 table, threads={threads}: {us:.2f} us a call "
              f"(OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')})")


def row(case, dname, threads, mode, t, ours, args):
    """One line of the table: our Python call, the C result in the same mode, PyTorch's best (t)."""
    py_med, py = time_ours(case, dname, threads, mode, args)
    same_mode = [r for r in ours["results"] if r.get("mode") == mode] if ours else []
    c = peer.match_ours({"results": same_mode}, t, True) if same_mode else None
    c_ms = peer._ms(c) if c else None
    nan = float("nan")
    print(f"{case:<8} {dname:<5} {threads:>3} {mode:<10} {py:>10.4f} {c_ms or nan:>9.4f} "
          f"{(py / c_ms) if c_ms else nan:>6.2f} {py_med:>9.4f} {t['ms']:>9.4f} {t['ms'] / py_med:>8.1f}")
    return {"case": case, "dtype": dname, "threads": threads, "mode": mode, "python_ms": py,
            "python_median_ms": py_med, "c_ms": c_ms, "torch_median_ms": t["ms"], "torch_variant": t["variant"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="roformer bench rope --json output")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the table as JSON here")
    ap.add_argument("--overhead", action="store_true", help="per-call cost only (see above)")
    ap.add_argument("--compile", action="store_true", help="PyTorch's variants include torch.compile (>= 2.0)")
    args = ap.parse_args()
    if args.compile:
        peer.add_compiled_variants()
    if args.overhead:
        return overhead()
    args.reps, args.warmup, args.min_rep_s, args.max_config_s = (3, 1, 0.001, 0.5) if args.quick else (15, 3, 0.002, 3.0)
    ours = peer.load_ours(args.ours) if args.ours else None
    print(f"roformer.rope {rope.version()} on {rope.cpu_target()}, torch {torch.__version__}")
    print(f"{'case':<8} {'dtype':<5} {'thr':>3} {'mode':<10} {'py fastest':>10} {'C fastest':>9} {'py/C':>6} "
          f"{'py median':>9} {'torch med':>9} {'torch/py':>8}")
    rows = []
    # One thread first: with OMP_WAIT_POLICY=ACTIVE, workers left by a 2-thread call spin on the other
    # core and would slow every 1-thread call after it. PyTorch is timed once per case, for both modes.
    for threads in (1, 2):
        for case in ("prefill", "decode"):
            for dname in ("f32", "bf16"):
                t = peer.bench_config(case, dname, "interleaved", "fwd", threads, args)
                rows += [row(case, dname, threads, mode, t, ours, args) for mode in MODES]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
