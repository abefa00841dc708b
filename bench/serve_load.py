#!/usr/bin/env python3
# Load generator for `roformer serve` (standard library only; loopback, bounded in time): at each
# concurrency, that many client threads each keep one HTTP/1.1 connection and post batch-1 requests
# back to back for --seconds. Reports per level: requests, answers by status, connection errors,
# throughput (answers/s), p50/p99/max latency of 200s, and the server's RSS before and after
# (--pid). Optional SIGTERM to the server mid-run (--sigterm-after) checks shutdown under load.
#
#   bench/serve_load.py --url http://127.0.0.1:8080 --concurrency 1 8 32 128 --seconds 30 --pid PID
#   bench/serve_load.py ... --json out.json          # the table's numbers as JSON too
import argparse
import http.client
import json
import os
import random
import signal
import sys
import threading
import time
import urllib.parse


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def make_texts(n, words_lo, words_hi, seed, english, words_file=None):
    rng = random.Random(seed)
    vocab = ["hello", "world", "the", "weather", "is", "fine", "today", "a", "b", "c", "model", "rotary",
             "position", "embedding"]
    if words_file:  # e.g. the words of the model's vocab.txt: a token each
        with open(words_file) as f:
            vocab = [w.strip() for w in f if w.strip() and not w.startswith("[") and not w.startswith("##")]
    elif not english:  # Chinese characters are a token each: a text is then longer than its word count
        vocab += ["今天", "天气", "非常", "好", "我", "要", "去", "上班"]
    return [" ".join(rng.choice(vocab) for _ in range(rng.randint(words_lo, words_hi))) for _ in range(n)]


def run_level(url, route, texts, concurrency, seconds, extra, headers, input_key="inputs", as_list=False):
    parsed = urllib.parse.urlparse(url)
    deadline = time.monotonic() + seconds
    lock = threading.Lock()
    latencies, statuses, errors = [], {}, []

    def worker(k):
        conn = None
        i = k
        while time.monotonic() < deadline:
            body = dict(extra)
            body[input_key] = [texts[i % len(texts)]] if as_list else texts[i % len(texts)]
            i += concurrency
            data = json.dumps(body)
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
                conn.request("POST", route, body=data, headers=headers)
                res = conn.getresponse()
                res.read()
                status = res.status
                if res.getheader("Connection", "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException) as e:
                with lock:
                    errors.append(type(e).__name__)
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(0.01)
                continue
            dt = time.perf_counter() - t0
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                if status == 200:
                    latencies.append(dt)
        if conn is not None:
            conn.close()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(concurrency)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    latencies.sort()

    def pct(p):
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {"concurrency": concurrency, "seconds": round(wall, 2), "statuses": statuses,
            "connection_errors": len(errors), "ok_per_s": round(len(latencies) / wall, 1),
            "p50_ms": round(pct(0.5), 2), "p99_ms": round(pct(0.99), 2),
            "max_ms": round(latencies[-1] * 1000, 2) if latencies else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--url", required=True)
    ap.add_argument("--route", default="/embed")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32, 128])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--words", type=int, nargs=2, default=[24, 96], help="words per text (about tokens)")
    ap.add_argument("--pid", type=int, help="the server's pid, for RSS")
    ap.add_argument("--api-key")
    ap.add_argument("--sigterm-after", type=float, help="send SIGTERM to --pid this many seconds into the run")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--truncate", action="store_true")
    ap.add_argument("--input-key", default="inputs", help="the body's text field (OpenAI's: input)")
    ap.add_argument("--as-list", action="store_true", help="send the text as a one-element list")
    ap.add_argument("--body", default="{}", help="more fields of every body, as JSON (e.g. '{\"model\": \"m\"}')")
    ap.add_argument("--words-file", help="draw the words from this file, one per line (e.g. a vocab.txt)")
    ap.add_argument("--english", action="store_true",
                    help="English words only (a word-level vocabulary gives a token per word: --words is the length)")
    args = ap.parse_args()
    if args.seconds <= 0 or args.seconds > 3600:
        sys.exit("--seconds must be in (0, 3600]")
    texts = make_texts(512, args.words[0], args.words[1], seed=0, english=args.english, words_file=args.words_file)
    headers = {"Content-Type": "application/json"}
    if args.api_key:
        headers["Authorization"] = f"Bearer {args.api_key}"
    extra = json.loads(args.body)
    if args.truncate:
        extra["truncate"] = True
    if args.sigterm_after is not None:
        threading.Timer(args.sigterm_after, lambda: os.kill(args.pid, signal.SIGTERM)).start()
    results = {"route": args.route, "levels": []}
    rss0 = rss_kib(args.pid) if args.pid else None
    print(f"{'conc':>5} {'ok/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  statuses  conn-errors  RSS MiB")
    for c in args.concurrency:
        r = run_level(args.url, args.route, texts, c, args.seconds, extra, headers, args.input_key, args.as_list)
        r["rss_kib"] = rss_kib(args.pid) if args.pid else None
        results["levels"].append(r)
        rss = f"{r['rss_kib'] / 1024:.1f}" if r["rss_kib"] else "-"
        print(f"{c:>5} {r['ok_per_s']:>8} {r['p50_ms']:>8} {r['p99_ms']:>8} {str(r['max_ms']):>8}  "
              f"{json.dumps(r['statuses'])}  {r['connection_errors']}  {rss}", flush=True)
    results["rss_kib_start"] = rss0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
