# client.embeddings.create (the openai package) against `roformer serve`: the vectors equal
# `roformer embed --normalize`'s. Usage: serve_openai.py ROFORMER_BINARY FIXTURES WORK_DIR
import base64
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

import openai

roformer, fixtures, work = sys.argv[1:4]
model = os.path.join(work, "case1")
os.makedirs(model, exist_ok=True)
for f in ("config.json", "model.safetensors"):
    shutil.copy(os.path.join(fixtures, "case1_mlm_basic", f), model)
for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(fixtures, "tokenizer", f), model)

texts = ["hello world", "今天天气非常好。", "a b c"]
out = subprocess.run([roformer, "embed", "--normalize", "--model", model], input="\n".join(texts) + "\n",
                     capture_output=True, text=True, check=True).stdout
want = [json.loads(line)["embedding"] for line in out.splitlines()]

log = open(os.path.join(work, "server.log"), "w+")
server = subprocess.Popen([roformer, "serve", "--model", model, "--port", "0", "--api-key", "k"], stderr=log)
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
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="k")
    r = client.embeddings.create(model="case1", input=texts)
    assert [d.index for d in r.data] == [0, 1, 2], r
    assert r.model == "case1" and r.usage.prompt_tokens > 0, r
    for d, w in zip(r.data, want):
        assert max(abs(a - b) for a, b in zip(d.embedding, w)) <= 1e-5, (d.embedding, w)
    raw = client.embeddings.create(model="case1", input=texts[0], encoding_format="base64").data[0].embedding
    if isinstance(raw, str):  # older clients hand base64 through as it is
        raw = list(struct.unpack(f"<{len(base64.b64decode(raw)) // 4}f", base64.b64decode(raw)))
    assert max(abs(a - b) for a, b in zip(raw, want[0])) <= 1e-5
    try:
        openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong").embeddings.create(model="x", input="a")
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass
finally:
    server.send_signal(signal.SIGTERM)
    status = server.wait(timeout=60)
assert status == 0, f"exit status {status}"
print("openai client: ok")
