#!/usr/bin/env python3
"""Inference peer: a RoFormer model in PyTorch + Hugging Face transformers (and optionally ONNX
Runtime and OpenVINO) side by side with `roformer bench infer`, on the same weights and threads.

Run it with the transformers environment (scripts/hf-env.sh makes build/hf-venv: Debian's torch
1.13 + transformers 4.40.2):

    build/hf-venv/bin/python bench/peers/roformer_infer_hf.py --roformer build/release/tools/roformer
    build/hf-venv/bin/python bench/peers/roformer_infer_hf.py --roformer ... --onnx --json infer.json
    build/hf-venv/bin/python bench/peers/roformer_infer_hf.py --roformer ... --preset tiny --min-time 0.2
    build/ov-venv/bin/python bench/peers/roformer_infer_hf.py --roformer ... --onnx --openvino --int8

PyTorch 2's scaled_dot_product_attention (--sdpa: the torch-sdpa runner, torch-sdpa-bf16 with --bf16)
needs torch >= 2.0: scripts/torch2-env.sh makes build/torch2-venv (PyPI's torch 2.15.0 + transformers
4.40.2), which runs every runner but ONNX Runtime's and OpenVINO's:

    build/torch2-venv/bin/python bench/peers/roformer_infer_hf.py --roformer build/release/tools/roformer \
        --runners ours,torch-sdpa,ours-bf16,torch-sdpa-bf16 --shapes 1x512,1x2048,1x8192 --max-positions 8192

(ONNX Runtime and OpenVINO need pip install onnx onnxruntime openvino nncf: build/ov-venv is
python3 -m venv --system-site-packages over Debian's torch, plus transformers==4.40.2 onnx onnxruntime
openvino nncf "numpy<2" "ml-dtypes<0.6" from PyPI.)

Model: --preset base is RoFormer-base with a 12,000-token vocabulary (hidden 768, 12 layers, 12 heads,
ff 3072, max positions 1536, or --max-positions): transformers' RoFormerModel (the encoder, no head)
with its own random initialisation (torch.manual_seed(--seed)), saved once with save_pretrained(safe_serialization=True)
to --model-dir. Every runner loads that model.safetensors: ours through `roformer bench infer
--model DIR`, PyTorch through RoFormerModel.from_pretrained(DIR) (eager attention: transformers 4.40's
RoFormer has no SDPA path), torch-sdpa through bench/peers/roformer_sdpa.py (the same network with
torch.nn.functional.scaled_dot_product_attention, on the CPU its flash kernel; the kernel SDPA picks is
reported as sdpa_backend), ONNX Runtime through a graph that
torch.onnx.export wrote from the same loaded model (opset 14, dynamic batch and sequence axes), and
OpenVINO through that same graph, reshaped to each run's static B x T (its fastest form; ours and ONNX
Runtime take any shape) and compiled for the CPU.

Batch: B x T ids (i * 7919 + 13) mod V over the flattened batch, attention mask all ones, token
type 0; fp32. Each runner prints a checksum of last_hidden_state (mean, mean |x|, 8 values spread
over it); the peer fails if they disagree beyond 1e-4 relative, so the runners are timed on the same
computation.

Timing: every (runner, shape) is a fresh process (so peak RSS is its own): load, --warmup untimed
forwards, then forwards until both --min-reps and --min-time are reached. The runners take turns,
--rounds times per shape (ours, torch, onnx, ours, torch, onnx, ...), so that the slow drifts of a
shared machine reach all of them; each runner's figure is the median over its rounds. Reported:
median latency, tokens/s = B * T / median, peak RSS (VmHWM: weights, the load and the activations) and the RSS
after loading. PyTorch runs under torch.inference_mode() with torch.set_num_threads(--threads),
set_num_interop_threads(1) and OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = --threads (OMP_WAIT_POLICY as
the environment gives it); ONNX Runtime with
intra_op_num_threads = --threads, inter_op 1, sequential execution, all graph optimisations; OpenVINO
with INFERENCE_NUM_THREADS = --threads, one stream, the LATENCY hint and INFERENCE_PRECISION_HINT f32
(bf16 for openvino-bf16, refused on CPUs without AVX512-BF16 or AMX, where OpenVINO would quietly run
fp32). openvino-int8 is NNCF's post-training quantisation of the same graph (nncf.quantize, the
transformer model type: static int8 activations calibrated on 16 batches of 1 x 128 uniformly random
ids, s8 weights), OpenVINO's own int8 path. Ours
runs with --threads OpenMP threads and the environment it is given.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

from peer_common import peak_rss_mib

PRESETS = {  # name: (hidden, layers, heads, ff, vocab, max positions)
    "base": (768, 12, 12, 3072, 12000, 1536),
    "tiny": (64, 2, 4, 128, 500, 256),
}
TORCH_CHILDREN = ("torch", "torch-bf16", "torch-sdpa", "torch-sdpa-bf16")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--roformer", help="our binary (build/release/tools/roformer)")
    ap.add_argument("--preset", choices=sorted(PRESETS), default="base")
    ap.add_argument("--max-positions", type=int, help="the model's max_position_embeddings (default: the preset's)")
    ap.add_argument("--model-dir", help="model directory (default build/bench/roformer-<preset>, "
                    "roformer-<preset>-pos<N> with --max-positions N); made if absent")
    ap.add_argument("--shapes", default="1x128,8x512", help="comma-separated BxT")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--min-reps", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3, help="runner sequences per shape, interleaved")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--onnx", action="store_true", help="add ONNX Runtime (pip install onnxruntime)")
    ap.add_argument("--runners", default="ours,torch",
                    help="comma-separated: ours, ours-int8 (roformer --quantize int8), ours-bf16 (roformer "
                         "--quantize bf16), torch, torch-bf16 (torch.autocast to bfloat16, oneDNN's bf16 "
                         "matmuls), torch-sdpa, torch-sdpa-bf16 (bench/peers/roformer_sdpa.py: "
                         "scaled_dot_product_attention, torch >= 2.0), onnx, onnx-int8 (onnxruntime.quantization.quantize_dynamic of the same graph, "
                         "per-channel s8 weights), openvino, openvino-int8 (NNCF's static int8 of the same graph), "
                         "openvino-bf16 (INFERENCE_PRECISION_HINT bf16; CPUs with AVX512-BF16 or AMX)")
    ap.add_argument("--openvino", action="store_true", help="add OpenVINO (pip install openvino nncf); with "
                    "--int8 also openvino-int8, with --bf16 also openvino-bf16")
    ap.add_argument("--int8", action="store_true", help="add ours-int8 and onnx-int8")
    ap.add_argument("--bf16", action="store_true", help="add ours-bf16 and torch-bf16 (CPUs with AVX512-BF16 or AMX); "
                    "with --sdpa also torch-sdpa-bf16")
    ap.add_argument("--sdpa", action="store_true", help="add torch-sdpa (torch >= 2.0: scripts/torch2-env.sh)")
    ap.add_argument("--json", help="write every run and the ratios here")
    ap.add_argument("--profile-torch", action="store_true",
                    help="print torch.profiler's op table for 3 PyTorch forwards of the first shape, and stop")
    ap.add_argument("--child", choices=list(TORCH_CHILDREN) + ["onnx", "onnx-int8", "openvino", "openvino-int8",
                                        "openvino-bf16", "quantize-openvino"], help=argparse.SUPPRESS)
    ap.add_argument("--shape", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.max_positions is not None and not 1 <= args.max_positions <= 1 << 20:
        ap.error("--max-positions %d: use 1 to 1048576" % args.max_positions)
    if args.model_dir is None:
        args.model_dir = os.path.join("build", "bench", "roformer-" + args.preset +
                                      ("-pos%d" % args.max_positions if args.max_positions else ""))
    return args


def parse_shape(s):
    b, t = s.lower().split("x")
    return int(b), int(t)


def batch_ids(B, T, V):
    import torch
    return (torch.arange(B * T, dtype=torch.int64) * 7919 + 13).remainder(V).reshape(B, T)


def checksum(x):
    flat = x.reshape(-1).double()
    n = flat.numel()
    return {"mean": flat.mean().item(), "mean_abs": flat.abs().mean().item(),
            "probe": [flat[(n - 1) * k // 7].item() for k in range(8)]}


def time_forwards(forward, args, B, T):
    for _ in range(args.warmup):
        out = forward()
    times = []
    t0 = time.perf_counter()
    while len(times) < args.min_reps or time.perf_counter() - t0 < args.min_time:
        ts = time.perf_counter()
        out = forward()
        times.append(time.perf_counter() - ts)
    times.sort()
    median = times[len(times) // 2]
    return out, {"reps": len(times), "latency_ms_median": median * 1e3, "latency_ms_min": times[0] * 1e3,
                 "tokens_per_s": B * T / median}


# ---- children: one runner, one shape, JSON on stdout ----

def torch_forward(args, B, T, bf16=False, sdpa=False):
    """The loaded model's forward on the benchmark batch (under bf16 autocast if bf16), and the load time:
    transformers' RoFormerModel, or with sdpa roformer_sdpa.py's RoFormer on scaled_dot_product_attention."""
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    t0 = time.perf_counter()
    if sdpa:
        from roformer_sdpa import load_roformer_sdpa
        model = load_roformer_sdpa(args.model_dir)
        V = model.embeddings.word_embeddings.num_embeddings
    else:
        from transformers import RoFormerModel
        model = RoFormerModel.from_pretrained(args.model_dir).eval()
        V = model.config.vocab_size
    load_s = time.perf_counter() - t0
    ids = batch_ids(B, T, V)
    mask = torch.ones_like(ids)
    types = torch.zeros_like(ids)

    def forward():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            if sdpa:
                return model(ids, attention_mask=mask, token_type_ids=types).float()
            return model(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state.float()

    return forward, load_s


def profile_torch(args):
    from torch.profiler import ProfilerActivity, profile
    forward, _ = torch_forward(args, *parse_shape(args.shapes.split(",")[0]))
    for _ in range(2):
        forward()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            forward()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


def child_torch(args, runner):
    """runner: one of TORCH_CHILDREN."""
    import torch
    B, T = parse_shape(args.shape)
    bf16, sdpa = runner.endswith("-bf16"), runner.startswith("torch-sdpa")
    if sdpa and not hasattr(torch.nn.functional, "scaled_dot_product_attention"):
        sys.exit("%s: torch %s has no scaled_dot_product_attention (torch >= 2.0: scripts/torch2-env.sh)" %
                 (runner, torch.__version__))
    forward, load_s = torch_forward(args, B, T, bf16, sdpa)
    rss_load = peak_rss_mib()
    out, run = time_forwards(forward, args, B, T)
    if sdpa:
        from roformer_sdpa import sdpa_backend
        with open(os.path.join(args.model_dir, "config.json")) as f:
            c = json.load(f)
        n = c["num_attention_heads"]
        q = torch.zeros(B, n, T, c["hidden_size"] // n, dtype=torch.bfloat16 if bf16 else torch.float32)
        run["sdpa_backend"] = sdpa_backend(q, q, q)
        version = "torch %s" % torch.__version__
    else:
        version = "torch %s, transformers %s" % (torch.__version__, __import__("transformers").__version__)
    run.update({"runner": runner, "version": version, "load_s": load_s, "rss_after_load_mib": rss_load,
                "peak_rss_mib": peak_rss_mib(), "checksum": checksum(out)})
    return run


def onnx_path(model_dir, int8=False):
    return os.path.join(model_dir, "model.int8.onnx" if int8 else "model.onnx")


def quantize_onnx(model_dir):
    """Writes model_dir/model.int8.onnx: ONNX Runtime's dynamic quantisation of model.onnx (once), with
    per-channel s8 weights as ours (u8 activations with a zero point, computed per call, as ours)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic
    tmp = onnx_path(model_dir, True) + ".tmp.onnx"
    quantize_dynamic(onnx_path(model_dir), tmp, per_channel=True, weight_type=QuantType.QInt8)
    os.replace(tmp, onnx_path(model_dir, True))


