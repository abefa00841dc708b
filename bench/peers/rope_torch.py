#!/usr/bin/env python3
"""PyTorch peer benchmark for RoPE, side by side with `roformer bench rope`.

Run it with the Python interpreter that has PyTorch installed. On the Debian
dev machine that is the system interpreter carrying Debian's `python3-torch`
(and optionally `python3-numpy`), NOT the pyenv `python3` on PATH:

    /usr/bin/python3 bench/peers/rope_torch.py                 # PyTorch table only
    /usr/bin/python3 bench/peers/rope_torch.py --quick         # smoke test (few reps)
    roformer bench rope --json > ours.json
    /usr/bin/python3 bench/peers/rope_torch.py --ours ours.json --json torch.json

Only torch and the standard library are used.

What is timed (the shapes of `roformer bench rope`), tensors laid out
[batch, tokens, heads, head_dim] (cos/sin broadcast over heads):
  prefill  q and k, each [1, 4096, 32, 128], positions 0..4095
  decode   q and k, each [1,   16, 32, 128], positions 4000..4015
Formulas (forward):
  half        HF Llama `rotate_half`: q*cos + cat(-q2, q1)*sin, with cos/sin of
              shape [tokens, 128] built as cat(freqs, freqs)
  interleaved HF RoFormer apply_rotary_position_embeddings:
              q*cos_pos + stack([-q[..., 1::2], q[..., ::2]], -1).reshape_as(q)*sin_pos
Tables: cos/sin are computed in fp32 (base 10000), then cast to the tensor
dtype, as HF does; they are built outside the timed region (a cached table;
for RoFormer that includes the stack([sin, sin]) repeat of the table).
PyTorch variants (the best one per case is reported, and named):
  eager        the HF code above, out of place (allocates its result)
  out          writes into preallocated outputs: torch.mul(..., out=) then
               addcmul_ on the two halves / the even-odd lanes
  complex      (interleaved, fp32 only) Meta-Llama view_as_complex * freqs_cis
  complex_out  the same with torch.mul(..., out=) into a preallocated output
  compiled     (--compile, PyTorch >= 2.0) torch.compile of the eager formula
               (Inductor's fused C++ kernel); compiled during the warm-up calls
With --bwd, the backward direction is also timed: `autograd` (autograd.grad
through the eager graph, graph built outside the timed region) and the forward
variants with sin negated (which is what the backward of RoPE is).

Threads: 1 and 2 via torch.set_num_threads. OMP_WAIT_POLICY=PASSIVE is put
into the environment before torch is imported, unless it is already set (the
value in effect is printed), so idle OpenMP workers do not spin between ops.

Timing: per configuration, warm-up calls, then repeated timed reps; each rep
times an inner loop of calls (1 call for prefill; enough calls to last about
2 ms for decode, reporting the per-call time) so that tiny decode calls are not
dominated by timer resolution. Median and minimum ms per call are reported.
GB/s = (bytes read + bytes written of q and k) / median time, e.g. prefill
fp32: 2 tensors * 4096*32*128*4 B * 2 (read + write); tables are not counted.

--ours PATH.json takes the output of `roformer bench rope --json` and matches
each PyTorch measurement to our result of the same case, dtype, threads,
layout and direction: our out-of-place result (table mode preferred, then
on_the_fly) and our in-place one; the ratio torch/ours is the speed-up of ours
(> 1 means ours is faster). Missing fields in that file are tolerated.
"""

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

_OMP_WAIT_POLICY_PRESET = "OMP_WAIT_POLICY" in os.environ
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # must precede `import torch`

try:
    import torch  # noqa: E402
except ImportError:  # pragma: no cover - depends on the interpreter
    sys.exit("rope_torch.py: cannot import torch with %s; run it with the "
             "interpreter that has PyTorch (on Debian: /usr/bin/python3 with "
             "python3-torch installed)" % sys.executable)

BATCH, HEADS, HEAD_DIM, BASE = 1, 32, 128, 10000.0
CASES = {  # name: (tokens, first position)
    "prefill": (4096, 0),
    "decode": (16, 4000),
}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
FORMULA = {"half": "rotate_half", "interleaved": "roformer"}


# ----------------------------------------------------------------------------
# Tables (outside the timed region)
# ----------------------------------------------------------------------------

