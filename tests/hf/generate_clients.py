# Real clients against `roformer serve` with a causal LM (`roformer train`'s): huggingface_hub's
# InferenceClient.text_generation (plain, details, stream=True) and OpenAI's completions.create (plain,
# stream, n, logprobs, stop) give `roformer generate`'s greedy text token for token, also for 8
# streams at once that join and leave the slots at different steps; seeded sampling repeats.
# Usage: generate_clients.py ROFORMER_BINARY FIXTURES WORK_DIR
import concurrent.futures
import json
import os
import subprocess
import sys
import time
import urllib.request

for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):  # InferenceClient calls the local server only
    os.environ.pop(name, None)
import huggingface_hub  # noqa: E402
import openai  # noqa: E402
from serve_process import Server  # noqa: E402

roformer, _fixtures, work = sys.argv[1:4]
text = os.path.join(work, "text.txt")
with open(text, "w") as f:
    for i in range(400):
        f.write(f"In the beginning God created the heaven and the earth, said verse {i % 17}. "
                "And the earth was without form, and void; and darkness was upon the face of the deep.\n")
run = os.path.join(work, "lm")
subprocess.run([roformer, "train", "--data", text, "--out", run, "--layers", "2", "--hidden", "64", "--heads", "2",
                "--ff", "128", "--seq", "64", "--batch", "8", "--steps", "60", "--max-positions", "128",
                "--eval-every", "0", "--sample-tokens", "0", "--threads", "1"],
               check=True, capture_output=True)
model = os.path.join(run, "step-000060")


def generate(prompt, tokens):  # `roformer generate`'s greedy continuation
    out = subprocess.run([roformer, "generate", "--model", model, "--prompt", prompt, "--tokens", str(tokens),
                          "--temperature", "0"], check=True, capture_output=True, text=True).stdout
    assert out.startswith(prompt) and out.endswith("\n"), out
    return out[len(prompt):-1]


prompts = ["In the beginning", "And the earth", "And", "darkness was upon the face of", "God created the heaven",
           "said verse 1", "void", "In the beginning God created the heaven and the earth, said verse 3. And"]
want = {p: generate(p, 30) for p in prompts}
server = Server(roformer, ["--model", model, "--slots", "4", "--prefill-chunk", "16"], os.path.join(work, "server.log"))
try:
    hub = huggingface_hub.InferenceClient(server.url)
    p = prompts[0]
    assert hub.text_generation(p, max_new_tokens=30) == want[p]
    d = hub.text_generation(p, max_new_tokens=30, details=True)
    assert d.generated_text == want[p] and d.details.finish_reason == "length" and d.details.generated_tokens == 30, d
    assert "".join(d.details.tokens[i].text for i in range(30)) == want[p]
    assert "".join(hub.text_generation(p, max_new_tokens=30, stream=True)) == want[p]
    events = list(hub.text_generation(p, max_new_tokens=30, stream=True, details=True))
    assert events[-1].generated_text == want[p] and events[-1].details.finish_reason == "length", events[-1]
    # Seeded sampling repeats; another seed differs somewhere in 5 tries.
    a = hub.text_generation(p, max_new_tokens=30, do_sample=True, temperature=1.3, seed=7)
    assert a == hub.text_generation(p, max_new_tokens=30, do_sample=True, temperature=1.3, seed=7)
    assert any(a != hub.text_generation(p, max_new_tokens=30, do_sample=True, temperature=1.3, seed=s) for s in range(5))

    oa = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
    r = oa.completions.create(model="lm", prompt=p, max_tokens=30, temperature=0)
    assert r.choices[0].text == want[p] and r.choices[0].finish_reason == "length", r
    assert r.usage.completion_tokens == 30 and r.usage.prompt_tokens == len(p), r.usage
    chunks = oa.completions.create(model="lm", prompt=p, max_tokens=30, temperature=0, stream=True)
    assert "".join(c.choices[0].text for c in chunks) == want[p]
    r = oa.completions.create(model="lm", prompt=prompts[:2], max_tokens=30, temperature=0, n=2, logprobs=2, echo=True)
    assert [c.index for c in r.choices] == [0, 1, 2, 3], r
    for c in r.choices:
        q = prompts[c.index // 2]
        assert c.text == q + want[q], (c.text, want[q])
        assert len(c.logprobs.tokens) == 30 and all(lp <= 0 for lp in c.logprobs.token_logprobs), c.logprobs
    stop = want[p][5:8]
    r = oa.completions.create(model="lm", prompt=p, max_tokens=30, temperature=0, stop=[stop])
    assert r.choices[0].text == want[p][:want[p].find(stop)] and r.choices[0].finish_reason == "stop", r

    # 8 streams at once over 4 slots: each gets its own greedy text, token for token.
    def stream(q):
        return q, "".join(c.choices[0].text for c in oa.completions.create(
            model="lm", prompt=q, max_tokens=30, temperature=0, stream=True))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        for q, got in pool.map(stream, prompts):
            assert got == want[q], (q, got, want[q])

    # A client that never reads its stream holds neither the model thread nor the other slots: a
    # stream of 100 tokens to a socket nobody reads, then greedy requests are answered as before.
    import socket  # noqa: E402
    idle = socket.create_connection(("127.0.0.1", server.port))
    body = json.dumps({"inputs": p, "parameters": {"max_new_tokens": 100}}).encode()
    idle.sendall(b"POST /generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    t = time.monotonic()
    assert oa.completions.create(model="lm", prompt=p, max_tokens=30, temperature=0).choices[0].text == want[p]
    assert time.monotonic() - t < 10, "a slow reader held the others"
    idle.close()

    # Errors: TEI's body, naming the field.
    for body, field in [({"inputs": p, "parameters": {"max_new_tokens": 1000}}, "max_new_tokens"),
                        ({"inputs": p, "parameters": {"repetition_penalty": 1.2}}, "repetition_penalty"),
                        ({"inputs": 3}, "inputs")]:
        req = urllib.request.Request(server.url + "/generate", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            urllib.request.urlopen(req)
            raise AssertionError(f"{body} was accepted")
        except urllib.error.HTTPError as e:
            assert e.code == 422 and field in json.loads(e.read())["error"], (body, e.code)
finally:
    server.stop()

# SIGTERM while streams run: every accepted stream is answered to its end, then the server exits 0.
# One slot: the streams run one after another; the signal comes once the last has sent its first token.
server = Server(roformer, ["--model", model, "--slots", "1"], os.path.join(work, "server-term.log"))
try:
    oa = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
    streams = [oa.completions.create(model="lm", prompt=q, max_tokens=90, temperature=0, stream=True)
               for q in prompts[:4]]
    firsts = [next(iter(st)).choices[0].text for st in streams]
    server.stop()  # asserts exit status 0 after every stream ended
    for q, first, st in zip(prompts[:4], firsts, streams):
        got = first + "".join(c.choices[0].text for c in st)
        assert len(got) == 90 and got.startswith(want[q]), (q, got)
except BaseException:
    server.process.kill()
    raise
print("generation: huggingface_hub and openai clients equal `roformer generate`")
