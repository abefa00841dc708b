# `roformer serve` beside the Python servers people deploy, on the same RoFormer-base-sized model,
# threads and requests (batch-1 requests of 32-128 tokens, bench/serve_load.py on loopback):
#   - roformer serve, fp32 and --quantize int8;
#   - infinity-emb (v2 CLI, torch engine), OpenAI-style /embeddings;
#   - sentence-transformers behind FastAPI/uvicorn (bench/peers/st_fastapi_server.py).
# Each runs alone: started, warmed up, loaded at concurrency 1 (latency) and 32 (throughput, with its
# p99), stopped. Prints a table with ratios to the best peer and writes JSON. For roformer serve also
# the server's overhead: c=1 requests of exactly 64 tokens against `roformer bench infer --batch 1
# --seq 64` (the forward alone) with the same threads and linear layers.
#
#   python3 -m venv build/peers-venv && build/peers-venv/bin/pip install torch==2.5.1 \
#       "infinity-emb[server,torch]==0.0.78" fastapi uvicorn
#   python3 bench/peers/serve_peers.py --roformer build/release/tools/roformer \
#       --peers-python build/peers-venv/bin/python --seconds 20 --json docs/results/serve/peers.json
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

here = os.path.dirname(os.path.abspath(__file__))
load = os.path.join(here, "..", "serve_load.py")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_model(python, out, head="RoFormerModel", layers=12, hidden=768, heads=12, num_labels=None):
    """A randomly initialised RoFormer (by default of roformer_chinese_base's shape) with a 30,000-word
    vocabulary; `head` is the transformers class, num_labels goes to the config when given."""
    if os.path.exists(os.path.join(out, "model.safetensors")):
        return
    labels = "" if num_labels is None else f", num_labels={num_labels}"
    code = f"""
import torch, transformers, json, os
torch.manual_seed(0)
os.makedirs({out!r}, exist_ok=True)
words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{{i}}" for i in range(30000)]
open(os.path.join({out!r}, "vocab.txt"), "w").write("\\n".join(words) + "\\n")
json.dump({{"tokenizer_class": "BertTokenizer", "do_lower_case": True, "model_max_length": 512}},
          open(os.path.join({out!r}, "tokenizer_config.json"), "w"))
c = transformers.RoFormerConfig(vocab_size=len(words), hidden_size={hidden}, num_hidden_layers={layers},
                                num_attention_heads={heads}, intermediate_size={4 * hidden},
                                max_position_embeddings=512, embedding_size={hidden}{labels})
getattr(transformers, {head!r})(c).save_pretrained({out!r}, safe_serialization=True)
"""
    subprocess.run([python, "-c", code], check=True)


def wait_ready(url, process, seconds=300):
    for _ in range(seconds * 10):
        if process.poll() is not None:
            raise RuntimeError(f"{url}: the server exited with {process.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url}: not ready after {seconds} s")


