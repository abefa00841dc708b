"""roformer.Model and roformer.Tokenizer against the roformer-hf fixtures (transformers 4.40.2's outputs,
within the fixtures' tolerance 1e-5 + 1e-4·|HF|) and against the command line (`roformer embed`,
`fill-mask`, `classify`: the same numbers). ROFORMER_FIXTURES and ROFORMER_CLI locate them
(scripts/python-test.sh sets both)."""
import json
import os
import struct
import subprocess

import numpy as np
import pytest

import roformer

FIXTURES = os.environ.get("ROFORMER_FIXTURES", os.path.join(os.path.dirname(__file__), "../../../shared/fixtures/roformer-hf"))
CLI = os.environ.get("ROFORMER_CLI", "")
CASE1 = os.path.join(FIXTURES, "case1_mlm_basic")


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype = {"F32": np.float32, "I64": np.int64}[t["dtype"]]
        a, b = t["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype=dtype).reshape(t["shape"])
    return out


def close(actual, expected):
    return np.all(np.abs(actual - expected) <= 1e-5 + 1e-4 * np.abs(expected))


@pytest.mark.parametrize("case", ["case1_mlm_basic", "case2_embproj_rotary_value", "case3_seq_eq_max_positions"])
def test_forward_matches_transformers(case):
    io = read_safetensors(os.path.join(FIXTURES, case, "io.safetensors"))
    m = roformer.Model.from_pretrained(os.path.join(FIXTURES, case))
    out = m.forward(io["input_ids"], io["attention_mask"], io["token_type_ids"])
    assert out["last_hidden_state"].shape == io["last_hidden_state"].shape
    assert close(out["last_hidden_state"], io["last_hidden_state"])
    assert close(out["logits"], io["logits"])


def test_tokenizer_matches_transformers():
    tok = roformer.Tokenizer.from_pretrained(os.path.join(FIXTURES, "tokenizer"))
    cases = json.load(open(os.path.join(FIXTURES, "tokenizer", "cases.json"), encoding="utf-8"))
    for c in cases:
        assert tok.tokenize(c["text"]) == c["tokens"], c["text"]
        assert tok(c["text"])["input_ids"] == c["input_ids"], c["text"]
    enc = tok("hello world", "今天天气", max_length=6)
    assert len(enc["input_ids"]) == 6 and enc["token_type_ids"][-1] == 1


def run_cli(*args, stdin=""):
    return [json.loads(line) for line in subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True,
                                                        check=True).stdout.splitlines()]


@pytest.mark.skipif(not CLI, reason="ROFORMER_CLI (the roformer binary) is not set")
def test_embed_fill_mask_and_classify_equal_the_command_line(tmp_path):
    texts = ["hello world", "今天天气非常好", "the quick brown fox"]
    m = roformer.Model.from_pretrained(CASE1)
    ours = m.embed(texts, pooling="mean", normalize=True)
    cli = run_cli("embed", "--model", CASE1, "--pooling", "mean", "--normalize", stdin="\n".join(texts) + "\n")
    assert np.abs(ours - np.array([c["embedding"] for c in cli])).max() < 1e-6
    masked = ["今天[MASK]气非常好", "hello [MASK]"]
    ours = m.fill_mask(masked, top_k=3)
    cli = run_cli("fill-mask", "--model", CASE1, "--top-k", "3", stdin="\n".join(masked) + "\n")
    for o, k in zip(ours, cli):
        assert [(p["token"], p["sequence"]) for p in o[0]] == [(p["token"], p["sequence"]) for p in k]
        assert max(abs(p["score"] - q["score"]) for p, q in zip(o[0], k)) < 1e-9
    sims = m.similarity([("hello world", "hello")])
    assert -1 <= sims[0] <= 1
    # A classifier fine-tuned by the command line, served from Python.
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"sentence": t, "label": ["a", "b"][i % 2]}) + "\n"
                            for i, t in enumerate(texts * 4)), encoding="utf-8")
    subprocess.run([CLI, "finetune", "--model", CASE1, "--train", str(data), "--validation", str(data), "--out",
                    str(tmp_path / "ft"), "--epochs", "1", "--batch", "4", "--no-progress"], check=True,
                   capture_output=True)
    c = roformer.Model.from_pretrained(str(tmp_path / "ft" / "best"))
    assert c.labels == ["a", "b"]
    ours = c.classify(texts)
    cli = run_cli("classify", "--model", str(tmp_path / "ft" / "best"), stdin="\n".join(texts) + "\n")
    for o, k in zip(ours, cli):
        assert o["label"] == k["label"] and abs(o["score"] - k["score"]) < 1e-9


def test_errors_are_value_errors_with_the_engine_message(tmp_path):
    with pytest.raises(ValueError, match="no such model directory"):
        roformer.Model.from_pretrained(str(tmp_path / "missing"))
    m = roformer.Model.from_pretrained(CASE1)
    with pytest.raises(ValueError, match="mask"):
        m.fill_mask(["no mask here"])
    with pytest.raises(ValueError, match="classif"):
        m.classify(["x"])
    with pytest.raises(ValueError, match="shape"):
        m.forward(np.zeros((2, 3), np.int64), np.ones((2, 4), np.int64))
    with pytest.raises(ValueError):
        m.forward(np.full((1, 3), 10**6, np.int64))
