#!/usr/bin/env python3
"""Attention peer: PyTorch 2's torch.nn.functional.scaled_dot_product_attention (SDPA; on the CPU its
flash kernel) alone, forward and forward + backward, in the units of `roformer bench attention`
(microseconds per token: the best of --repetitions calls, divided by T), so that the two can be put
side by side.

    export ROFORMER_TORCH2_PYTHON="$(scripts/torch2-env.sh)"      # PyPI's torch 2.15.0 in build/torch2-venv
    $ROFORMER_TORCH2_PYTHON bench/peers/attention_sdpa.py --json attention_sdpa.json
    $ROFORMER_TORCH2_PYTHON bench/peers/attention_sdpa.py --lengths 512 --head-dims 64 --dtypes fp32   # quick

Cases: every combination of --lengths T, --head-dims D, --masks (causal: is_causal=True; full: no
mask), --dtypes (fp32; bf16: bfloat16 q, k, v and gradient, SDPA's bf16 kernel) and --passes (forward:
under torch.inference_mode(); forward+backward: out.backward(g) into q, k, v). Batch 1 x --heads, q, k,
v, g uniform in [-0.5, 0.5), laid out (1, T, heads, D) as `roformer bench attention` lays them out and
handed to SDPA as (1, heads, T, D) views, as a model's projections would be. With --rope (the default,
as `roformer bench attention` rotates q and k inside its timing) RoFormer's rotary (interleaved pairs,
bench/peers/roformer_sdpa.py's rotate) is applied to q and k inside the timed call, and its backward
runs in autograd (a complex product in fp32, PyTorch's fastest formulation: roformer_sdpa.rotate); --no-rope times SDPA alone. Threads: --threads (torch.set_num_threads, one interop
thread). Each case reports the kernel SDPA picked (FLASH_ATTENTION, MATH, ...).

Like for like: `roformer bench attention --softmax-only --heads H --head-dim D --lengths ... --mask
causal|full --precision fp32|bf16` times one softmax layer with RoPE, forward (nothing kept) and
forward + backward (two statistics per row, memory linear in T), after one untimed call: the rows
here with --rope (ours with bf16 takes bf16 operands and fp32 accumulation on fp32 tensors).
"""
import argparse
import json
import os
import platform
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from roformer_sdpa import rotary_table, rotate, sdpa_backend  # noqa: E402

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
MASKS = ("causal", "full")
PASSES = ("forward", "forward+backward")


def csv(kind, choices=None):
    def parse(s):
        items = [kind(x) for x in s.split(",") if x]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        for x in items:
            if choices is not None and x not in choices:
                raise argparse.ArgumentTypeError("%r is not one of %s" % (x, ", ".join(choices)))
        return items
    return parse


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--lengths", type=csv(int), default=[512, 1024, 2048, 4096, 8192, 16384], help="tokens T")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dims", type=csv(int), default=[64, 128], help="head dimensions D (even)")
    ap.add_argument("--masks", type=csv(str, MASKS), default=list(MASKS))
    ap.add_argument("--dtypes", type=csv(str, tuple(DTYPES)), default=list(DTYPES))
    ap.add_argument("--passes", type=csv(str, PASSES), default=list(PASSES))
    ap.add_argument("--rope", action=argparse.BooleanOptionalAction, default=True,
                    help="rotate q and k (RoFormer's rotary) inside the timed call, as roformer bench attention does")
    ap.add_argument("--repetitions", type=int, default=2, help="best of (as roformer bench attention's)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls before them (each case)")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--json", help="write every case here")
    args = ap.parse_args(argv)
    for T in args.lengths:
        if not 1 <= T <= 1 << 24:
            ap.error("--lengths %d: use 1 to 16777216" % T)
    for D in args.head_dims:
        if not (2 <= D <= 1024 and D % 2 == 0):
            ap.error("--head-dims %d: use an even number from 2 to 1024" % D)
    if not 1 <= args.heads <= 1024:
        ap.error("--heads %d: use 1 to 1024" % args.heads)
    if not 1 <= args.repetitions <= 100 or not 0 <= args.warmup <= 100:
        ap.error("--repetitions: 1 to 100, --warmup: 0 to 100")
    if not 1 <= args.threads <= 1024:
        ap.error("--threads %d: use 1 to 1024" % args.threads)
    return args


