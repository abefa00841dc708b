# `roformer serve` under load and shutdown (ctest serve_load), driving bench/serve_load.py for a few
# seconds per level on the roformer-hf case1 fixture:
# - below --max-concurrent-requests (concurrency 1 and 8 against a limit of 16) every request is 200,
#   with no connection errors; above it (64) the answers are 200s and 429s only, some of each;
# - the server's RSS grows by less than 64 MiB from the first level to the last (no leak per request;
#   not checked with --sanitized: AddressSanitizer's quarantine keeps freed memory);
# - SIGTERM in the middle of a concurrency-16 run: no 5xx, every answer a 200 or 429, exit status 0;
# - generation (a causal LM that `roformer train` makes in 3 steps, slots and step-level batching):
#   TGI's /generate at concurrency 8 is all 200s, at 64 against a limit of 16 200s and 429s; then
#   SIGTERM in the middle of a concurrency-16 run of /generate_stream (server-sent events): the streams
#   already running end, new requests meanwhile get 503, nothing else, exit status 0.
# Usage: serve_load_test.py ROFORMER_BINARY FIXTURES WORK_DIR [--sanitized]
import json
import os
import re
import shutil
import subprocess
import sys
import time

roformer, fixtures, work = sys.argv[1:4]
sanitized = "--sanitized" in sys.argv[4:]
here = os.path.dirname(os.path.abspath(__file__))
load = os.path.join(here, "..", "..", "bench", "serve_load.py")
shutil.rmtree(work, ignore_errors=True)
model = os.path.join(work, "case1")
os.makedirs(model)
for f in ("config.json", "model.safetensors"):
    shutil.copy(os.path.join(fixtures, "case1_mlm_basic", f), model)
for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(fixtures, "tokenizer", f), model)


def start(*args, served=model):
    log = open(os.path.join(work, f"server{len(os.listdir(work))}.log"), "w+")
    p = subprocess.Popen([roformer, "serve", "--model", served, "--port", "0", "--no-access-log", *args], stderr=log)
    for _ in range(600):
        log.seek(0)
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            return p, f"http://127.0.0.1:{m.group(1)}", log
        time.sleep(0.1)
    raise AssertionError("the server did not start")


def run(url, pid, levels, seconds, *extra, truncate=True):
    out = os.path.join(work, "load.json")
    subprocess.run([sys.executable, load, "--url", url, "--pid", str(pid), "--seconds", str(seconds),
                    *(["--truncate"] if truncate else []), "--json", out, "--concurrency", *map(str, levels), *extra],
                   check=True)
    with open(out) as f:
        return json.load(f)["levels"]


server, url, log = start("--max-concurrent-requests", "16")
try:
    run(url, server.pid, [2], 1)  # warm-up: the first forwards allocate the activations
    below = run(url, server.pid, [1, 8], 2)
    for level in below:
        assert level["statuses"] == {"200": level["statuses"].get("200", 0)} and level["statuses"]["200"] > 0, level
        assert level["connection_errors"] == 0, level
    above = run(url, server.pid, [64], 3)[0]
    assert set(above["statuses"]) <= {"200", "429"}, above
    assert above["statuses"].get("200", 0) > 0 and above["statuses"].get("429", 0) > 0, above
    assert above["connection_errors"] == 0, above
    growth = (above["rss_kib"] - below[0]["rss_kib"]) / 1024
    assert sanitized or growth < 64, f"RSS grew by {growth:.1f} MiB"
finally:
    server.terminate()
    assert server.wait(timeout=60) == 0

server, url, log = start("--max-concurrent-requests", "64")
levels = run(url, server.pid, [16], 4, "--sigterm-after", "1.5")
status = server.wait(timeout=60)
log.seek(0)
assert status == 0, f"exit status {status}: {log.read()}"
assert set(levels[0]["statuses"]) <= {"200", "429"} and levels[0]["statuses"].get("200", 0) > 0, levels

lm_dir = os.path.join(work, "lm")
os.makedirs(lm_dir)
with open(os.path.join(lm_dir, "text.txt"), "w") as f:
    f.writelines(f"In the beginning God created the heaven and the earth, said verse {i % 17}.\n" for i in range(100))
subprocess.run([roformer, "train", "--data", os.path.join(lm_dir, "text.txt"), "--out", os.path.join(lm_dir, "run"),
                "--layers", "1", "--hidden", "32", "--heads", "2", "--ff", "64", "--seq", "32", "--batch", "4",
                "--steps", "3", "--max-positions", "64", "--eval-every", "0", "--sample-tokens", "0", "--threads", "1"],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
lm = os.path.join(lm_dir, "run", "step-000003")
generate = ["--route", "/generate", "--words", "2", "4", "--english",
            "--body", json.dumps({"parameters": {"max_new_tokens": 8, "do_sample": True, "seed": 1}})]
server, url, log = start("--max-concurrent-requests", "16", "--slots", "8", served=lm)
try:
    run(url, server.pid, [2], 1, *generate, truncate=False)
    level = run(url, server.pid, [8], 2, *generate, truncate=False)[0]
    assert level["statuses"] == {"200": level["statuses"].get("200", 0)} and level["statuses"]["200"] > 0, level
    assert level["connection_errors"] == 0, level
    above = run(url, server.pid, [64], 2, *generate, truncate=False)[0]
    assert set(above["statuses"]) <= {"200", "429"}, above
    assert above["statuses"].get("200", 0) > 0 and above["statuses"].get("429", 0) > 0, above
finally:
    server.terminate()
    assert server.wait(timeout=60) == 0

server, url, log = start("--max-concurrent-requests", "64", "--slots", "8", served=lm)
stream = [a if a != "/generate" else "/generate_stream" for a in generate]
levels = run(url, server.pid, [16], 3, *stream, "--sigterm-after", "1.5", truncate=False)
status = server.wait(timeout=60)
log.seek(0)
assert status == 0, f"exit status {status}: {log.read()}"
assert set(levels[0]["statuses"]) <= {"200", "503"} and levels[0]["statuses"].get("200", 0) > 0, levels
print("serve under load: ok")