def make_tables(tokens, pos0, dtype, sin_sign=1.0):
    """cos/sin tables for both layouts, fp32 then cast to dtype, shaped to
    broadcast over [B, T, H, D] (a singleton head axis)."""
    inv_freq = 1.0 / (BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    pos = torch.arange(pos0, pos0 + tokens, dtype=torch.float32)
    freqs = torch.outer(pos, inv_freq)                       # [T, D/2]
    cos_h, sin_h = freqs.cos(), freqs.sin() * sin_sign       # [T, D/2] fp32
    t = {}
    # HF Llama: emb = cat(freqs, freqs); cos = emb.cos().to(dtype)
    t["cos_half"] = torch.cat((cos_h, cos_h), -1).to(dtype)[:, None, :]   # [T,1,D]
    t["sin_half"] = torch.cat((sin_h, sin_h), -1).to(dtype)[:, None, :]
    # HF RoFormer: sin_pos = stack([sin, sin], -1).reshape_as(sinusoidal_pos)
    t["cos_inter"] = torch.stack((cos_h, cos_h), -1).reshape(tokens, HEAD_DIM).to(dtype)[:, None, :]
    t["sin_inter"] = torch.stack((sin_h, sin_h), -1).reshape(tokens, HEAD_DIM).to(dtype)[:, None, :]
    # one value per pair, for the addcmul_ variants
    t["sin_pair"] = sin_h.to(dtype)[:, None, :]                          # [T,1,D/2]
    # Meta Llama freqs_cis (complex64), fp32 only
    t["freqs_cis"] = torch.polar(torch.ones_like(cos_h), freqs if sin_sign > 0 else -freqs)[:, None, :]
    return t


# ----------------------------------------------------------------------------
# Formulas
# ----------------------------------------------------------------------------

def rotate_half(x):
    """transformers.models.llama.modeling_llama.rotate_half"""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def half_eager(q, k, t, outs):
    cos, sin = t["cos_half"], t["sin_half"]
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def half_out(q, k, t, outs):
    cos, sin = t["cos_half"], t["sin_half"]
    h = HEAD_DIM // 2
    for x, o in ((q, outs[0]), (k, outs[1])):
        torch.mul(x, cos, out=o)
        o[..., :h].addcmul_(x[..., h:], sin[..., :h], value=-1)
        o[..., h:].addcmul_(x[..., :h], sin[..., h:])
    return outs


def inter_eager(q, k, t, outs):
    """transformers RoFormerSelfAttention.apply_rotary_position_embeddings
    (table repeat precomputed)."""
    cos_pos, sin_pos = t["cos_inter"], t["sin_inter"]
    rotate_half_q = torch.stack([-q[..., 1::2], q[..., ::2]], dim=-1).reshape_as(q)
    q = q * cos_pos + rotate_half_q * sin_pos
    rotate_half_k = torch.stack([-k[..., 1::2], k[..., ::2]], dim=-1).reshape_as(k)
    k = k * cos_pos + rotate_half_k * sin_pos
    return q, k


def inter_out(q, k, t, outs):
    cos_pos, sin = t["cos_inter"], t["sin_pair"]
    for x, o in ((q, outs[0]), (k, outs[1])):
        torch.mul(x, cos_pos, out=o)
        x2 = x.unflatten(-1, (HEAD_DIM // 2, 2))
        o2 = o.unflatten(-1, (HEAD_DIM // 2, 2))
        o2[..., 0].addcmul_(x2[..., 1], sin, value=-1)
        o2[..., 1].addcmul_(x2[..., 0], sin)
    return outs


def inter_complex(q, k, t, outs):
    """Meta Llama apply_rotary_emb (fp32)."""
    fc = t["freqs_cis"]
    qc = torch.view_as_complex(q.unflatten(-1, (HEAD_DIM // 2, 2)))
    kc = torch.view_as_complex(k.unflatten(-1, (HEAD_DIM // 2, 2)))
    return (torch.view_as_real(qc * fc).flatten(3), torch.view_as_real(kc * fc).flatten(3))


def inter_complex_out(q, k, t, outs):
    fc = t["freqs_cis"]
    for x, o in ((q, outs[0]), (k, outs[1])):
        xc = torch.view_as_complex(x.unflatten(-1, (HEAD_DIM // 2, 2)))
        torch.mul(xc, fc, out=torch.view_as_complex(o.unflatten(-1, (HEAD_DIM // 2, 2))))
    return outs


VARIANTS = {  # layout: [(name, fn, dtypes or None for all)]
    "half": [("eager", half_eager, None), ("out", half_out, None)],
    "interleaved": [("eager", inter_eager, None), ("out", inter_out, None),
                    ("complex", inter_complex, ("f32",)),
                    ("complex_out", inter_complex_out, ("f32",))],
}
EAGER = {"half": half_eager, "interleaved": inter_eager}


def add_compiled_variants():
    """The `compiled` variant of each layout: torch.compile of its eager formula (one graph per shape
    and dtype, so the cache holds every case of a run)."""
    if not hasattr(torch, "compile"):
        raise SystemExit("--compile needs PyTorch >= 2.0 (this is %s)" % torch.__version__)
    torch._dynamo.config.cache_size_limit = 64
    for layout, fn in EAGER.items():
        VARIANTS[layout].append(("compiled", torch.compile(fn, dynamic=False), None))


# ----------------------------------------------------------------------------
# Correctness check (small, fp64 reference by explicit pair rotation)
# ----------------------------------------------------------------------------

def reference(x, layout, pos0, sin_sign=1.0):
    x = x.double()
    tokens = x.shape[1]
    # the angles as HF (and the tables above) round them, in fp32; the rest in fp64
    inv_freq = 1.0 / (BASE ** (torch.arange(0, HEAD_DIM, 2, dtype=torch.float32) / HEAD_DIM))
    ang = torch.outer(torch.arange(pos0, pos0 + tokens, dtype=torch.float32), inv_freq)
    ang = ang.double()[:, None, :]
    c, s = ang.cos(), ang.sin() * sin_sign
    if layout == "half":
        a, b = x[..., :HEAD_DIM // 2], x[..., HEAD_DIM // 2:]
        return torch.cat((a * c - b * s, b * c + a * s), -1)
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack((a * c - b * s, b * c + a * s), -1).flatten(3)


def check_all(bwd):
    torch.manual_seed(0)
    tokens, pos0 = CASES["decode"]
    for dname, dtype in DTYPES.items():
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        q = torch.randn(BATCH, tokens, HEADS, HEAD_DIM).to(dtype)
        k = torch.randn(BATCH, tokens, HEADS, HEAD_DIM).to(dtype)
        for sign in ((1.0, -1.0) if bwd else (1.0,)):
            t = make_tables(tokens, pos0, dtype, sign)
            for layout, vs in VARIANTS.items():
                rq, rk = reference(q, layout, pos0, sign), reference(k, layout, pos0, sign)
                for vname, fn, only in vs:
                    if only and dname not in only:
                        continue
                    outs = (torch.empty_like(q), torch.empty_like(k))
                    oq, ok = fn(q, k, t, outs)
                    err = max((oq.double() - rq).abs().max().item(), (ok.double() - rk).abs().max().item())
                    if not err <= tol * 8:  # |x| up to ~4-5 sigma
                        raise SystemExit("correctness check failed: %s %s %s sin*%g max err %g"
                                         % (layout, dname, vname, sign, err))


# ----------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------

def time_fn(call, reps, warmup, min_rep_s, max_total_s):
    for _ in range(warmup):
        call()
    t0 = time.perf_counter()
    call()
    one = max(time.perf_counter() - t0, 1e-7)
    inner = max(1, int(math.ceil(min_rep_s / one)))
    reps = max(3, min(reps, int(max_total_s / (one * inner))))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            call()
        samples.append((time.perf_counter() - t0) * 1e3 / inner)
    return statistics.median(samples), min(samples), reps, inner


def bench_config(case, dname, layout, direction, threads, args):
    tokens, pos0 = CASES[case]
    dtype = DTYPES[dname]
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    q = torch.randn(BATCH, tokens, HEADS, HEAD_DIM).to(dtype)
    k = torch.randn(BATCH, tokens, HEADS, HEAD_DIM).to(dtype)
    outs = (torch.empty_like(q), torch.empty_like(k))
    sign = 1.0 if direction == "fwd" else -1.0
    t = make_tables(tokens, pos0, dtype, sign)
    calls = []
    for vname, fn, only in VARIANTS[layout]:
        if only and dname not in only:
            continue
        label = vname if direction == "fwd" else vname + "(-sin)"
        calls.append((label, (lambda fn=fn: fn(q, k, t, outs))))
    if direction == "bwd":
        qg, kg = q.clone().requires_grad_(), k.clone().requires_grad_()
        yq, yk = EAGER[layout](qg, kg, make_tables(tokens, pos0, dtype), None)
        gq, gk = torch.randn_like(q), torch.randn_like(k)
        calls.insert(0, ("autograd", lambda: torch.autograd.grad(
            (yq, yk), (qg, kg), (gq, gk), retain_graph=True)))
    nbytes = 2 * q.numel() * q.element_size() * 2
    variants = {}
    for label, call in calls:
        med, mn, reps, inner = time_fn(call, args.reps, args.warmup, args.min_rep_s, args.max_config_s)
        variants[label] = {"ms": med, "ms_min": mn, "reps": reps, "inner": inner}
    best = min(variants, key=lambda v: variants[v]["ms"])
    b = variants[best]
    return {
        "name": "%s/%s/%s/%s/torch_%s/t%d" % (case, dname, layout, direction, best, threads),
        "case": case, "dtype": dname, "layout": layout, "formula": FORMULA[layout],
        "direction": direction, "threads": threads, "variant": best, "inplace": False,
        "bytes": nbytes, "ms": b["ms"], "ms_min": b["ms_min"],
        "gbps": nbytes / (b["ms"] * 1e-3) / 1e9, "reps": b["reps"], "inner": b["inner"],
        "variants": variants,
    }


# ----------------------------------------------------------------------------
# Ours (roformer bench rope --json)
# ----------------------------------------------------------------------------

def load_ours(path):
    with open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict):
        doc = {"results": doc if isinstance(doc, list) else []}
    res = [r for r in (doc.get("results") or []) if isinstance(r, dict)]
    for r in res:  # fill what can be recovered from the name
        parts = str(r.get("name", "")).split("/")
        if len(parts) >= 7:
            for key, val in zip(("case", "dtype", "layout", "direction"), parts[:4]):
                r.setdefault(key, val)
            r.setdefault("inplace", parts[4] == "inplace")
            r.setdefault("mode", parts[5])
            if parts[6].startswith("t") and parts[6][1:].isdigit():
                r.setdefault("threads", int(parts[6][1:]))
    doc["results"] = res
    return doc


def _ms(r):
    try:
        v = float(r.get("ms"))
        return v if v > 0 and math.isfinite(v) else None
    except (TypeError, ValueError):
        return None


def match_ours(ours, m, inplace):
    """Best matching result of ours: table mode preferred, then any mode;
    among equals the fastest."""
    cands = [r for r in ours["results"]
             if r.get("case") == m["case"] and r.get("dtype") == m["dtype"]
             and r.get("layout") == m["layout"]
             and r.get("direction", "fwd") == m["direction"]
             and r.get("threads") == m["threads"]
             and bool(r.get("inplace")) == inplace and _ms(r) is not None]
    if not cands:
        return None
    table = [r for r in cands if r.get("mode", "table") == "table"]
    return min(table or cands, key=_ms)


# ----------------------------------------------------------------------------
# Printing
# ----------------------------------------------------------------------------

def fmt_ms(v):
    if v is None:
        return "-"
    return "%.4f" % v if v < 1 else ("%.3f" % v if v < 100 else "%.1f" % v)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="Run with /usr/bin/python3 (Debian python3-torch).")
    ap.add_argument("--ours", metavar="PATH.json", help="output of `roformer bench rope --json`")
    ap.add_argument("--json", metavar="OUT", help="write PyTorch's results as JSON to OUT")
    ap.add_argument("--quick", action="store_true", help="few reps (smoke test)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--cases", default="prefill,decode")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--layouts", default="half,interleaved")
    ap.add_argument("--bwd", action="store_true", help="also time the backward direction")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--no-check", action="store_true", help="skip the correctness check")
    ap.add_argument("--compile", action="store_true", help="add the torch.compile variant (PyTorch >= 2.0)")
    args = ap.parse_args()
    if args.compile:
        add_compiled_variants()
    args.min_rep_s, args.max_config_s = 2e-3, 1.0
    if args.quick:
        args.reps, args.warmup, args.min_rep_s, args.max_config_s = 3, 1, 5e-4, 0.3

    threads = [int(x) for x in args.threads.split(",") if x]
    cases = [c for c in args.cases.split(",") if c]
    dtypes = [d for d in args.dtypes.split(",") if d]
    layouts = [l for l in args.layouts.split(",") if l]
    for vals, known in ((cases, CASES), (dtypes, DTYPES), (layouts, VARIANTS)):
        bad = [v for v in vals if v not in known]
        if bad:
            ap.error("unknown %s (choose from %s)" % (",".join(bad), ",".join(known)))
    directions = ["fwd", "bwd"] if args.bwd else ["fwd"]

    ours = load_ours(args.ours) if args.ours else None

    print("torch %s, python %s (%s), %s, %d cpus, OMP_WAIT_POLICY=%s (%s)"
          % (torch.__version__, platform.python_version(), sys.executable, platform.machine(),
             os.cpu_count() or 0, os.environ["OMP_WAIT_POLICY"],
             "from the environment" if _OMP_WAIT_POLICY_PRESET else "set by this script"))
    if not args.no_check:
        check_all(args.bwd)
        print("correctness check vs fp64 reference: ok")
    sys.stdout.flush()

    t_start = time.perf_counter()
    results = []
    for case in cases:
        for dname in dtypes:
            for layout in layouts:
                for direction in directions:
                    for th in threads:
                        results.append(bench_config(case, dname, layout, direction, th, args))
    elapsed = time.perf_counter() - t_start

    print()
    print("PyTorch (median / min ms per call over reps; best variant named; %.0f s)" % elapsed)
    header = ["case", "dtype", "layout", "dir", "threads", "variant", "median ms", "min ms", "GB/s", "reps",
              "others (median ms)"]
    rows = []
    for m in results:
        others = ", ".join("%s %s" % (v, fmt_ms(d["ms"])) for v, d in m["variants"].items() if v != m["variant"])
        rows.append([m["case"], m["dtype"], m["layout"], m["direction"], m["threads"], m["variant"],
                     fmt_ms(m["ms"]), fmt_ms(m["ms_min"]), "%.1f" % m["gbps"],
                     "%dx%d" % (m["reps"], m["inner"]), others])
    # right-align only the numeric columns
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for r in [header, ["-" * w for w in widths]] + rows:
        print("  ".join((str(x).rjust(w) if 4 <= i <= 9 and i != 5 else str(x).ljust(w))
                        for i, (x, w) in enumerate(zip(r, widths))).rstrip())

    if ours is not None:
        print()
        def gbps(f):
            try:
                return "%.1f GB/s" % float(f["gbps"])
            except (KeyError, TypeError, ValueError):
                return "? GB/s"
        floor = ", ".join("%s t%s %s" % (f.get("name", "?"), f.get("threads", "?"), gbps(f))
                          for f in (ours.get("floor") or []) if isinstance(f, dict))
        print("Side by side with ours (%s; cpu_target %s%s)"
              % (args.ours, ours.get("cpu_target", "?"), "; floor: " + floor if floor else ""))
        print("ratio = torch ms / ours ms (> 1: ours faster); ours oop = out of place, inp = in place")
        header = ["case", "dtype", "layout", "threads", "dir", "torch ms", "ours oop ms", "ours inp ms",
                  "torch/oop", "torch/inp", "torch variant"]
        rows = []
        for m in results:
            oop, inp = match_ours(ours, m, False), match_ours(ours, m, True)
            o_ms, i_ms = (_ms(oop) if oop else None), (_ms(inp) if inp else None)
            note = m["variant"]
            if oop is not None and oop.get("mode", "table") != "table":
                note += " (ours oop: %s)" % oop.get("mode")
            rows.append([m["case"], m["dtype"], m["layout"], m["threads"], m["direction"], fmt_ms(m["ms"]),
                         fmt_ms(o_ms), fmt_ms(i_ms),
                         "%.2fx" % (m["ms"] / o_ms) if o_ms else "-",
                         "%.2fx" % (m["ms"] / i_ms) if i_ms else "-", note])
        widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
        for r in [header, ["-" * w for w in widths]] + rows:
            print("  ".join((str(x).rjust(w) if 3 <= i <= 9 and i != 4 else str(x).ljust(w))
                            for i, (x, w) in enumerate(zip(r, widths))).rstrip())
        for m in results:
            m["ours_oop_ms"] = _ms(match_ours(ours, m, False) or {})
            m["ours_inplace_ms"] = _ms(match_ours(ours, m, True) or {})

    if args.json:
        doc = {"tool": "bench/peers/rope_torch.py", "torch_version": torch.__version__,
               "python": sys.executable, "omp_wait_policy": os.environ["OMP_WAIT_POLICY"],
               "cpu_count": os.cpu_count(), "quick": args.quick,
               "shapes": {c: {"batch": BATCH, "tokens": t, "heads": HEADS, "head_dim": HEAD_DIM,
                              "first_position": p} for c, (t, p) in CASES.items()},
               "results": results}
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=1)
        print("\nwrote %s" % args.json)


if __name__ == "__main__":
    main()