def uniform(seed, shape, dtype):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g, dtype=torch.float32) - 0.5).to(dtype)


def run_case(args, T, D, mask, dtype, pass_):
    """Best seconds of one call over --repetitions, and the kernel SDPA picked."""
    H, dt, causal, backward = args.heads, DTYPES[dtype], mask == "causal", pass_ == "forward+backward"
    # (1, T, H, D) as ours lays them out; SDPA gets (1, H, T, D) views.
    q, k, v, g = (uniform(s, (1, T, H, D), dt) for s in (1, 2, 3, 4))
    table = rotary_table(T, D)
    for x in (q, k, v):
        x.requires_grad_(backward)
    heads_first = lambda x: x.transpose(1, 2)
    kernel = sdpa_backend(heads_first(q), heads_first(k), heads_first(v), None, causal)

    def call():
        qh, kh = heads_first(q), heads_first(k)
        if args.rope:
            qh, kh = rotate(qh, table), rotate(kh, table)
        out = F.scaled_dot_product_attention(qh, kh, heads_first(v), is_causal=causal)
        if backward:
            out.backward(heads_first(g))
        return out

    best = float("inf")
    for r in range(args.warmup + args.repetitions):
        for x in (q, k, v):
            x.grad = None
        with torch.inference_mode(not backward):
            t0 = time.perf_counter()
            call()
            seconds = time.perf_counter() - t0
        if r >= args.warmup:
            best = min(best, seconds)
    return best, kernel


def main(args):
    if not hasattr(F, "scaled_dot_product_attention"):
        sys.exit("torch %s has no scaled_dot_product_attention (torch >= 2.0: scripts/torch2-env.sh)" % torch.__version__)
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    print("torch %s scaled_dot_product_attention, batch 1 x %d heads, %d threads, %s, RoPE %s: microseconds per "
          "token (best of %d)" % (torch.__version__, args.heads, args.threads, platform.machine(),
                                  "included" if args.rope else "left out", args.repetitions), flush=True)
    print("\n| tokens | head dim | dtype | pass | mask | µs/token | tokens/s | kernel |\n|---|---|---|---|---|---|---|---|")
    cases = []
    for D in args.head_dims:
        for dtype in args.dtypes:
            for pass_ in args.passes:
                for mask in args.masks:
                    for T in args.lengths:
                        seconds, kernel = run_case(args, T, D, mask, dtype, pass_)
                        case = {"tokens": T, "heads": args.heads, "head_dim": D, "dtype": dtype, "pass": pass_,
                                "mask": mask, "rope": args.rope, "seconds": seconds,
                                "us_per_token": seconds / T * 1e6, "tokens_per_s": T / seconds, "kernel": kernel}
                        cases.append(case)
                        print("| %d | %d | %s | %s | %s | %.2f | %.0f | %s |" % (
                            T, D, dtype, pass_, mask, case["us_per_token"], case["tokens_per_s"], kernel), flush=True)
    if args.rope:  # ours, the same rows
        for D in sorted(set(args.head_dims)):
            for mask in args.masks:
                for dtype in args.dtypes:
                    print("\nours: roformer bench attention --softmax-only --heads %d --head-dim %d --lengths %s "
                          "--mask %s --precision %s --threads %d" % (
                              args.heads, D, ",".join(map(str, args.lengths)), mask, dtype, args.threads))
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"tool": "bench/peers/attention_sdpa.py", "torch": torch.__version__, "threads": args.threads,
                       "heads": args.heads, "rope": args.rope, "repetitions": args.repetitions, "cases": cases}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
        print("wrote %s" % args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main(parse_args()))
