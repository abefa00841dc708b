"""sentence-transformers folders: `roformer embed`, `roformer serve` and the Python API give
SentenceTransformer(dir).encode's vectors (sentence-transformers 2.7.0 on transformers 4.40.2) within 1e-4.
The folders are written by sentence-transformers itself (SentenceTransformer(modules=[...]).save(dir)) over
the roformer-hf case1 fixture: every pooling mode alone and all six together, Dense modules (Tanh with a
bias, Identity without one, two chained), Normalize, prompts (prompt_name, default_prompt_name, and a
Pooling with include_prompt false, which leaves the prompt's tokens out), and --pooling overriding the
folder's modules. Skips (77) without sentence_transformers.
Usage: sentence_transformers_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import rjieba_shim  # noqa: F401  (before transformers)
import torch
from serve_process import Server, case1_dir

try:
    import sentence_transformers
    from sentence_transformers import SentenceTransformer, models
except ImportError as e:
    print(f"skipped: {e} (scripts/hf-env.sh installs sentence-transformers 2.7.0)")
    sys.exit(77)

roformer, fixtures, work = sys.argv[1:4]
base = case1_dir(fixtures, os.path.join(work, "case1"))

texts = ["hello world", "今天天气非常好。", "a b c d e f g", "the quick brown fox jumps over the lazy dog"]
MODES = ["cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens", "lasttoken"]
PROMPTS = {"query": "query: ", "passage": "passage about "}


def folder(name, modes, dense=(), normalize=False, include_prompt=True, default_prompt=None):
    torch.manual_seed(len(name))
    t = models.Transformer(base)
    H = t.get_word_embedding_dimension()
    kw = {f"pooling_mode_{m}": m in modes for m in MODES}
    mods = [t, models.Pooling(H, include_prompt=include_prompt, **kw)]
    width = H * len(modes)
    for out, bias, act in dense:
        mods.append(models.Dense(width, out, bias=bias, activation_function=act))
        width = out
    if normalize:
        mods.append(models.Normalize())
    path = os.path.join(work, name)
    SentenceTransformer(modules=mods, prompts=PROMPTS, default_prompt_name=default_prompt).save(path)
    return path


def embed(path, *args, lines=texts):
    out = subprocess.run([roformer, "embed", "--model", path, *args], input="\n".join(lines) + "\n",
                         capture_output=True, text=True, check=True).stdout
    return [json.loads(line)["embedding"] for line in out.splitlines()]


def close(ours, want, what, tol=1e-4):
    assert len(ours) == len(want), (what, len(ours), len(want))
    for a, b in zip(ours, want):
        assert len(a) == len(b), (what, len(a), len(b))
        err = max(abs(x - float(y)) for x, y in zip(a, b))
        assert err <= tol, f"{what}: max |ours - sentence-transformers| = {err}"


cases = [(f"pool_{m}", [m], (), False) for m in MODES]
cases += [("pool_all", MODES, (), False),
          ("dense_tanh", ["mean_tokens"], [(32, True, torch.nn.Tanh())], False),
          ("dense_identity_normalize", ["cls_token", "max_tokens"], [(48, False, torch.nn.Identity())], True),
          ("dense_two_normalize", ["weightedmean_tokens"], [(40, True, torch.nn.ReLU()), (24, True, torch.nn.GELU())], True),
          ("normalize", ["lasttoken"], (), True)]
checked = 0
for name, modes, dense, normalize in cases:
    path = folder(name, modes, dense, normalize)
    st = SentenceTransformer(path, device="cpu")
    close(embed(path), st.encode(texts), name)
    checked += 1
    if dense:  # prompts: as in the folders below
        close(embed(path, "--prompt-name", "query"), st.encode(texts, prompt_name="query"), name + " prompt_name")
        checked += 1

# The folder's default_prompt_name, and include_prompt false (the prompt's tokens left out of the pooling).
path = folder("default_prompt", ["mean_tokens"], default_prompt="passage")
st = SentenceTransformer(path, device="cpu")
close(embed(path), st.encode(texts), "default_prompt_name")
close(embed(path, "--prompt-name", "query"), st.encode(texts, prompt_name="query"), "default_prompt_name overridden")
out = subprocess.run([roformer, "similarity", "--model", path], input=f"{texts[0]}\t{texts[1]}\n{texts[2]}\t{texts[3]}\n",
                     capture_output=True, text=True, check=True).stdout
e = torch.nn.functional.normalize(torch.tensor(st.encode(texts)), dim=1)
close([[json.loads(line)["similarity"] for line in out.splitlines()]],
      [[float(e[0] @ e[1]), float(e[2] @ e[3])]], "similarity with the default prompt")
excl = folder("exclude_prompt", ["mean_tokens", "lasttoken", "cls_token"], include_prompt=False)
st_excl = SentenceTransformer(excl, device="cpu")
close(embed(excl, "--prompt-name", "passage"), st_excl.encode(texts, prompt_name="passage"), "include_prompt false")
checked += 3

# --pooling overrides the folder's modules: the hidden states pooled so, as sentence-transformers' bare Pooling.
dense_path = os.path.join(work, "dense_tanh")
bare = SentenceTransformer(modules=[models.Transformer(base), models.Pooling(64, "max")], device="cpu")
close(embed(dense_path, "--pooling", "max"), bare.encode(texts), "--pooling max over a Dense folder")
checked += 1

# A folder whose Dense config does not chain is one error line naming the file.
broken = os.path.join(work, "broken")
shutil.copytree(dense_path, broken)
cfg = json.load(open(os.path.join(broken, "2_Dense", "config.json")))
cfg["in_features"] = 65
json.dump(cfg, open(os.path.join(broken, "2_Dense", "config.json"), "w"))
r = subprocess.run([roformer, "embed", "--model", broken], input="x\n", capture_output=True, text=True)
assert r.returncode != 0 and "2_Dense/config.json: in_features 65" in r.stderr, r.stderr
r = subprocess.run([roformer, "embed", "--model", dense_path, "--prompt-name", "nope"], input="x\n",
                   capture_output=True, text=True)
assert r.returncode != 0 and "prompt_name 'nope' is not a prompt of" in r.stderr, r.stderr


# ---- roformer serve: /embed with prompt_name, /v1/embeddings, /info ----
def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


path = os.path.join(work, "dense_two_normalize")
st = SentenceTransformer(path, device="cpu")
server = Server(roformer, ["--model", path, "--default-prompt-name", "passage"], os.path.join(work, "serve.log"))
try:
    url = server.url
    status, got = post(url + "/embed", {"inputs": texts, "prompt_name": "query"})
    assert status == 200, got
    close(got, st.encode(texts, prompt_name="query"), "serve /embed prompt_name")
    status, got = post(url + "/embed", {"inputs": texts})  # --default-prompt-name
    close(got, st.encode(texts, prompt_name="passage"), "serve /embed --default-prompt-name")
    status, got = post(url + "/v1/embeddings", {"input": texts, "prompt_name": "query", "dimensions": 24})
    assert status == 200, got
    close([d["embedding"] for d in got["data"]], st.encode(texts, prompt_name="query"), "serve /v1/embeddings")
    status, got = post(url + "/embed", {"inputs": texts, "prompt_name": "nope"})
    assert status == 422 and "prompt_name" in got["error"], got
    status, got = post(url + "/embed", {"inputs": [[1, 2, 3]], "prompt_name": "query"})
    assert status == 422 and "token ids take no prompt" in got["error"], got
    with urllib.request.urlopen(url + "/info") as r:
        info = json.loads(r.read())
    assert info["model_type"] == {"embedding": {"pooling": "weightedmean"}}, info
finally:
    server.stop()
checked += 3

print(f"sentence-transformers {sentence_transformers.__version__}: {checked} comparisons within 1e-4")
