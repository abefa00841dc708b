#!/usr/bin/env python3
# Several models in one `roformer serve` against one server per model (docs/serve.md, "Several
# models"): three randomly initialised RoFormers of different shapes (two embedding models, one
# classifier; transformers writes them) are each served alone and loaded with bench/serve_load.py's
# clients, then served together by one process and loaded all at once, each through its
# /models/NAME/ route. Reports each model's answers per second alone and together (against its share,
# a third of its rate alone: the three share the cores), and the peak RSS (VmHWM) of the one process
# against the sum of the three single-model servers'.
#
#   bench/serve_models.py --roformer build/release/tools/roformer --python build/hf-venv/bin/python \
#       --threads 2 --seconds 8 --concurrency 4 [--json out.json]
import argparse
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import serve_load  # noqa: E402
from serve_peers import make_model  # noqa: E402

# name: (head, layers, hidden, heads, route)
MODELS = {
    "embed-small": ("RoFormerModel", 4, 256, 4, "/embed"),
    "classify-small": ("RoFormerForSequenceClassification", 4, 256, 4, "/predict"),
    "embed-mid": ("RoFormerModel", 6, 384, 6, "/embed"),
}


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


def start(roformer, models, port, threads):
    args = [roformer, "serve", "--port", str(port), "--threads", str(threads), "--no-access-log"]
    for name, path in models:
        args += ["--model", f"{name}={path}"]
    p = subprocess.Popen(args, stderr=subprocess.DEVNULL)
    for _ in range(600):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return p
        except OSError:
            if p.poll() is not None:
                raise RuntimeError(f"the server exited with {p.returncode}")
            time.sleep(0.1)
    raise RuntimeError("the server did not start")


def load(port, routes, texts, concurrency, seconds):
    """Loads every (name, route) at once; answers per second of each."""
    out = {}
    headers = {"Content-Type": "application/json"}

    def one(name, route):
        out[name] = serve_load.run_level(f"http://127.0.0.1:{port}", route, texts[name], concurrency, seconds, {}, headers)

    threads = [threading.Thread(target=one, args=r) for r in routes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--roformer", required=True)
    ap.add_argument("--python", required=True, help="a Python with torch and transformers (to write the models)")
    ap.add_argument("--work", default="build/serve-models")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--concurrency", type=int, default=4, help="clients per model")
    ap.add_argument("--port", type=int, default=18640)
    ap.add_argument("--json")
    args = ap.parse_args()
    paths = {}
    texts = {}
    for name, (head, layers, hidden, heads, _) in MODELS.items():
        paths[name] = os.path.join(args.work, name)
        make_model(args.python, paths[name], head, layers, hidden, heads, num_labels=2)
        texts[name] = serve_load.make_texts(256, 32, 64, seed=0, english=False,
                                            words_file=os.path.join(paths[name], "vocab.txt"))
    alone, peak = {}, {}
    for name, (*_, route) in MODELS.items():
        p = start(args.roformer, [(name, paths[name])], args.port, args.threads)
        load(args.port, [(name, route)], texts, args.concurrency, 1)  # warm-up
        alone[name] = load(args.port, [(name, route)], texts, args.concurrency, args.seconds)[name]
        peak[name] = peak_rss_mib(p.pid)
        p.terminate()
        p.wait()
    p = start(args.roformer, list(paths.items()), args.port, args.threads)
    routes = [(name, f"/models/{name}{m[4]}") for name, m in MODELS.items()]
    load(args.port, routes, texts, args.concurrency, 1)
    together = load(args.port, routes, texts, args.concurrency, args.seconds)
    peak_together = peak_rss_mib(p.pid)
    p.terminate()
    p.wait()
    print(f"{'model':<16} {'alone ok/s':>10} {'share':>8} {'together ok/s':>13} {'of share':>8} {'alone peak MiB':>14}")
    for name in MODELS:
        a, t = alone[name]["ok_per_s"], together[name]["ok_per_s"]
        print(f"{name:<16} {a:>10} {a / 3:>8.1f} {t:>13} {t / (a / 3):>8.2f} {peak[name]:>14.1f}")
    print(f"peak RSS: one process with the three models {peak_together:.1f} MiB, "
          f"three single-model servers {sum(peak.values()):.1f} MiB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"alone": alone, "together": together, "peak_rss_mib_alone": peak,
                       "peak_rss_mib_together": peak_together, "threads": args.threads,
                       "concurrency": args.concurrency, "seconds": args.seconds}, f, indent=1)


if __name__ == "__main__":
    main()
