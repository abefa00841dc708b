# Generation throughput with many streams: `roformer serve` with a causal LM (step-level batching over
# --slots) beside transformers' generate on the same model and threads, greedy, the same prompts:
#   - roformer serve --slots S: S concurrent OpenAI completions (/v1/completions); total tokens/s over
#     the wall time, then the time to first token (p50, p90) of the same load streamed (stream: true);
#   - roformer serve --slots 1: the same requests, one sequence at a time (no batching);
#   - transformers generate one request at a time (in process, no HTTP: the peer's best case), on a
#     subset of the prompts (its rate is per request);
#   - transformers generate on all prompts as one left-padded batch (its best batched form).
# The --slots STREAMS rows and the batched peer are the median of --rounds loads.
# Prints a table with each row's tokens/s and its ratio to the best transformers row; --json writes it.
# With --base, the model is a randomly initialised RoFormer-base-sized causal LM (12 × 768, the
# tokenizer of --model) made by transformers, instead of --model itself. --quantize bf16 (or int8) adds
# the --slots STREAMS row with the model's linear layers in that precision (transformers stays fp32);
# --kv-cache bf16 adds, for each such row, one with the server's key/value cache in bf16. --prompt-repeat
# N makes each prompt N copies of itself (longer contexts, where the cache is a larger share of a step).
# --base-out DIR keeps the base-sized model in DIR (for `roformer generate` runs of one's own).
#
#   python3 bench/peers/generate_peers.py --roformer build/release/tools/roformer \
#       --model runs/kjv/step-000600 --python build/hf-venv/bin/python --streams 32 --tokens 64
import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import tempfile
import time
import urllib.request

PEER = r"""
import json, sys, time, torch, transformers
model_dir, prompts_file, tokens, threads, sequential, rounds = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
torch.set_num_threads(threads)
prompts = json.load(open(prompts_file))
m = transformers.RoFormerForCausalLM.from_pretrained(model_dir).eval()
out = {}
with torch.inference_mode():
    m.generate(torch.tensor([prompts[0]]), max_new_tokens=4, do_sample=False)  # warm-up
    t = time.perf_counter()
    n = 0
    for p in prompts[:sequential]:
        g = m.generate(torch.tensor([p]), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
        n += g.shape[1] - len(p)
    out["sequential"] = n / (time.perf_counter() - t)
    L = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (L - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (L - len(p)) + [1] * len(p) for p in prompts])
    rates = []
    for _ in range(rounds):
        t = time.perf_counter()
        g = m.generate(ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, pad_token_id=0)
        rates.append((g.shape[1] - L) * len(prompts) / (time.perf_counter() - t))
    out["batched"], out["batched_rounds"] = sorted(rates)[len(rates) // 2], rates
print(json.dumps(out))
"""

BASE = r"""
import sys, transformers
src, out = sys.argv[1], sys.argv[2]
c = transformers.RoFormerConfig.from_pretrained(src)
c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.intermediate_size = 12, 768, 12, 3072
c.embedding_size = 768
transformers.set_seed(0)
transformers.RoFormerForCausalLM(c).save_pretrained(out, safe_serialization=True)
"""


