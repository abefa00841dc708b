#!/usr/bin/env python3
"""RoPE on CUDA side by side: librope's CUDA backend against the GPU peers, in one process, one timer.

Cases (float32 and bfloat16, in place and out of place; bshd, head_dim 128 fully rotated, half
(NeoX / HF Llama) layout, base 10000):
  prefill1, prefill16  q [B, 4096, 32, 128], k [B, 4096, 8, 128], positions 0..4095 (B = 1, 16)
  decode               q [64, 1, 32, 128], k [64, 1, 8, 128], every sequence at position 4000
                       (per-sequence start offsets: 64 int64 on the device)
Columns: copy (dst.copy_(src) of q and k: the floor), torch_eager (HF Llama's q*cos +
rotate_half(q)*sin), torch_compile (the same, torch.compile mode default, dynamic=False, compile
time excluded), liger (LigerRopeFunction), flash_attn_triton (flash-attn's Triton apply_rotary),
librope (ctypes, on the fly), librope_table (TABLE mode, 8192 positions), librope_graph (decode: the
librope calls in one CUDA graph, i.e. kernel time without launches). NOTES below says the rest.

Timer (the same for everyone): CUDA events around a loop of back-to-back calls on the current
stream, per-call time = loop time / calls, median of --reps loops, contenders interleaved per
round, after a warm-up. When one call's data is smaller than 4x the L2 cache the inputs rotate
among enough buffer sets to cover it, so the cache is not what is measured. Before timing, every
contender's output is checked against HF's formula in float64 (max abs diff); one beyond the
tolerance is flagged with '!' in the table and "ok": false in the JSON.

Peers without internet: Liger from .whl/liger_kernel-*.whl (extracted to a temp dir when
liger_kernel is not installed), flash-attn's rotary.py from .peers/flash_attn_rotary.py (both
git-ignored: a remote run has to carry them).

    python3 bench/peers/rope_cuda.py --librope build/release/src/rope/librope.so --json peers.json
"""
import argparse, ctypes as C, glob, importlib.util, json, math, os, subprocess, sys, tempfile, traceback, zipfile

import torch

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DEV = "cuda"
D, HQ, HK, BASE, TABLE_POS = 128, 32, 8, 10000.0, 8192
CASES = {"prefill1": (1, 4096, None), "prefill16": (16, 4096, None), "decode": (64, 1, 4000)}
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
TOL = {"f32": 1e-2, "bf16": 1e-1}  # a peer computing something else is off by O(1)
NOTES = ("us: median per call of q and k; bytes: q and k read + written once; pct_copy: copy's time / the "
         "contender's; peers' cos/sin built once outside the timed region (HF builds them once per forward for "
         "all layers) in the activations' dtype (as HF and flash-attn's RotaryEmbedding keep them); torch_eager "
         "in place = formula then copy_; liger in place only; flash_attn_triton = one apply_rotary call for q, "
         "one for k; librope computes its own angles (or reads its fp32 table); max_abs_diff: against HF's "
         "formula in float64")


# ---------------------------------------------------------------- librope's C ABI (include/rope/rope.h)
class RopeScaling(C.Structure):
    _fields_ = [("type", C.c_int), ("factor", C.c_double), ("original_max_positions", C.c_int64),
                ("attention_factor", C.c_double), ("beta_fast", C.c_double), ("beta_slow", C.c_double),
                ("extrapolation_factor", C.c_double), ("mscale", C.c_double), ("mscale_all_dim", C.c_double),
                ("truncate", C.c_int32), ("low_freq_factor", C.c_double), ("high_freq_factor", C.c_double),
                ("short_factor", C.c_void_p), ("long_factor", C.c_void_p)]

class RopeXpos(C.Structure):
    _fields_ = [("enabled", C.c_int32), ("gamma", C.c_double), ("scale_base", C.c_double)]

class RopeConfig(C.Structure):
    _fields_ = [("head_dim", C.c_int32), ("rot_dim", C.c_int32), ("rot_offset", C.c_int32), ("layout", C.c_int),
                ("base", C.c_double), ("scaling", RopeScaling), ("freq_factors", C.c_void_p), ("xpos", RopeXpos),
                ("n_axes", C.c_int32), ("axes_mode", C.c_int), ("sections", C.c_int32 * 4), ("mode", C.c_int),
                ("table_positions", C.c_int64)]

class RopeTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("dtype", C.c_int), ("n_batch", C.c_int64), ("n_tokens", C.c_int64),
                ("n_heads", C.c_int64), ("batch_stride", C.c_int64), ("token_stride", C.c_int64),
                ("head_stride", C.c_int64)]

class RopePositions(C.Structure):
    _fields_ = [("kind", C.c_int), ("start", C.c_int64), ("starts", C.c_void_p), ("ids", C.c_void_p),
                ("cu_seqlens", C.c_void_p), ("n_seqs", C.c_int64), ("seq_starts", C.c_void_p), ("index_type", C.c_int)]

class RopeExec(C.Structure):
    _fields_ = [("n_threads", C.c_int32), ("backend", C.c_int), ("stream", C.c_void_p)]

# sizeof on x86-64 / aarch64 Linux (gcc on rope.h): a field added to the header shows up here.
assert [C.sizeof(s) for s in (RopeConfig, RopeTensor, RopePositions, RopeExec)] == [208, 64, 64, 16]
ROPE_DTYPE = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
P, VP = C.POINTER, C.c_void_p
ROPE_ABI = 2  # rope.h's ROPE_ABI_VERSION of the struct definitions above


class Librope:
    def __init__(self, path):
        lib = self.lib = C.CDLL(path)
        lib.rope_last_error.restype = C.c_char_p
        lib.rope_version.restype = C.c_char_p
        # The structs above are rope.h's generation ROPE_ABI (docs/rope.md, "ABI"): the *_abi entry points.
        lib.rope_config_init_abi.argtypes = [P(RopeConfig), C.c_int32, C.c_int32]
        lib.rope_config_init_abi.restype = None
        lib.rope_plan_create_abi.argtypes = [P(RopeConfig), P(VP), C.c_int32]
        lib.rope_cuda_check.argtypes = [VP, VP]
        lib.rope_apply_qk_abi.argtypes = [VP, C.c_int, P(RopePositions), P(RopeTensor), P(RopeTensor),
                                          P(RopeTensor), P(RopeTensor), P(RopeExec), C.c_int32]
        self.version = lib.rope_version().decode()
        self.check(lib.rope_cuda_available(), "rope_cuda_available")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"{what}: status {status}: {self.lib.rope_last_error().decode()}")

    def plan(self, mode):
        cfg = RopeConfig()
        self.lib.rope_config_init_abi(C.byref(cfg), D, ROPE_ABI)
        cfg.layout, cfg.base, cfg.mode, cfg.table_positions = 1, BASE, mode, TABLE_POS if mode == 1 else 0
        plan = VP()
        self.check(self.lib.rope_plan_create_abi(C.byref(cfg), C.byref(plan), ROPE_ABI), "rope_plan_create")
        return plan

    def call(self, plan, s, starts):
        """A closure that rotates set s's q and k (in place when s has no outputs) on the stream current now."""
        def tensor(t):
            return C.byref(RopeTensor(t.data_ptr(), ROPE_DTYPE[t.dtype], t.shape[0], t.shape[1], t.shape[2],
                                      t.stride(0), t.stride(1), t.stride(2)))
        pos = C.byref(RopePositions(0, 0, starts.data_ptr() if starts is not None else None, None, None, 0, None, 0))
        args = (plan, 0, pos, tensor(s["q"]), tensor(s["qo"]) if s["qo"] is not None else None,
                tensor(s["k"]), tensor(s["ko"]) if s["ko"] is not None else None,
                C.byref(RopeExec(0, 2, torch.cuda.current_stream().cuda_stream)), ROPE_ABI)
        f, check, (q, k) = self.lib.rope_apply_qk_abi, self.check, outputs(s)
        def run():
            st = f(*args)
            if st != 0:
                check(st, "rope_apply_qk")
            return q, k
        return run


# ---------------------------------------------------------------- peers
def outputs(s):
    return (s["q"], s["k"]) if s["qo"] is None else (s["qo"], s["ko"])

def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)

def hf_rope(q, k, cos, sin):  # transformers' apply_rotary_pos_emb with bshd tensors (unsqueeze_dim=2)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

def hf_rope_(q, k, cos, sin):
    qo, ko = hf_rope(q, k, cos, sin)
    q.copy_(qo)
    k.copy_(ko)
    return q, k

