# Real clients against `roformer serve`: OpenAI's client.embeddings.create and huggingface_hub's
# InferenceClient (translation() too, on an encoder-decoder) give the command line's answers on the
# same inputs, also with two models in one server, picked by OpenAI's `model` or the /models/NAME URL.
# Usage: serve_clients.py ROFORMER_BINARY FIXTURES WORK_DIR
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
import urllib.request

import huggingface_hub
import openai
import torch
import transformers
from serve_process import case1_dir

roformer, fixtures, work = sys.argv[1:4]
model = case1_dir(fixtures, os.path.join(work, "case1"))

# A sentiment-style classifier made by transformers from the same encoder (its head seeded).
classifier = os.path.join(work, "classifier")
torch.manual_seed(0)
head = transformers.RoFormerForSequenceClassification.from_pretrained(
    model, num_labels=2, id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1})
head.save_pretrained(classifier, safe_serialization=True)
for f in ("vocab.txt", "tokenizer_config.json", "special_tokens_map.json"):
    shutil.copy(os.path.join(model, f), classifier)

texts = ["hello world", "今天天气非常好。", "a b c"]


def cli(*args, lines):
    out = subprocess.run([roformer, *args], input="\n".join(lines) + "\n", capture_output=True, text=True,
                         check=True).stdout
    return [json.loads(line) for line in out.splitlines()]


def close(a, b, tol=1e-5):
    assert len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b)) <= tol, (a, b)


class Server:
    def __init__(self, *args):
        self.log = open(os.path.join(work, f"server{abs(hash(args))}.log"), "w+")
        self.process = subprocess.Popen([roformer, "serve", "--port", "0", *args], stderr=self.log)
        self.port = None
        for _ in range(600):
            self.log.seek(0)
            m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.log.read())
            if m:
                self.port = int(m.group(1))
                break
            time.sleep(0.1)
        assert self.port, "the server did not start"
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.process.send_signal(signal.SIGTERM)
        status = self.process.wait(timeout=60)
        assert status == 0, f"exit status {status}"


want = [r["embedding"] for r in cli("embed", "--normalize", "--model", model, lines=texts)]

# ---- OpenAI's client on /v1/embeddings ----
server = Server("--model", model, "--api-key", "k")
try:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="k")
    r = client.embeddings.create(model="case1", input=texts)
    assert [d.index for d in r.data] == [0, 1, 2], r
    assert r.model == "case1" and r.usage.prompt_tokens > 0, r
    for d, w in zip(r.data, want):
        close(d.embedding, w)
    raw = client.embeddings.create(model="case1", input=texts[0], encoding_format="base64").data[0].embedding
    if isinstance(raw, str):  # older clients hand base64 through as it is
        raw = list(struct.unpack(f"<{len(base64.b64decode(raw)) // 4}f", base64.b64decode(raw)))
    close(raw, want[0])
    try:
        openai.OpenAI(base_url=f"{server.url}/v1", api_key="wrong").embeddings.create(model="x", input="a")
        raise AssertionError("a wrong key was accepted")
    except openai.AuthenticationError:
        pass

    # ---- huggingface_hub's InferenceClient, pointed at the server's URLs ----
    hub = huggingface_hub.InferenceClient(model=f"{server.url}/embed", token="k")
    vector = hub.feature_extraction(texts[1])  # TEI normalises by default
    close(list(vector.reshape(-1)), want[1])
    root = huggingface_hub.InferenceClient(model=server.url, token="k")  # POST / dispatches by the body
    sims = root.sentence_similarity(texts[0], other_sentences=texts[1:])
    want_sims = [r["similarity"] for r in cli("similarity", "--model", model,
                                                lines=[f"{texts[0]}\t{t}" for t in texts[1:]])]
    close(sims, want_sims)
    masked = "hello [MASK] world"
    filled = huggingface_hub.InferenceClient(model=f"{server.url}/fill-mask", token="k").fill_mask(masked)
    want_fill = cli("fill-mask", "--model", model, lines=[masked])[0]
    assert [f.token for f in filled] == [w["token"] for w in want_fill], (filled, want_fill)
    assert [f.sequence for f in filled] == [w["sequence"] for w in want_fill], (filled, want_fill)
    close([f.score for f in filled], [w["score"] for w in want_fill])

    # ---- /embed_all and /embed_sparse against transformers' RoFormerModel and RoFormerForMaskedLM ----
    # (the server's own token ids: the comparison is of the model, not of two tokenizers)
    mlm = transformers.RoFormerForMaskedLM.from_pretrained(model).eval()
    encoder = transformers.RoFormerModel.from_pretrained(model).eval()
    headers = {"Authorization": "Bearer k", "Content-Type": "application/json"}

    def post(path, body):
        req = urllib.request.Request(server.url + path, data=json.dumps(body).encode(), headers=headers)
        with urllib.request.urlopen(req) as r:
            return json.loads(r.read())

    all_tokens = post("/embed_all", {"inputs": texts})
    sparse = post("/embed_sparse", {"inputs": texts})
    for i, text in enumerate(texts):
        ids = [t["id"] for t in post("/tokenize", {"inputs": text})[0]]
        with torch.no_grad():
            hidden = encoder(input_ids=torch.tensor([ids])).last_hidden_state[0]
            splade = torch.log1p(torch.relu(mlm(input_ids=torch.tensor([ids])).logits[0])).max(dim=0).values
        assert len(all_tokens[i]) == len(ids), (len(all_tokens[i]), len(ids))
        err = (torch.tensor(all_tokens[i]) - hidden).abs().max().item()
        assert err <= 1e-4, f"/embed_all: max |ours - RoFormerModel| = {err}"
        dense = torch.zeros_like(splade)  # ours, its absent entries 0
        for e in sparse[i]:
            assert e["value"] > 0, e
            dense[e["index"]] = e["value"]
        err = (dense - splade).abs().max().item()
        assert err <= 1e-4, f"/embed_sparse: max |ours - log1p(relu(RoFormerForMaskedLM logits))| = {err}"
        assert len(sparse[i]) >= (splade > 1e-4).sum().item() > 0, (len(sparse[i]), splade)