def run_peer(name, command, health, load_args, args, env, fixed_64=False):
    log = open(os.path.join(args.work, f"{name}.log"), "w")
    p = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        wait_ready(health, p)
        out = os.path.join(args.work, f"{name}.json")
        base = [sys.executable, load, *load_args, "--words", "30", "126", "--words-file",
                os.path.join(args.model, "vocab.txt"), "--pid", str(p.pid)]
        subprocess.run(base + ["--seconds", "3", "--concurrency", "4"], check=True, stdout=subprocess.DEVNULL)  # warm-up
        subprocess.run(base + ["--seconds", str(args.seconds), "--concurrency", "1", "32", "--json", out], check=True)
        with open(out) as f:
            levels = json.load(f)["levels"]
        if fixed_64:  # 62 words of a word-level vocabulary + [CLS] and [SEP]: 64 tokens
            fixed = base[:base.index("--words")] + ["--words", "62", "62"] + base[base.index("--words") + 3:]
            subprocess.run(fixed + ["--seconds", str(args.seconds), "--concurrency", "1", "--json", out], check=True)
            with open(out) as f:
                levels.append(json.load(f)["levels"][0])
        return levels
    finally:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--peers-python", required=True, help="a Python with torch 2, infinity-emb, sentence-transformers")
    ap.add_argument("--model", help="model directory (default: made in --work)")
    ap.add_argument("--work", default="build/serve-peers")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--only", nargs="*", help="run only these servers")
    ap.add_argument("--json")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    args.model = args.model or os.path.join(args.work, "roformer-base-random")
    make_model(args.peers_python, args.model)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               DO_NOT_TRACK="1", INFINITY_ANONYMOUS_USAGE_STATS="0", TOKENIZERS_PARALLELISM="true")
    tei = ["--route", "/embed"]
    peers = {
        "roformer-fp32": ([args.roformer, "serve", "--model", args.model, "--port", "{port}", "--no-access-log",
                           "--threads", str(args.threads)], "/health", tei),
        "roformer-int8": ([args.roformer, "serve", "--model", args.model, "--port", "{port}", "--no-access-log",
                           "--threads", str(args.threads), "--quantize", "int8"], "/health", tei),
        "infinity-emb": ([args.peers_python, "-m", "infinity_emb.cli", "v2", "--model-id", args.model, "--port", "{port}",
                          "--engine", "torch", "--device", "cpu", "--no-bettertransformer"], "/health",
                         ["--route", "/embeddings", "--input-key", "input", "--as-list", "--body",
                          json.dumps({"model": args.model})]),
        "st-fastapi": ([args.peers_python, os.path.join(here, "st_fastapi_server.py"), args.model, "{port}"],
                       "/health", tei),
    }
    results = {"cpu": open("/proc/cpuinfo").read().split("model name")[1].split("\n")[0].strip(": \t"),
               "threads": args.threads, "seconds": args.seconds, "servers": {}}
    for name, (command, health, load_args) in peers.items():
        if args.only and name not in args.only:
            continue
        port = free_port()
        command = [c.replace("{port}", str(port)) for c in command]
        url = f"http://127.0.0.1:{port}"
        try:
            ours = name.startswith("roformer")
            results["servers"][name] = run_peer(name, command, url + health, ["--url", url, *load_args], args, env, ours)
            if ours:  # the forward alone, at the fixed requests' shape
                quantize = command[command.index("--quantize") + 1] if "--quantize" in command else "auto"
                bench = subprocess.run([args.roformer, "bench", "infer", "--model", args.model, "--batch", "1", "--seq", "64",
                                        "--threads", str(args.threads), "--quantize", quantize, "--min-time", "5",
                                        "--json"], check=True, capture_output=True, text=True, env=env)
                results["servers"][name].append({"bench_infer_ms": json.loads(bench.stdout)["runs"][0]["latency_ms_median"]})
        except Exception as e:  # a peer that does not run is reported, not fatal
            print(f"{name}: {e}", file=sys.stderr)
            results["servers"][name] = {"error": str(e)}
    print(f"\n{results['cpu']}, {args.threads} threads, batch-1 requests of 32-128 tokens, {args.seconds} s per level")
    print(f"{'server':<15} {'c=1 p50 ms':>11} {'c=32 req/s':>11} {'c=32 p99 ms':>12}  statuses")
    for name, levels in results["servers"].items():
        if isinstance(levels, dict):
            print(f"{name:<15} error: {levels['error']}")
            continue
        one, many = levels[:2]
        print(f"{name:<15} {one['p50_ms']:>11} {many['ok_per_s']:>11} {many['p99_ms']:>12}  {json.dumps(many['statuses'])}")
        if len(levels) == 4:
            http, forward = levels[2]["p50_ms"], levels[3]["bench_infer_ms"]
            print(f"{'':<15} 64-token requests at c=1: p50 {http} ms against bench infer's {forward:.1f} ms "
                  f"(+{100 * (http / forward - 1):.1f}%)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