def load_file(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

def load_liger():
    try:
        from liger_kernel.ops.rope import LigerRopeFunction
        import importlib.metadata
        return LigerRopeFunction, "installed " + importlib.metadata.version("liger-kernel")
    except ImportError:
        pass
    wheels = sorted(glob.glob(os.path.join(ROOT, ".whl", "liger_kernel-*.whl")))
    if not wheels:
        raise RuntimeError("liger_kernel is not installed and there is no .whl/liger_kernel-*.whl")
    tmp = tempfile.mkdtemp(prefix="liger_")
    zipfile.ZipFile(wheels[-1]).extractall(tmp)
    try:  # the package imports all of its ops; ops/rope.py alone needs only torch and triton
        sys.path.insert(0, tmp)
        from liger_kernel.ops.rope import LigerRopeFunction
    except Exception as e:
        print(f"liger: package import failed ({e!r}); loading liger_kernel/ops/rope.py alone")
        LigerRopeFunction = load_file("liger_rope", os.path.join(tmp, "liger_kernel", "ops", "rope.py")).LigerRopeFunction
    return LigerRopeFunction, os.path.basename(wheels[-1])

def load_flash():
    try:
        from flash_attn.ops.triton.rotary import apply_rotary
        return apply_rotary, "installed flash_attn"
    except ImportError:
        path = os.path.join(ROOT, ".peers", "flash_attn_rotary.py")
        return load_file("flash_attn_rotary", path).apply_rotary, path


# ---------------------------------------------------------------- one case
def cos_sin(positions, dtype64=False):
    """HF LlamaRotaryEmbedding: fp32 inv_freq and positions (float64 for the reference), emb = [f, f]."""
    dt = torch.float64 if dtype64 else torch.float32
    inv_freq = 1.0 / (BASE ** (torch.arange(0, D, 2, dtype=torch.int64, device=DEV).to(dt) / D))
    freqs = positions.to(dt)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()

def build(name, case, sets, peers, lib):
    """One closure per buffer set (each returns q_out, k_out), and how many calls one closure makes."""
    cs, fl, bf = case["cs"], case["flash_cs"], case["cs_b"]
    inplace = sets[0]["qo"] is None
    if name == "copy":
        return [lambda s=s: (s["qo2"].copy_(s["q"]), s["ko2"].copy_(s["k"])) for s in sets], 1
    if name in ("torch_eager", "torch_compile"):
        fn = hf_rope_ if inplace else hf_rope
        if name == "torch_compile":
            fn = peers["compiled_ip" if inplace else "compiled"]
        return [lambda s=s: fn(s["q"], s["k"], cs[0], cs[1]) for s in sets], 1
    if name == "liger":
        if not inplace:
            return None, 0
        f = peers["liger"]  # q as [bsz, n_heads, seq, head_dim]: our bshd storage seen through transpose(1, 2)
        def run(s):
            f.apply(s["q"].transpose(1, 2), s["k"].transpose(1, 2), bf[0], bf[1])
            return s["q"], s["k"]
        return [lambda s=s: run(s) for s in sets], 1
    if name == "flash_attn_triton":
        f, off = peers["flash"], case["starts"] if case["starts"] is not None else 0
        return [lambda s=s: (f(s["q"], fl[0], fl[1], seqlen_offsets=off, interleaved=False, inplace=inplace),
                             f(s["k"], fl[0], fl[1], seqlen_offsets=off, interleaved=False, inplace=inplace))
                for s in sets], 1
    if name.startswith("librope"):
        plan = lib.plans["librope_table" if name == "librope_table" else "librope"]
        if name != "librope_graph":
            return [lib.call(plan, s, case["starts"]) for s in sets], 1
        # No warm-up here (in place it would rotate the check set twice): the librope column ran this
        # plan before. The closures made inside the capture pass the capture stream as exec.stream.
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for r in [lib.call(plan, s, case["starts"]) for s in sets]:
                r()
        return [lambda: (g.replay(), outputs(sets[-1]))[1]], len(sets)
    raise ValueError(name)

def time_us(fns, per, reps_out, n_iter):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for i in range(n_iter):
        fns[i % len(fns)]()
    end.record()
    end.synchronize()
    reps_out.append(start.elapsed_time(end) * 1e3 / (n_iter * per))

def run_case(cname, dname, inplace, names, peers, lib, args, l2):
    B, S, start = CASES[cname]
    dtype = DTYPES[dname]
    gen = torch.Generator(device=DEV).manual_seed(1234)
    q0 = torch.randn(B, S, HQ, D, device=DEV, dtype=torch.float32, generator=gen).to(dtype)
    k0 = torch.randn(B, S, HK, D, device=DEV, dtype=torch.float32, generator=gen).to(dtype)
    io = q0.numel() * q0.element_size() + k0.numel() * k0.element_size()
    touched = io * (1 if inplace else 2)
    n_sets = 1 if touched >= 4 * l2 else min(512, math.ceil(4 * l2 / touched))
    out_like = lambda: (torch.empty_like(q0), torch.empty_like(k0))
    sets = []
    for _ in range(n_sets):
        qo2, ko2 = out_like()
        qo, ko = (None, None) if inplace else out_like()
        sets.append(dict(q=q0.clone(), k=k0.clone(), qo=qo, ko=ko, qo2=qo2, ko2=ko2))
    # positions: prefill 0..S-1 shared by the batch; decode one position per sequence
    starts = None if start is None else torch.full((B,), start, dtype=torch.int64, device=DEV)
    pos = torch.arange(S, device=DEV) if start is None else starts
    cos32, sin32 = cos_sin(pos)
    shape = (1, S, 1, D) if start is None else (B, 1, 1, D)
    tpos = torch.arange(TABLE_POS, device=DEV)
    fcos, fsin = cos_sin(tpos)
    case = dict(starts=starts,
                cs=(cos32.to(dtype).view(shape), sin32.to(dtype).view(shape)),
                cs_b=(cos32.to(dtype).view(shape[:2] + (D,)), sin32.to(dtype).view(shape[:2] + (D,))),
                flash_cs=(fcos[:, : D // 2].to(dtype).contiguous(), fsin[:, : D // 2].to(dtype).contiguous()))
    c64, s64 = (t.view(shape) for t in cos_sin(pos, dtype64=True))
    ref = hf_rope(q0.double(), k0.double(), c64, s64)
    res = dict(case=cname, dtype=dname, inplace=inplace, bytes=2 * io, n_sets=n_sets, contenders={})
    timed = {}
    for name in names:
        r = res["contenders"][name] = {}
        try:
            if name != "copy":  # correctness on a fresh copy of the inputs
                chk = dict(q=q0.clone(), k=k0.clone(), qo=None, ko=None, qo2=None, ko2=None)
                if not inplace:
                    chk["qo"], chk["ko"] = out_like()
                fns, per = build(name, case, [chk], peers, lib)
                if fns is None:
                    r["error"] = "not supported (in place only)"
                    continue
                out = fns[0]()
                torch.cuda.synchronize()
                diff = max((o.double() - rf).abs().max().item() for o, rf in zip(out, ref))
                r["max_abs_diff"], r["ok"] = diff, diff <= TOL[dname]
                if name.startswith("librope"):  # positions the kernel found out of range
                    for plan in lib.plans.values():
                        lib.check(lib.lib.rope_cuda_check(plan, None), "rope_cuda_check")
                del chk, out, fns
            fns, per = build(name, case, sets, peers, lib)
            for i in range(max(3, 2 * len(fns))):  # warm-up (compile, autotune, allocator)
                fns[i % len(fns)]()
            torch.cuda.synchronize()
            probe = []
            time_us(fns, per, probe, len(fns))
            n_iter = max(len(fns), math.ceil(args.loop_ms * 1e3 / max(probe[0] * per, 0.5) / len(fns)) * len(fns))
            timed[name] = (fns, per, n_iter, [])
        except Exception as e:
            r["error"] = f"{type(e).__name__}: {e}"
            print(f"  {cname} {dname} {name}: {r['error']}")
            traceback.print_exc(limit=2)
    del ref
    for _ in range(args.reps):  # contenders interleaved round by round
        for name, (fns, per, n_iter, reps) in list(timed.items()):
            try:
                time_us(fns, per, reps, n_iter)
            except Exception as e:
                res["contenders"][name]["error"] = f"{type(e).__name__}: {e}"
                del timed[name]
    for name, (fns, per, n_iter, reps) in timed.items():
        us = sorted(reps)[len(reps) // 2]
        res["contenders"][name].update(us=us, gbps=2 * io / us * 1e-3, n_iter=n_iter, reps_us=reps)
    copy_us = res["contenders"].get("copy", {}).get("us")
    for r in res["contenders"].values():
        if copy_us and r.get("us"):
            r["pct_copy"] = 100.0 * copy_us / r["us"]
    return res


# ---------------------------------------------------------------- main
def environment(peers):
    env = dict(torch=torch.__version__, torch_cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(),
               capability=".".join(map(str, torch.cuda.get_device_capability())), peers=peers.get("versions", {}))
    try:
        import triton
        env["triton"] = triton.__version__
    except Exception as e:
        env["triton"] = repr(e)
    try:
        env["nvidia_smi"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit",
             "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:
        env["nvidia_smi"] = repr(e)
    return env

def table(results, names):
    w = max(len(n) for n in names) + 1
    print("\nmedian µs per call (q and k); '!' = failed the float64 check; ratios of librope (on the fly)")
    print(f"{'case':<24}" + "".join(f"{n:>{w}}" for n in names) + f"{'lib/copy':>10}{'lib/best peer':>15}")
    for res in results:
        c = res["contenders"]
        cells = []
        for n in names:
            r = c.get(n, {})
            cells.append(f"{r['us']:.1f}{'' if r.get('ok', True) else '!'}" if "us" in r else "-")
        lib = c.get("librope", {}).get("us")
        peer = [r["us"] for n, r in c.items() if "us" in r and r.get("ok", True) and n not in ("copy",)
                and not n.startswith("librope")]
        ratio_copy = f"{lib / c['copy']['us']:.2f}" if lib and "us" in c.get("copy", {}) else "-"
        ratio_peer = f"{lib / min(peer):.2f}" if lib and peer else "-"
        label = f"{res['case']} {res['dtype']} {'in' if res['inplace'] else 'out'}"
        print(f"{label:<24}" + "".join(f"{x:>{w}}" for x in cells) + f"{ratio_copy:>10}{ratio_peer:>15}")

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--librope", help="librope shared library with the CUDA backend (columns skipped if absent)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--quick", action="store_true", help="fewer and shorter timing loops")
    ap.add_argument("--cases", default="prefill1,prefill16,decode")
    ap.add_argument("--dtypes", default="f32,bf16")
    args = ap.parse_args()
    args.reps, args.loop_ms = (5, 5.0) if args.quick else (15, 20.0)
    if not torch.cuda.is_available():
        sys.exit("rope_cuda.py: no CUDA device")
    names, peers, lib = ["copy", "torch_eager", "torch_compile"], {"versions": {}}, None
    try:
        dyn = torch._dynamo.config
        for key in ("cache_size_limit", "recompile_limit"):  # 6 shapes x dtypes per function
            if hasattr(dyn, key):
                setattr(dyn, key, 64)
        peers["compiled"], peers["compiled_ip"] = torch.compile(hf_rope, dynamic=False), torch.compile(hf_rope_, dynamic=False)
    except Exception as e:
        names.remove("torch_compile")
        print(f"torch_compile: {e!r}")
    for name, load in (("liger", load_liger), ("flash_attn_triton", load_flash)):
        try:
            peers["liger" if name == "liger" else "flash"], peers["versions"][name] = load()
            names.append(name)
        except Exception as e:
            print(f"{name}: not available: {e!r}")
            peers["versions"][name] = f"unavailable: {e!r}"
    if args.librope:
        try:
            lib = Librope(args.librope)
            lib.plans = {"librope": lib.plan(0), "librope_table": lib.plan(1)}
            names += ["librope", "librope_table", "librope_graph"]
            peers["versions"]["librope"] = lib.version
        except Exception as e:
            print(f"librope: not available: {e!r}")
            peers["versions"]["librope"] = f"unavailable: {e!r}"
    props = torch.cuda.get_device_properties(0)
    l2 = getattr(props, "L2_cache_size", 0) or 50 << 20
    env = environment(peers)
    print(json.dumps(env))
    results = []
    for cname in args.cases.split(","):
        for dname in args.dtypes.split(","):
            for inplace in (True, False):
                case_names = [n for n in names if n != "librope_graph" or cname == "decode"]
                print(f"{cname} {dname} {'in place' if inplace else 'out of place'} ...", flush=True)
                try:
                    results.append(run_case(cname, dname, inplace, case_names, peers, lib, args, l2))
                except Exception as e:
                    print(f"  case failed: {e!r}")
                    traceback.print_exc()
                torch.cuda.empty_cache()
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(dict(environment=env, notes=NOTES, l2_bytes=l2, reps=args.reps, loop_ms=args.loop_ms,
                           results=results), f, indent=1)
        print(f"wrote {args.json}")
    table(results, names)


if __name__ == "__main__":
    main()
