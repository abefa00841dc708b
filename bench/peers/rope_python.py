#!/usr/bin/env python3
"""roformer.rope called from PyTorch, side by side in one run with PyTorch's best formulation and with
the C benchmark (`roformer bench rope --json`): the call overhead of the Python binding and its speed-up
over PyTorch, on the shapes of `roformer bench rope` (bench/peers/rope_torch.py has the formulas).

    roformer bench rope --json > ours.json
    build/py-venv/bin/python bench/peers/rope_python.py --ours ours.json

Per case (prefill: q and k [1, 4096, 32, 128] at positions 0..; decode: [1, 16, 32, 128] at 4000..),
dtype (f32, bf16) and threads (1, 2), interleaved pairs, forward, q and k:
  python   roformer.rope.apply_qk(q, k, config=..., start=..., inplace=True, threads=T)
  C        our in-place result for the same case in ours.json (table mode preferred)
  torch    the fastest of rope_torch.py's PyTorch variants (out of place, as PyTorch has no in-place RoPE)
Ratios: python/C (targets: prefill within 1.10) and torch/python (target: decode at least 5).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rope_torch as peer  # noqa: E402  (sets OMP_WAIT_POLICY before importing torch)
from rope_torch import torch  # noqa: E402

from roformer import rope  # noqa: E402


def time_ours(case, dname, threads, args):
    tokens, pos0 = peer.CASES[case]
    torch.set_num_threads(threads)
    q = torch.randn(1, tokens, peer.HEADS, peer.HEAD_DIM).to(peer.DTYPES[dname])
    k = torch.randn(1, tokens, peer.HEADS, peer.HEAD_DIM).to(peer.DTYPES[dname])
    cfg = rope.Config(peer.HEAD_DIM)
    call = lambda: rope.apply_qk(q, k, config=cfg, start=pos0, inplace=True, threads=threads)  # noqa: E731
    med, mn, reps, inner = peer.time_fn(call, args.reps, args.warmup, args.min_rep_s, args.max_config_s)
    return med


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", help="roformer bench rope --json output")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="write the table as JSON here")
    args = ap.parse_args()
    args.reps, args.warmup, args.min_rep_s, args.max_config_s = (3, 1, 0.001, 0.5) if args.quick else (15, 3, 0.002, 3.0)
    ours = peer.load_ours(args.ours) if args.ours else None
    print(f"roformer.rope {rope.version()} on {rope.cpu_target()}, torch {torch.__version__}")
    print(f"{'case':<8} {'dtype':<5} {'thr':>3} {'python ms':>10} {'C ms':>9} {'py/C':>6} {'torch ms':>9} {'torch/py':>8}")
    rows = []
    for case in ("prefill", "decode"):
        for dname in ("f32", "bf16"):
            for threads in (1, 2):
                py = time_ours(case, dname, threads, args)
                t = peer.bench_config(case, dname, "interleaved", "fwd", threads, args)
                c = peer.match_ours(ours, t, True) if ours else None
                c_ms = peer._ms(c) if c else None
                rows.append({"case": case, "dtype": dname, "threads": threads, "python_ms": py, "c_ms": c_ms,
                             "torch_ms": t["ms"], "torch_variant": t["variant"]})
                print(f"{case:<8} {dname:<5} {threads:>3} {py:>10.4f} {c_ms if c_ms else float('nan'):>9.4f} "
                      f"{(py / c_ms) if c_ms else float('nan'):>6.2f} {t['ms']:>9.4f} {t['ms'] / py:>8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