def serve_run(roformer, model, slots, prompts, tokens, threads, quantize="none", kv_cache="fp32", rounds=1):
    log = tempfile.TemporaryFile("w+")
    p = subprocess.Popen([roformer, "serve", "--model", model, "--port", "0", "--slots", str(slots),
                          "--threads", str(threads), "--quantize", quantize, "--kv-cache", kv_cache,
                          "--no-access-log"], stderr=log)
    try:
        port = None
        for _ in range(600):
            log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
            if m:
                port = int(m.group(1))
                break
            time.sleep(0.1)
        assert port, "the server did not start"

        def one(prompt, stream):
            body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": stream}).encode()
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            t0 = time.perf_counter()
            first, n = None, 0
            with urllib.request.urlopen(req) as r:
                if not stream:
                    return None, json.loads(r.read())["usage"]["completion_tokens"]
                for line in r:
                    if line.startswith(b"data: {"):
                        c = json.loads(line[6:])
                        if c["choices"] and c["choices"][0]["finish_reason"] is None:
                            n += 1
                            first = first or time.perf_counter() - t0
            return first, n

        # Warm-up: one whole load, so that every slot's cache is in memory before the timed loads
        # (one request with one slot).
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            list(pool.map(lambda q: one(q, False), prompts if slots > 1 else prompts[:1]))
        # Throughput: whole completions (a client parsing a server-sent event per token would be the
        # bottleneck of a small model); then time to first token with the same load, streamed.
        # The median of `rounds` such loads: one load of a small model lasts a fraction of a second.
        with concurrent.futures.ThreadPoolExecutor(len(prompts)) as pool:
            rates = []
            for _ in range(rounds):
                t = time.perf_counter()
                done = list(pool.map(lambda q: one(q, False), prompts))
                rates.append(sum(r[1] for r in done) / (time.perf_counter() - t))
            ttft = sorted(r[0] for r in pool.map(lambda q: one(q, True), prompts))
        hwm = next(int(l.split()[1]) for l in open(f"/proc/{p.pid}/status") if l.startswith("VmHWM:"))
        return {"tokens_per_s": sorted(rates)[len(rates) // 2], "rounds": rates, "ttft_p50_s": statistics.median(ttft),
                "ttft_p90_s": ttft[int(0.9 * (len(ttft) - 1))], "tokens": sum(r[1] for r in done),
                "peak_rss_mib": hwm / 1024}
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--model", required=True, help="a causal LM directory (roformer train's step-NNNNNN)")
    ap.add_argument("--python", default="build/hf-venv/bin/python", help="with torch and transformers")
    ap.add_argument("--streams", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sequential", type=int, default=4, help="prompts transformers runs one at a time")
    ap.add_argument("--base", action="store_true", help="a RoFormer-base-sized model with --model's tokenizer")
    ap.add_argument("--base-out", help="with --base: write that model to this directory and keep it")
    ap.add_argument("--quantize", nargs="*", default=[], choices=["int8", "bf16"],
                    help="also roformer serve --slots STREAMS --quantize Q (bf16: CPUs with AVX512-BF16 or AMX)")
    ap.add_argument("--kv-cache", nargs="*", default=[], choices=["bf16"],
                    help="also each --slots STREAMS row with roformer serve --kv-cache bf16")
    ap.add_argument("--prompt-repeat", type=int, default=1, help="each prompt this many times over")
    ap.add_argument("--rounds", type=int, default=3,
                    help="loads timed for each --slots STREAMS row and transformers' batched generate (median)")
    ap.add_argument("--json")
    a = ap.parse_args()
    work = tempfile.mkdtemp()
    model = a.model
    if a.base:
        model = a.base_out or os.path.join(work, "base")
        subprocess.run([a.python, "-c", BASE, a.model, model], check=True)
        for f in os.listdir(a.model):
            if f not in ("config.json", "model.safetensors", "optimizer.safetensors") and os.path.isfile(os.path.join(a.model, f)):
                shutil.copy(os.path.join(a.model, f), model)
    # Prompts of 3-13 words; the peer gets the char tokenizer's ids (5 special ids, then tokenizer.json's tokens).
    words = "In the beginning God created the heaven and the earth And the earth was without form and void".split()
    prompts = [" ".join(words[i % 7: i % 7 + 3 + i % 11] * a.prompt_repeat) for i in range(a.streams)]
    tok = json.load(open(os.path.join(model, "tokenizer.json")))
    assert tok["kind"] == "char", "a character-level causal LM (roformer train's default)"
    index = {t: 5 + i for i, t in enumerate(tok["tokens"])}
    with open(os.path.join(work, "prompts.json"), "w") as f:
        json.dump([[index.get(c, 1) for c in p] for p in prompts], f)
    rows = {}
    for q in ["none"] + a.quantize:
        for kv in ["fp32"] + a.kv_cache:
            name = (f"roformer serve --slots {a.streams}" + (f" --quantize {q}" if q != "none" else "") +
                    (f" --kv-cache {kv}" if kv != "fp32" else ""))
            rows[name] = serve_run(a.roformer, model, a.streams, prompts, a.tokens, a.threads, q, kv, a.rounds)
    rows["roformer serve --slots 1"] = serve_run(a.roformer, model, 1, prompts, a.tokens, a.threads)
    peer = json.loads(subprocess.run([a.python, "-c", PEER, model, os.path.join(work, "prompts.json"), str(a.tokens),
                                      str(a.threads), str(a.sequential), str(a.rounds)], check=True, capture_output=True,
                                     text=True).stdout.strip().splitlines()[-1])
    rows["transformers generate, one request at a time"] = {"tokens_per_s": peer["sequential"]}
    rows[f"transformers generate, {a.streams} prompts in one batch"] = {"tokens_per_s": peer["batched"],
                                                                      "rounds": peer["batched_rounds"]}
    best = max(peer["sequential"], peer["batched"])
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"{cpu}, {a.threads} threads; {a.streams} streams x {a.tokens} new tokens, greedy, prompts x {a.prompt_repeat}; "
          f"model {'RoFormer-base-sized (12 x 768)' if a.base else a.model}")
    print("| system | tokens/s | vs best transformers | TTFT p50 | TTFT p90 | server peak RSS |")
    print("|---|---|---|---|---|---|")
    for name, r in rows.items():
        ttft = (f"{r['ttft_p50_s'] * 1000:.0f} ms | {r['ttft_p90_s'] * 1000:.0f} ms | {r['peak_rss_mib']:.0f} MiB"
                if "ttft_p50_s" in r else "- | - | -")
        print(f"| {name} | {r['tokens_per_s']:.0f} | {r['tokens_per_s'] / best:.2f}x | {ttft} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"cpu": cpu, "threads": a.threads, "streams": a.streams, "tokens": a.tokens, "base": a.base,
                       "prompt_repeat": a.prompt_repeat, "rounds": a.rounds, "rows": rows}, f, indent=1)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