def export_onnx(model_dir):
    """Writes model_dir/model.onnx from the saved model (once)."""
    import torch
    from transformers import RoFormerModel
    model = RoFormerModel.from_pretrained(model_dir).eval()
    ids = batch_ids(1, 16, model.config.vocab_size)
    tmp = onnx_path(model_dir) + ".tmp"
    with torch.no_grad():
        torch.onnx.export(model, (ids, torch.ones_like(ids), torch.zeros_like(ids)), tmp,
                          input_names=["input_ids", "attention_mask", "token_type_ids"],
                          output_names=["last_hidden_state"], opset_version=14,
                          dynamic_axes={n: {0: "batch", 1: "seq"} for n in
                                        ("input_ids", "attention_mask", "token_type_ids", "last_hidden_state")})
    os.replace(tmp, onnx_path(model_dir))


def child_onnx(args, int8=False):
    import numpy as np
    import onnxruntime as ort
    import torch
    B, T = parse_shape(args.shape)
    with open(os.path.join(args.model_dir, "config.json")) as f:
        V = json.load(f)["vocab_size"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    t0 = time.perf_counter()
    sess = ort.InferenceSession(onnx_path(args.model_dir, int8), opts, providers=["CPUExecutionProvider"])
    load_s = time.perf_counter() - t0
    rss_load = peak_rss_mib()
    ids = batch_ids(B, T, V).numpy()
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    out, run = time_forwards(lambda: sess.run(["last_hidden_state"], feeds)[0], args, B, T)
    run.update({"runner": "onnx-int8" if int8 else "onnx", "version": "onnxruntime " + ort.__version__, "load_s": load_s,
                "rss_after_load_mib": rss_load, "peak_rss_mib": peak_rss_mib(),
                "checksum": checksum(torch.from_numpy(out))})
    return run


def cpu_has_bf16():
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    return "avx512_bf16" in flags or "amx_bf16" in flags


def openvino_int8_path(model_dir):
    return os.path.join(model_dir, "model.ov-int8.xml")


def quantize_openvino(model_dir):
    """Writes model_dir/model.ov-int8.xml (+ .bin): NNCF's post-training int8 quantisation of model.onnx
    (once), calibrated on 16 batches of 1 x 128 uniformly random ids. Runs in a child process that cannot
    import torch: NNCF loads its torch backend whenever torch is importable, and that backend fails on
    Debian's torch 1.13 (no torch.uint16), while quantising an OpenVINO model needs no torch."""
    subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "quantize-openvino",
                    "--model-dir", model_dir], check=True)


