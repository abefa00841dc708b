"""`--model org/name[@revision]` resolved offline in a Hugging Face cache laid out by hand as huggingface_hub
lays it out (models--org--name/refs/<revision> holding a commit hash, snapshots/<hash>/ the files, blobs/
the bytes they link to), checked against huggingface_hub's own reading of the same cache
(try_to_load_from_cache, scan_cache_dir): the snapshot our commands load is the one huggingface_hub
names, for the default branch, a branch, a commit hash and $HF_HOME; `roformer embed`, `tokenize` and
`serve` given the id answer as given the directory; an existing directory wins over an id; a missing id
or revision is one error line naming the cache and the refs file.
Usage: hub_cache_vs_hf.py ROFORMER_BINARY FIXTURES WORK_DIR (run by jieba_py.sh)"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import urllib.request

import huggingface_hub
from huggingface_hub import scan_cache_dir, try_to_load_from_cache
from serve_process import Server

roformer, fixtures, work = sys.argv[1:4]
cache = os.path.join(work, "hub")
repo = os.path.join(cache, "models--org--roformer-tiny")
shutil.rmtree(cache, ignore_errors=True)
FILES = {"config.json": "case1_mlm_basic", "model.safetensors": "case1_mlm_basic", "vocab.txt": "tokenizer",
         "tokenizer_config.json": "tokenizer", "special_tokens_map.json": "tokenizer"}


def snapshot(commit, files):
    """snapshots/<commit>/<file> as relative links to blobs/<sha256>, as hf_hub_download makes them."""
    os.makedirs(os.path.join(repo, "blobs"), exist_ok=True)
    os.makedirs(os.path.join(repo, "snapshots", commit), exist_ok=True)
    for name, src in files.items():
        data = open(src, "rb").read()
        blob = hashlib.sha256(data).hexdigest()
        open(os.path.join(repo, "blobs", blob), "wb").write(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), os.path.join(repo, "snapshots", commit, name))


def ref(name, commit):
    path = os.path.join(repo, "refs", name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").write(commit)  # no newline, as huggingface_hub writes it


main, other = "a" * 40, "b" * 40
snapshot(main, {n: os.path.join(fixtures, d, n) for n, d in FILES.items()})
snapshot(other, {n: os.path.join(fixtures, "case2_embproj_rotary_value", n) for n in ("config.json", "model.safetensors", "vocab.txt")})
ref("main", main)
ref("v2", other)

env = {**os.environ, "HF_HUB_CACHE": cache}
env.pop("HF_HOME", None)


def run(*args, ok=True, lines=("hello world", "a b c"), environ=env):
    r = subprocess.run([roformer, *args], input="\n".join(lines) + "\n", capture_output=True, text=True, env=environ)
    assert (r.returncode == 0) == ok, (args, r.returncode, r.stderr)
    return r


# huggingface_hub's reading of the cache, the oracle of which snapshot an id names.
for spec, revision, commit in [("org/roformer-tiny", None, main), ("org/roformer-tiny@main", "main", main),
                               ("org/roformer-tiny@v2", "v2", other), ("org/roformer-tiny@" + other, other, other)]:
    hf = try_to_load_from_cache("org/roformer-tiny", "config.json", cache_dir=cache, revision=revision)
    assert hf == os.path.join(repo, "snapshots", commit, "config.json"), hf
    ours = run("embed", "--model", spec).stdout
    want = run("embed", "--model", os.path.dirname(hf)).stdout
    assert ours == want and ours, (spec, ours[:200], want[:200])
info = scan_cache_dir(cache)
(cached,) = info.repos
assert cached.repo_id == "org/roformer-tiny" and {r.commit_hash for r in cached.revisions} == {main, other}, info
assert {r.commit_hash: r.refs for r in cached.revisions} == {main: frozenset({"main"}), other: frozenset({"v2"})}
# case1 and case2 differ: the revision is not ignored.
assert run("embed", "--model", "org/roformer-tiny").stdout != run("embed", "--model", "org/roformer-tiny@v2").stdout
run("tokenize", "--model", "org/roformer-tiny")

# $HF_HOME/hub when $HF_HUB_CACHE is unset.
home = os.path.join(work, "hf_home")
os.makedirs(home, exist_ok=True)
if not os.path.exists(os.path.join(home, "hub")):
    os.symlink(cache, os.path.join(home, "hub"))
env_home = {**env, "HF_HOME": home}
env_home.pop("HF_HUB_CACHE")
assert run("embed", "--model", "org/roformer-tiny", environ=env_home).stdout == run("embed", "--model", "org/roformer-tiny").stdout

# An existing directory wins over an id.
local = os.path.join(work, "org", "roformer-tiny")
shutil.rmtree(local, ignore_errors=True)
shutil.copytree(os.path.join(repo, "snapshots", other), local)
r = subprocess.run([roformer, "embed", "--model", "org/roformer-tiny"], input="hello world\n", capture_output=True,
                   text=True, env=env, cwd=work, check=True)
assert r.stdout.splitlines()[0] == run("embed", "--model", "org/roformer-tiny@v2").stdout.splitlines()[0]

# Missing: one line naming the cache and what was looked for.
r = run("embed", "--model", "org/missing", ok=False)
assert len(r.stderr.strip().splitlines()) == 1 and cache in r.stderr and "models--org--missing" in r.stderr, r.stderr
r = run("embed", "--model", "org/roformer-tiny@v3", ok=False)
assert os.path.join(repo, "refs", "v3") in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
assert try_to_load_from_cache("org/roformer-tiny", "config.json", cache_dir=cache, revision="v3") is None

# roformer serve with an id: /info names the repository.
server = Server(roformer, ["--model", "org/roformer-tiny"], os.path.join(work, "serve.log"), env=env)
try:
    with urllib.request.urlopen(f"{server.url}/info") as resp:
        assert json.loads(resp.read())["model_id"] == "org/roformer-tiny"
finally:
    server.stop()
print(f"huggingface_hub {huggingface_hub.__version__}: ids resolve to the snapshots it names")