finally:
    server.stop()

server = Server("--model", classifier)
try:
    hub = huggingface_hub.InferenceClient(model=server.url)
    want_cls = cli("classify", "--model", classifier, lines=texts)
    for text, w in zip(texts, want_cls):
        got = hub.text_classification(text)
        top = got[0] if isinstance(got, list) else got  # hub 0.23 hands back TEI's best label
        assert top.label == w["label"], (top, w)
        assert abs(top.score - w["score"]) <= 1e-5, (top, w)
    # transformers' own classifier on the same text agrees with the label.
    tokenizer = transformers.BertTokenizer.from_pretrained(classifier)
    with torch.no_grad():
        logits = head(**tokenizer(texts[0], return_tensors="pt")).logits[0]
    assert head.config.id2label[int(logits.argmax())] == want_cls[0]["label"], (logits, want_cls[0])
finally:
    server.stop()
# ---- Two models in one server: OpenAI's `model` and huggingface_hub's model URL (/models/NAME) pick one ----
server = Server("--model", f"mlm={model}", "--model", f"cls={classifier}")
try:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="none")
    assert [m.id for m in client.models.list().data] == ["mlm", "cls"]
    for name, path in (("mlm", model), ("cls", classifier)):
        want = cli("embed", "--normalize", "--model", path, lines=texts)
        got = client.embeddings.create(model=name, input=texts)
        assert got.model == name, got.model
        for g, w in zip(got.data, want):
            close(g.embedding, w["embedding"])
    try:
        client.embeddings.create(model="nope", input="a")
        raise AssertionError("an unknown model was answered")
    except openai.NotFoundError as e:
        assert "served: mlm, cls" in e.response.text, e.response.text
    hub = huggingface_hub.InferenceClient(model=f"{server.url}/models/cls")
    for text, w in zip(texts, want_cls):
        got = hub.text_classification(text)
        top = got[0] if isinstance(got, list) else got
        assert top.label == w["label"] and abs(top.score - w["score"]) <= 1e-5, (top, w)
finally:
    server.stop()
# ---- huggingface_hub's translation() on an encoder-decoder (translate-train's, on a toy corpus) ----
pairs = os.path.join(work, "pairs.tsv")
with open(pairs, "w") as f:
    en, es = "one two three four five".split(), "uno dos tres cuatro cinco".split()
    for i in range(300):
        idx = [(i * 7 + k * 3) % 5 for k in range(2 + i % 4)]
        f.write(" ".join(en[j] for j in idx) + "\t" + " ".join(es[j] for j in idx) + "\n")
subprocess.run([roformer, "translate-train", "--train", pairs, "--validation", pairs, "--out", os.path.join(work, "mt"),
                "--vocab-size", "30", "--layers", "1", "--hidden", "32", "--heads", "2", "--ff", "64",
                "--max-positions", "32", "--steps", "20", "--warmup", "5", "--lr", "3e-3", "--eval-every", "20",
                "--bleu-sentences", "4", "--no-progress"], check=True, capture_output=True)
mt = os.path.join(work, "mt", "step-000020")
sources = ["one two three", "five four"]
want_mt = subprocess.run([roformer, "translate", "--model", mt], input="\n".join(sources) + "\n", capture_output=True,
                         text=True, check=True).stdout.splitlines()
server = Server("--model", mt)
try:
    hub = huggingface_hub.InferenceClient(model=server.url)
    for source, w in zip(sources, want_mt):
        got = hub.translation(source)  # POST / with {"inputs": text}
        assert got.translation_text == w, (got, w)
finally:
    server.stop()
print(f"openai {openai.__version__}, huggingface_hub {huggingface_hub.__version__}: ok")