def child_quantize_openvino(model_dir):
    sys.modules["torch"] = None  # import torch now raises ImportError, which NNCF takes as "no torch"
    import nncf
    import numpy as np
    import openvino as ov
    model = ov.Core().read_model(onnx_path(model_dir))
    with open(os.path.join(model_dir, "config.json")) as f:
        V = json.load(f)["vocab_size"]
    rng = np.random.default_rng(0)
    batches = []
    for _ in range(16):
        ids = rng.integers(0, V, size=(1, 128), dtype=np.int64)
        batches.append({"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)})
    quantized = nncf.quantize(model, nncf.Dataset(batches), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(batches))
    tmp = openvino_int8_path(model_dir).replace(".xml", ".tmp.xml")
    ov.save_model(quantized, tmp)
    os.replace(tmp.replace(".xml", ".bin"), openvino_int8_path(model_dir).replace(".xml", ".bin"))
    os.replace(tmp, openvino_int8_path(model_dir))


def child_openvino(args, variant):
    """variant: "" (fp32), "int8" or "bf16"."""
    import openvino as ov
    import torch
    B, T = parse_shape(args.shape)
    with open(os.path.join(args.model_dir, "config.json")) as f:
        V = json.load(f)["vocab_size"]
    if variant == "bf16" and not cpu_has_bf16():
        sys.exit("openvino-bf16: this CPU has neither AVX512-BF16 nor AMX (OpenVINO would run fp32)")
    core = ov.Core()
    t0 = time.perf_counter()
    model = core.read_model(openvino_int8_path(args.model_dir) if variant == "int8" else onnx_path(args.model_dir))
    model.reshape({name: [B, T] for name in ("input_ids", "attention_mask", "token_type_ids")})
    compiled = core.compile_model(model, "CPU", {
        "INFERENCE_NUM_THREADS": str(args.threads), "NUM_STREAMS": "1", "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "bf16" if variant == "bf16" else "f32"})
    request = compiled.create_infer_request()
    load_s = time.perf_counter() - t0
    rss_load = peak_rss_mib()
    ids = batch_ids(B, T, V).numpy()
    feeds = {"input_ids": ids, "attention_mask": ids * 0 + 1, "token_type_ids": ids * 0}
    output = compiled.output("last_hidden_state")
    out, run = time_forwards(lambda: request.infer(feeds)[output], args, B, T)
    run.update({"runner": "openvino" + ("-" + variant if variant else ""), "version": "openvino " + ov.__version__,
                "load_s": load_s, "rss_after_load_mib": rss_load, "peak_rss_mib": peak_rss_mib(),
                "checksum": checksum(torch.from_numpy(out.copy()))})
    return run


# ---- the parent: make the model, run every (runner, shape), compare ----

def ensure_model(args):
    if os.path.exists(os.path.join(args.model_dir, "model.safetensors")):
        with open(os.path.join(args.model_dir, "config.json")) as f:
            P = json.load(f)["max_position_embeddings"]
        if args.max_positions and P != args.max_positions:
            sys.exit("%s/config.json: max_position_embeddings %d, not --max-positions %d (use another --model-dir)" %
                     (args.model_dir, P, args.max_positions))
        return
    import torch
    from transformers import RoFormerConfig, RoFormerModel
    H, L, n, I, V, P = PRESETS[args.preset]
    P = args.max_positions or P
    cfg = RoFormerConfig(vocab_size=V, embedding_size=H, hidden_size=H, num_hidden_layers=L,
                         num_attention_heads=n, intermediate_size=I, max_position_embeddings=P)
    torch.manual_seed(args.seed)
    model = RoFormerModel(cfg).eval()
    os.makedirs(os.path.dirname(os.path.abspath(args.model_dir)), exist_ok=True)
    tmp = args.model_dir.rstrip("/") + ".tmp"
    model.save_pretrained(tmp, safe_serialization=True)
    os.replace(tmp, args.model_dir)
    print("wrote %s (%s preset, %.1fM parameters)" % (args.model_dir, args.preset,
                                                      sum(p.numel() for p in model.parameters()) / 1e6))


def run_child(args, runner, shape):
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    common = ["--warmup", str(args.warmup), "--min-reps", str(args.min_reps), "--min-time", str(args.min_time),
              "--threads", str(args.threads)]
    B, T = parse_shape(shape)
    if runner.startswith("ours"):
        cmd = [args.roformer, "bench", "infer", "--model", args.model_dir, "--batch", str(B), "--seq", str(T),
               "--json"] + common + (["--quantize", runner[len("ours-"):]] if runner != "ours" else [])
    else:
        cmd = [sys.executable, os.path.abspath(__file__), "--child", runner, "--shape", shape,
               "--model-dir", args.model_dir, "--preset", args.preset] + common
    res = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr)
        sys.exit("%s failed (exit %d): %s" % (runner, res.returncode, " ".join(cmd)))
    doc = json.loads(res.stdout)
    run = dict(doc["runs"][0], runner=runner) if runner.startswith("ours") else doc
    run["shape"] = shape
    return run


def median_run(runs):
    """The run with the median tokens/s (the upper one of an even count), with the peak RSS of all."""
    m = sorted(runs, key=lambda r: r["tokens_per_s"])[len(runs) // 2]
    return dict(m, peak_rss_mib=max(r["peak_rss_mib"] for r in runs))


def agree(a, b, tol=1e-4):
    ca, cb = a["checksum"], b["checksum"]
    scale = max(ca["mean_abs"], 1e-6)
    worst = max([abs(ca["mean"] - cb["mean"]) / scale, abs(ca["mean_abs"] - cb["mean_abs"]) / scale] +
                [abs(x - y) / scale for x, y in zip(ca["probe"], cb["probe"])])
    return worst <= tol, worst


def main(args):
    if args.child == "quantize-openvino":
        child_quantize_openvino(args.model_dir)
        return 0
    if args.child:
        if args.child in TORCH_CHILDREN:
            run = child_torch(args, args.child)
        elif args.child.startswith("onnx"):
            run = child_onnx(args, args.child == "onnx-int8")
        else:
            run = child_openvino(args, args.child[len("openvino-"):] if "-" in args.child else "")
        print(json.dumps(run))
        return 0
    if args.profile_torch:
        ensure_model(args)
        profile_torch(args)
        return 0
    runners = [r for r in args.runners.split(",") if r]
    if args.onnx and "onnx" not in runners:
        runners.append("onnx")
    if args.openvino and "openvino" not in runners:
        runners.append("openvino")
    if args.int8:
        runners += [r for r in ("ours-int8", "onnx-int8") if r not in runners]
        if args.openvino and "openvino-int8" not in runners:
            runners.append("openvino-int8")
    if args.sdpa and "torch-sdpa" not in runners:
        runners.append("torch-sdpa")
    if args.bf16:
        runners += [r for r in ("ours-bf16", "torch-bf16") if r not in runners]
        if "torch-sdpa" in runners and "torch-sdpa-bf16" not in runners:
            runners.append("torch-sdpa-bf16")
        if args.openvino and "openvino-bf16" not in runners:
            runners.append("openvino-bf16")
    if "ours" in runners and not args.roformer:
        sys.exit("--roformer is required to run ours")
    ensure_model(args)
    with open(os.path.join(args.model_dir, "config.json")) as f:
        P = json.load(f)["max_position_embeddings"]
    for shape in [s for s in args.shapes.split(",") if s]:
        if parse_shape(shape)[1] > P:
            sys.exit("--shapes %s: %d tokens exceed max_position_embeddings %d of %s (use --max-positions)" %
                     (shape, parse_shape(shape)[1], P, args.model_dir))
    if any(r.startswith(("onnx", "openvino")) for r in runners) and not os.path.exists(onnx_path(args.model_dir)):
        export_onnx(args.model_dir)
    if "openvino-int8" in runners and not os.path.exists(openvino_int8_path(args.model_dir)):
        quantize_openvino(args.model_dir)
    if "onnx-int8" in runners and not os.path.exists(onnx_path(args.model_dir, True)):
        quantize_onnx(args.model_dir)
    import torch
    print("%s, %d threads, python %s, torch %s, model %s (%s)" % (platform.machine(), args.threads,
          platform.python_version(), torch.__version__, args.model_dir, args.preset), flush=True)
    runs, rows, ok = [], [], True
    for shape in [s for s in args.shapes.split(",") if s]:
        rounds = {r: [] for r in runners}
        for k in range(args.rounds):
            for r in runners:
                run = run_child(args, r, shape)
                run["round"] = k
                rounds[r].append(run)
                runs.append(run)
                print("  %-5s %-6s round %d %8.1f ms  %9.0f tok/s  peak %6.0f MiB" % (
                    r, shape, k, run["latency_ms_median"], run["tokens_per_s"], run["peak_rss_mib"]), flush=True)
        by = {r: median_run(rs) for r, rs in rounds.items()}
        ref = by.get("torch") or next(iter(by.values()))
        for r, rs in rounds.items():
            for run in rs:
                same, worst = agree(ref, run)
                run["checksum_rel_diff_vs_" + ref["runner"]] = worst
                if r.endswith(("int8", "bf16")):  # reduced: reported (accuracy), not required to agree to 1e-4
                    print("  %s vs %s: checksum differs by %.2e (relative)" % (r, ref["runner"], worst))
                elif not same:
                    ok = False
                    print("  MISMATCH: %s vs %s output differs by %.2e (relative)" % (r, ref["runner"], worst))
        if "ours" in by:
            o = by["ours"]
            row = {"shape": shape, "ours_tok_s": o["tokens_per_s"], "ours_peak_mib": o["peak_rss_mib"]}
            if "torch" in by:
                t = by["torch"]
                row.update({"torch_tok_s": t["tokens_per_s"], "torch_peak_mib": t["peak_rss_mib"],
                            "speedup_vs_torch": o["tokens_per_s"] / t["tokens_per_s"],
                            "memory_vs_torch": o["peak_rss_mib"] / t["peak_rss_mib"]})
            if "onnx" in by:
                row["onnx_tok_s"] = by["onnx"]["tokens_per_s"]
                row["onnx_peak_mib"] = by["onnx"]["peak_rss_mib"]
                row["speedup_vs_onnx"] = o["tokens_per_s"] / by["onnx"]["tokens_per_s"]
                row["memory_vs_onnx"] = o["peak_rss_mib"] / by["onnx"]["peak_rss_mib"]
            if "ours-int8" in by and "onnx-int8" in by:
                oi, ni = by["ours-int8"], by["onnx-int8"]
                row.update({"ours_int8_tok_s": oi["tokens_per_s"], "onnx_int8_tok_s": ni["tokens_per_s"],
                            "int8_speedup_vs_onnx_int8": oi["tokens_per_s"] / ni["tokens_per_s"],
                            "ours_int8_peak_mib": oi["peak_rss_mib"], "onnx_int8_peak_mib": ni["peak_rss_mib"]})
            if "openvino" in by:
                row["openvino_tok_s"] = by["openvino"]["tokens_per_s"]
                row["openvino_peak_mib"] = by["openvino"]["peak_rss_mib"]
                row["speedup_vs_openvino"] = o["tokens_per_s"] / by["openvino"]["tokens_per_s"]
            if "ours-int8" in by and "openvino-int8" in by:
                row["openvino_int8_tok_s"] = by["openvino-int8"]["tokens_per_s"]
                row["int8_speedup_vs_openvino_int8"] = by["ours-int8"]["tokens_per_s"] / by["openvino-int8"]["tokens_per_s"]
            if "torch-sdpa" in by:
                t = by["torch-sdpa"]
                row.update({"sdpa_tok_s": t["tokens_per_s"], "sdpa_peak_mib": t["peak_rss_mib"],
                            "speedup_vs_sdpa": o["tokens_per_s"] / t["tokens_per_s"],
                            "memory_vs_sdpa": o["peak_rss_mib"] / t["peak_rss_mib"]})
            if "ours-bf16" in by and "torch-sdpa-bf16" in by:
                ob, tb = by["ours-bf16"], by["torch-sdpa-bf16"]
                row.update({"sdpa_bf16_tok_s": tb["tokens_per_s"], "sdpa_bf16_peak_mib": tb["peak_rss_mib"],
                            "bf16_speedup_vs_sdpa_bf16": ob["tokens_per_s"] / tb["tokens_per_s"],
                            "bf16_memory_vs_sdpa_bf16": ob["peak_rss_mib"] / tb["peak_rss_mib"]})
            if "ours-bf16" in by and "openvino-bf16" in by:
                row["openvino_bf16_tok_s"] = by["openvino-bf16"]["tokens_per_s"]
                row["bf16_speedup_vs_openvino_bf16"] = by["ours-bf16"]["tokens_per_s"] / by["openvino-bf16"]["tokens_per_s"]
            if "ours-bf16" in by and "torch-bf16" in by:
                ob, tb = by["ours-bf16"], by["torch-bf16"]
                row.update({"ours_bf16_tok_s": ob["tokens_per_s"], "torch_bf16_tok_s": tb["tokens_per_s"],
                            "bf16_speedup_vs_torch_bf16": ob["tokens_per_s"] / tb["tokens_per_s"],
                            "ours_bf16_peak_mib": ob["peak_rss_mib"], "torch_bf16_peak_mib": tb["peak_rss_mib"]})
            rows.append(row)
    if rows:
        print("\n| shape | " + " | ".join(k for k in rows[0] if k != "shape") + " |")
        print("|---" * len(rows[0]) + "|")
        for row in rows:
            print("| %s | " % row["shape"] + " | ".join(("%.0f" if v >= 100 else "%.2f") % v
                                                       for k, v in row.items() if k != "shape") + " |")
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump({"tool": "bench/peers/roformer_infer_hf.py", "preset": args.preset, "threads": args.threads,
                       "runs": runs, "ratios": rows}, f, indent=1)
        os.replace(args.json + ".tmp", args.json)
        print("wrote %s" % args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(parse_args()))
